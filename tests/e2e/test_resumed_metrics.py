"""Issue 55, item 0: a resumed run's first metrics record says which steps it averages (``steps``: [first, last]),
so the steps of its logging window that ran before the resume are not silently missing."""

from megamlm.training.metrics_file import read_metrics


def test_every_train_record_names_the_steps_it_averages(tiny, tmp_path):
    common = ["--train-iters", "10", "--log-interval", "5"]
    tiny(*common, "--save", tmp_path / "straight")
    tiny(*common, "--save", tmp_path / "resumed", "--exit-interval", "7")
    tiny(*common, "--save", tmp_path / "resumed")
    straight = read_metrics(tmp_path / "straight", kind="train")
    resumed = read_metrics(tmp_path / "resumed", kind="train")
    assert [(r["step"], r["steps"]) for r in straight] == [(5, [1, 5]), (10, [6, 10])]
    # The launch before stopped after step 7, inside the window 6-10 (no record of steps 6-7): the relaunch's record
    # at step 10 says it averages steps 8-10 only.
    assert [(r["step"], r["steps"]) for r in resumed] == [(5, [1, 5]), (10, [8, 10])]

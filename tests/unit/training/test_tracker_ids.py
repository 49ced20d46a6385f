"""A run's tracker runs across launches (training/trackers.py): which launch continues them, and their file."""

from megamlm.training.trackers import TRACKER_IDS, TrackedRun, continues_its_run, read_tracker_ids, write_tracker_ids


def test_a_resume_continues_and_a_new_run_or_a_branch_in_the_folder_does_not(tmp_path):
    save = str(tmp_path / "run")
    assert continues_its_run({"lineage": []}, save, 10)  # resumed from its own checkpoint
    assert continues_its_run({"lineage": [{"kind": "resume", "parent_run": save, "step": 10}]}, save, 10)  # noted
    assert continues_its_run({"lineage": [{"kind": "branch", "parent_run": "/other", "step": 4}]}, save, 10)
    assert not continues_its_run({"lineage": []}, save, 0)  # a new run in the folder
    assert not continues_its_run({"lineage": []}, None, 10)
    assert not continues_its_run({"lineage": [{"kind": "branch", "parent_run": save, "step": 10}]}, save, 10)


def test_the_ids_file_is_written_whole_and_a_branch_reads_its_parents(tmp_path):
    parent = tmp_path / "parent"
    write_tracker_ids(parent, {"mlflow": {"run_id": "abc"}, "wandb": {"id": "x1"}})
    assert read_tracker_ids(parent) == {"mlflow": {"run_id": "abc"}, "wandb": {"id": "x1"}}
    assert [p.name for p in parent.iterdir()] == [TRACKER_IDS]  # no temporary file left
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / TRACKER_IDS).write_text('{"mlflow": ')
    assert read_tracker_ids(tmp_path / "torn") == {} and read_tracker_ids(None) == {}
    branch = TrackedRun("b", "p", None, {"lineage": [{"kind": "branch", "parent_run": str(parent)}]}, tmp_path / "b")
    assert branch.parent_ids("mlflow") == {"run_id": "abc"} and branch.parent_ids("trackio") == {}


def test_the_metrics_file_says_which_steps_an_earlier_launch_ran_past_its_checkpoint(tmp_path):
    from megamlm.training.metrics_file import MetricsFile, read_metrics

    first = MetricsFile(tmp_path, 0)
    for step in range(1, 13):
        first.append("train", step, loss=1.0)
    resumed = MetricsFile(tmp_path, 10)  # crashed after step 12, resumed from step 10's checkpoint
    assert resumed.dropped_through == 12 and [r["step"] for r in read_metrics(tmp_path)] == list(range(1, 11))
    assert MetricsFile(tmp_path, 10).dropped_through == 10 and MetricsFile(tmp_path / "new", 0).dropped_through == 0


class Recording:
    """A tracker that records the steps it gets."""

    def __init__(self, name: str, rewinds: bool = False, started_anew: bool = False):
        self.name, self.rewinds, self.started_anew, self.steps = name, rewinds, started_anew, []

    def start(self, run) -> None:
        self.ids = {"id": self.name}

    def scalars(self, step: int, values: dict) -> None:
        self.steps.append(step)


def test_steps_an_earlier_launch_sent_reach_only_the_trackers_that_need_them(tmp_path):
    from megamlm.training.trackers import Trackers

    kept, tensorboard, added, gone = (Recording("kept"), Recording("tensorboard", rewinds=True), Recording("added"),
                                      Recording("gone", started_anew=True))
    trackers = Trackers([kept, tensorboard, added, gone])
    previous = {"kept": {"id": "k"}, "tensorboard": {"log_dir": "x"}, "gone": {"id": "old"}}
    trackers.start(TrackedRun("r", "p", None, {}, tmp_path, start_step=10, previous=previous, sent_through=12))
    for step in range(11, 15):
        trackers.record("train", step, {"loss": 1.0})
    assert kept.steps == [13, 14]  # its run holds 11-12 from the launch that crashed after step 12
    assert tensorboard.steps == added.steps == gone.steps == [11, 12, 13, 14]
    assert read_tracker_ids(tmp_path)["gone"] == {"id": "gone"} and read_tracker_ids(tmp_path)["added"]

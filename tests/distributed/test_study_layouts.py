"""Study runs under parallel layouts, against the single process.

- validation scores (MLM loss and accuracy, CLM loss) are the same in one process, at TP=2 and at PP=2 (1F1B and
  interleaved 1F1B: forward only through the schedule's ``eval``);
- a CLM run branched into CLM-then-MLM at its switch step reproduces the straight run bitwise on 2 ranks (FSDP over
  two data-parallel ranks), validation included.
"""

from __future__ import annotations

import pytest
from harness import spawn
from trainer_checks import FLAGS, pretrain_on_rank, read_ranks, run_pretrain

from megamlm.training.metrics_file import read_metrics

pytestmark = pytest.mark.distributed

VALIDATION = ["--split", "969,30,1", "--eval-interval", "2", "--eval-iters", "2"]


def validations(save) -> dict[int, dict]:
    return {r["step"]: r for r in read_metrics(save, kind="validation")}


@pytest.fixture(scope="module")
def single(cache, tmp_path_factory) -> dict[int, dict]:
    """The validation records of the single-process run."""
    save = tmp_path_factory.mktemp("single") / "run"
    run_pretrain(FLAGS + VALIDATION + ["--save", save])
    return validations(save)


@pytest.mark.parametrize("layout", [["--tp", "2"], ["--pp", "2"], ["--pp", "2", "--pipeline-schedule",
                                                                  "interleaved_1f1b", "--num-layers-per-virtual-stage",
                                                                  "1"]], ids=["tp2", "pp2", "pp2-interleaved"])
def test_validation_scores_are_the_same_in_one_process_and_at_tp2_and_pp2(single, tmp_path, layout):
    spawn(pretrain_on_rank, 2, FLAGS + VALIDATION + layout + ["--save", tmp_path / "parallel"], str(tmp_path))
    parallel = validations(tmp_path / "parallel")
    assert sorted(single) == sorted(parallel) == [2, 4]  # every 2 steps; 2 is also the switch, 4 the end
    for step in (2, 4):
        for name in ("mlm_loss", "clm_loss", "mlm_accuracy"):
            assert parallel[step][name] == pytest.approx(single[step][name], rel=1e-4), (step, name)
        assert parallel[step]["validation_samples"] == single[step]["validation_samples"] == 16


def test_a_branch_on_two_ranks_reproduces_the_straight_run_bitwise(single, tmp_path):
    straight_flags = FLAGS + VALIDATION + ["--switch-step", "2"]  # FLAGS' --switch 0.5 of 4 steps, as a step
    straight_flags.remove("--switch")
    straight_flags.remove("0.5")
    clm = [f if f != "clm_then_mlm" else "clm" for f in FLAGS + VALIDATION]  # one objective: no switch to place
    switch = clm.index("--switch")
    del clm[switch:switch + 2]
    for name in ("straight", "parent", "branch"):
        (tmp_path / name).mkdir()
    spawn(pretrain_on_rank, 2, straight_flags + ["--save", tmp_path / "straight" / "run"], str(tmp_path / "straight"))
    spawn(pretrain_on_rank, 2, clm + ["--save", tmp_path / "clm", "--save-at", "2", "--exit-interval", "2"],
          str(tmp_path / "parent"))
    spawn(pretrain_on_rank, 2, straight_flags + ["--load", tmp_path / "clm" / "iter_0000002", "--save",
                                                 tmp_path / "branch" / "run"], str(tmp_path / "branch"))
    straight, parent, branch = (read_ranks(tmp_path / name, 2) for name in ("straight", "parent", "branch"))
    for rank in range(2):
        assert branch[rank]["start_step"] == 2
        assert {s: parent[rank]["losses"][s] for s in (1, 2)} == {s: straight[rank]["losses"][s] for s in (1, 2)}
        assert {s: branch[rank]["losses"][s] for s in (3, 4)} == {s: straight[rank]["losses"][s] for s in (3, 4)}
        assert [branch[rank]["objectives"][s] for s in (3, 4)] == ["mlm", "mlm"]
    # Validation under FSDP over 2 data-parallel ranks: the branch's is the straight run's, and the single process's.
    scores = validations(tmp_path / "straight" / "run")
    assert validations(tmp_path / "branch" / "run")[4] == scores[4]
    for step in (2, 4):
        for name in ("mlm_loss", "clm_loss", "mlm_accuracy"):
            assert scores[step][name] == pytest.approx(single[step][name], rel=1e-4), (step, name)

"""The trainer under parallel layouts, against single-process runs of the same flags.

- data order and the objective switch: at world size 2 (DP=2) the ranks consume exactly the global
  batches of the single-process run, switch CLM -> MLM at the same step, and reach the same losses;
- a checkpoint saved at TP=2 x PP=2 resumes in a single process, and under FSDP2 at DP=2, with the same
  next-step losses as the uninterrupted 4-rank run; a PP=2 checkpoint resumes at PP=2 with the single process's.
"""

from __future__ import annotations

import pytest
from harness import spawn
from trainer_checks import FLAGS, pretrain_on_rank, read_ranks, run_pretrain

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def single(cache):
    """The single-process reference run (also tokenizes the bundled corpus once for the spawned ranks)."""
    return run_pretrain(FLAGS)


def test_data_parallel_run_consumes_the_same_samples_and_switches_at_the_same_step(single, tmp_path):
    spawn(pretrain_on_rank, 2, FLAGS, str(tmp_path))
    ranks = read_ranks(tmp_path, 2)
    assert single["switch_step"] == 2
    for step in range(1, 5):
        # Rank 0 holds the first half of each global batch, rank 1 the second half.
        assert ranks[0]["sample_ids"][step] + ranks[1]["sample_ids"][step] == single["sample_ids"][step]
        for r in ranks:
            assert r["objectives"][step] == single["objectives"][step]
            assert r["losses"][step] == pytest.approx(single["losses"][step], rel=1e-4)
    assert [single["objectives"][s] for s in range(1, 5)] == ["clm", "clm", "mlm", "mlm"]


@pytest.mark.slow
def test_checkpoint_saved_at_tp2_pp2_resumes_at_tp1_and_fsdp_dp2_with_the_same_losses(single, tmp_path):
    save = tmp_path / "ckpt"
    layout = ["--tp", "2", "--pp", "2", "--save", save, "--save-interval", "2"]
    spawn(pretrain_on_rank, 4, FLAGS + layout, str(tmp_path))
    ranks = read_ranks(tmp_path, 4)
    for r in ranks:
        assert r["objectives"] == single["objectives"]
        for step in range(1, 5):
            assert r["losses"][step] == pytest.approx(single["losses"][step], rel=1e-4)
    resumed = run_pretrain(FLAGS + ["--load", save / "iter_0000002"])
    assert resumed["start_step"] == 2
    for step in (3, 4):
        assert resumed["losses"][step] == pytest.approx(ranks[0]["losses"][step], rel=1e-4), step
        assert resumed["objectives"][step] == ranks[0]["objectives"][step]
    # The same shards, resharded onto FSDP2 over two data-parallel ranks.
    out = tmp_path / "dp2"
    out.mkdir()
    spawn(pretrain_on_rank, 2, FLAGS + ["--load", save / "iter_0000002"], str(out))
    for r in read_ranks(out, 2):
        assert r["start_step"] == 2
        for step in (3, 4):
            assert r["losses"][step] == pytest.approx(ranks[0]["losses"][step], rel=1e-4), step


def test_a_pipeline_checkpoint_resumes_into_the_pipeline_with_the_single_process_losses(single, tmp_path):
    """PP=2 saved at step 2, resumed at PP=2: each stage's optimizer gets its own parameter groups back (DCP keeps
    one rank's ``param_groups``; before the fix the first resumed step failed with KeyError: 'betas')."""
    save, first, out = tmp_path / "ckpt", tmp_path / "first", tmp_path / "resumed"
    first.mkdir()
    out.mkdir()
    spawn(pretrain_on_rank, 2, FLAGS + ["--pp", "2", "--save", save, "--save-interval", "2", "--exit-interval", "2"],
          str(first))
    spawn(pretrain_on_rank, 2, FLAGS + ["--pp", "2", "--save", save], str(out))
    for r in read_ranks(out, 2):
        assert r["start_step"] == 2
        for step in (3, 4):
            assert r["losses"][step] == pytest.approx(single["losses"][step], rel=1e-4), step

"""Issue 44, items 4 and 6, under a parallel layout against one process (gloo, FSDP2 over DP=2):

- a batch-size ramp-up: the two ranks consume exactly the global batches of the single-process run, at the ramp's
  sizes, with the same losses;
- StableAdamW: a checkpoint of the single-process run (its moments and the step count optimi keeps in each parameter
  group) resumes resharded onto FSDP2 at DP=2 with the next steps' losses of the uninterrupted run.
"""

from __future__ import annotations

import pytest
from harness import spawn
from helpers import SPLITTABLE_SHAPE
from trainer_checks import pretrain_on_rank, read_ranks, run_pretrain

pytestmark = pytest.mark.distributed

optimi = pytest.importorskip("optimi", reason='StableAdamW comes from torch-optimi: pip install "megamlm[optimi]"')

# Ramp 4 -> 8 over 8 samples: global batches of 4, 4, 8, 8 (micro-batches of 2 on each of two ranks, then 2 each).
# A large LR and no gradient clipping: StableAdamW's own update clipping then engages (a tensor's RMS of g^2 / v above
# 1 on about a quarter of its updates here), which FSDP2's shards must compute over the whole tensor to agree.
FLAGS = [*SPLITTABLE_SHAPE, "--micro-batch-size", "2", "--global-batch-size", "8", "--rampup-batch-size", "4", "4",
         "8", "--train-iters", "4", "--optimizer", "stableadamw", "--lr", "0.03", "--clip-grad", "0",
         "--lr-warmup-iters", "1", "--lr-wsd-decay-iters", "1", "--log-interval", "1"]


@pytest.fixture(scope="module")
def single(cache, tmp_path_factory):
    save = tmp_path_factory.mktemp("single") / "ckpt"
    return run_pretrain(FLAGS + ["--save", str(save), "--save-interval", "2"]) | {"save": save}


def test_a_ramp_up_under_dp2_consumes_the_single_process_batches(single, tmp_path):
    spawn(pretrain_on_rank, 2, FLAGS, str(tmp_path))
    ranks = read_ranks(tmp_path, 2)
    assert [len(single["sample_ids"][step]) for step in range(1, 5)] == [4, 4, 8, 8]
    for step in range(1, 5):
        # Rank 0 holds the first half of each global batch, rank 1 the second half, at every size of the ramp.
        assert ranks[0]["sample_ids"][step] + ranks[1]["sample_ids"][step] == single["sample_ids"][step]
        for r in ranks:
            assert r["losses"][step] == pytest.approx(single["losses"][step], rel=1e-4), step


def test_stableadamw_state_saved_by_one_process_resumes_resharded_on_fsdp_dp2(single, tmp_path):
    spawn(pretrain_on_rank, 2, FLAGS + ["--load", str(single["save"] / "iter_0000002")], str(tmp_path))
    for r in read_ranks(tmp_path, 2):
        assert r["start_step"] == 2 and sorted(r["losses"]) == [3, 4]
        for step in (3, 4):
            assert r["losses"][step] == pytest.approx(single["losses"][step], rel=1e-4), step

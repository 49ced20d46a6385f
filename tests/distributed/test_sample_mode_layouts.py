"""The document sample modes under data parallelism: at DP=2 the ranks train exactly the single process's rows and
reach its losses, whatever the mode (the sampler hands out sample ids; a row is a pure function of its id)."""

from __future__ import annotations

import pytest
from harness import spawn
from trainer_checks import FLAGS, pretrain_on_rank, read_ranks, run_pretrain

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("mode", ["packed_documents", "document_per_row"])
def test_data_parallel_ranks_train_the_single_process_rows(cache, tmp_path, mode):
    flags = [*FLAGS, "--sample-mode", mode]
    single = run_pretrain(flags)
    spawn(pretrain_on_rank, 2, flags, str(tmp_path))
    ranks = read_ranks(tmp_path, 2)
    for step in range(1, 5):
        assert ranks[0]["sample_ids"][step] + ranks[1]["sample_ids"][step] == single["sample_ids"][step]
        for r in ranks:
            assert r["objectives"][step] == single["objectives"][step]
            assert r["losses"][step] == pytest.approx(single["losses"][step], rel=1e-4)

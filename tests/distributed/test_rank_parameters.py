"""Issue 23, item 6: under --tp 2 the start-up line counts the parameters this rank holds (its shards), the
dry run's per-rank count, not the whole model's."""

from __future__ import annotations

import pytest
from harness import spawn
from parameter_checks import check_rank_parameters

pytestmark = pytest.mark.distributed


def test_the_start_up_count_is_this_ranks_shard_under_tp(cache, tmp_path):
    spawn(check_rank_parameters, 2, str(tmp_path))

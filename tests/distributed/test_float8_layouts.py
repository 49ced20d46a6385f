"""--fp8 composes with FSDP2: two ranks train exactly like one process with the same float8 layers (gloo, CPU)."""

from __future__ import annotations

import importlib.util

import pytest
from float8_checks import check_fp8_fsdp
from harness import spawn

pytestmark = [pytest.mark.distributed,
              pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")]


def test_fp8_under_fsdp2_matches_fp8_in_one_process():
    spawn(check_fp8_fsdp, 2)

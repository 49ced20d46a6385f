"""Every parallel layout against the single-process run: first-step loss and every parameter's gradient,
then the gradient norm and the loss after one AdamW update (clipping and the optimizer on sharded
parameters), under both MLM and CLM. Gloo on CPU; each layout is one spawned world checking both objectives.
"""

from __future__ import annotations

import pytest

from harness import spawn
from layout_checks import check_layout

pytestmark = pytest.mark.distributed

LAYOUTS = {
    "tp2": (2, dict(tp=2)),
    "pp2_1f1b": (2, dict(pp=2)),
    "pp2_interleaved": (2, dict(pp=2, pipeline_schedule="interleaved_1f1b", num_layers_per_virtual_stage=1)),
    "fsdp_dp2": (2, dict()),
    "ddp_dp2": (2, dict(data_parallel_impl="ddp")),
}
RECOMPUTE = {"fsdp_dp2"}  # activation checkpointing must not change a single number: checked on one layout
SLOW_LAYOUTS = {
    "tp2_x_fsdp2": (4, dict(tp=2)),
    "hsdp_2x2": (4, dict(dp_replicate=2)),
    "tp2_pp2": (4, dict(tp=2, pp=2)),
}


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout_matches_single_process(name):
    world, layout = LAYOUTS[name]
    spawn(check_layout, world, layout, name in RECOMPUTE)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_LAYOUTS)
def test_four_rank_layout_matches_single_process(name):
    world, layout = SLOW_LAYOUTS[name]
    spawn(check_layout, world, layout)

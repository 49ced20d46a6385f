"""Every parallel layout against the single-process run: first-step loss and every parameter's gradient,
then the gradient norm and the loss after one AdamW update (clipping and the optimizer on sharded
parameters), under both MLM and CLM. Gloo on CPU; each layout is one spawned world checking both objectives.
"""

from __future__ import annotations

import pytest
from harness import spawn
from layout_checks import check_layouts, check_mntp_layouts

pytestmark = pytest.mark.distributed

LAYOUTS = {
    "tp2": (2, dict(tp=2)),
    "pp2_1f1b": (2, dict(pp=2)),
    "pp2_interleaved": (2, dict(pp=2, pipeline_schedule="interleaved_1f1b", num_layers_per_virtual_stage=1)),
    "fsdp_dp2": (2, dict()),
    "ddp_dp2": (2, dict(data_parallel_impl="ddp")),
}
RECOMPUTE = {"fsdp_dp2"}  # activation checkpointing must not change a single number: checked on one layout
FOUR_RANK_LAYOUTS = {"tp2_x_fsdp2": (4, dict(tp=2))}
SLOW_LAYOUTS = {
    "hsdp_2x2": (4, dict(dp_replicate=2)),
    "tp2_pp2": (4, dict(tp=2, pp=2)),
    "pp2_x_fsdp2": (4, dict(pp=2)),
}


def test_two_rank_layouts_match_single_process():
    """TP=2, PP=2 (1F1B and interleaved), FSDP2 DP=2 (with --recompute) and DDP DP=2, in one 2-rank world."""
    spawn(check_layouts, 2, [(name, layout, name in RECOMPUTE) for name, (_, layout) in LAYOUTS.items()])


def test_mntp_in_the_two_rank_layouts_matches_single_process():
    """MNTP under TP=2, PP=2 (1F1B) and FSDP2 DP=2, in one 2-rank world: its shifted sparse targets through the
    vocabulary-parallel loss and the pipeline's last stage."""
    spawn(check_mntp_layouts, 2, [(name, LAYOUTS[name][1]) for name in ("tp2", "pp2_1f1b", "fsdp_dp2")])


def test_tensor_parallel_times_fsdp_on_four_ranks_matches_single_process():
    """TP=2 x FSDP2 DP=2 in the default suite: the 4-rank layout that composes DTensor TP with FSDP2, under MLM (CLM's
    causal mask and shifted targets meet TP and FSDP2 each in the two-rank layouts; the slow test adds CLM here)."""
    spawn(check_layouts, 4, [(name, layout, False, "none", ("mlm",))
                             for name, (_, layout) in FOUR_RANK_LAYOUTS.items()])


def test_whole_model_compile_composes_with_fsdp_and_tensor_parallelism():
    """--compile model under FSDP2 DP=2 (with activation checkpointing) under MLM, and under TP=2 (where it compiles
    the blocks) under CLM, gives the single-process run's losses, gradients and update (the slow test compiles each
    layout under the other objective too)."""
    spawn(check_layouts, 2, [("fsdp_dp2_compiled", dict(), True, "model", ("mlm",)),
                             ("tp2_compiled", dict(tp=2), False, "model", ("clm",))])


@pytest.mark.slow
def test_compile_modes_compose_with_ddp_and_pipelines():
    """--compile model under DDP, and under PP=2 (where it compiles the blocks); --compile blocks under FSDP2."""
    spawn(check_layouts, 2, [("ddp_dp2_compiled", dict(data_parallel_impl="ddp"), False, "model"),
                             ("pp2_compiled", dict(pp=2), False, "model"),
                             ("fsdp_dp2_blocks", dict(), False, "blocks")])


@pytest.mark.slow
def test_the_other_objective_under_tp_times_fsdp_and_compiled_fsdp_and_tp():
    """What the default suite's four-rank and compiled tests leave out: CLM under TP=2 x FSDP2 DP=2, MLM compiled
    under TP=2 and CLM compiled under FSDP2 DP=2."""
    spawn(check_layouts, 4, [(name, layout, False, "none", ("clm",))
                             for name, (_, layout) in FOUR_RANK_LAYOUTS.items()])
    spawn(check_layouts, 2, [("fsdp_dp2_compiled", dict(), True, "model", ("clm",)),
                             ("tp2_compiled", dict(tp=2), False, "model", ("mlm",))])


@pytest.mark.slow
def test_four_rank_layouts_match_single_process():
    """Hybrid sharding 2x2, TP=2 x PP=2 and PP=2 x FSDP2 DP=2, in one 4-rank world."""
    spawn(check_layouts, 4, [(name, layout, False) for name, (_, layout) in SLOW_LAYOUTS.items()])

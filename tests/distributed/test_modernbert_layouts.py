"""The ModernBERT block (LayerNorms, embedding norm, prediction head, decoder bias, sliding and global layers with
their own RoPE bases, packed documents with restarting positions) trains MLM steps under TP=2, PP=2 and FSDP2 DP=2
(and, in the slow suite, TP x PP, PP x FSDP2 and HSDP on 4 ranks) with the single-process losses, gradient norm and
validation numbers: the prediction head replicated and run on the predicted rows, the LM head's bias split with its
rows, the embedding norm sequence-parallel on the first stage."""

from __future__ import annotations

import pytest
from harness import spawn
from modernbert_layout_checks import FOUR_RANK_LAYOUTS, LAYOUTS, check_layouts, save_weights, train

pytestmark = pytest.mark.distributed
pytest.importorskip("transformers")


def _alike(tmp_path, world: int, layouts: dict) -> dict:
    """The single process's numbers, after every layout's ranks matched them (``check_layouts`` raises in a rank
    where a loss, the first gradient norm or a validation number differs, and ``spawn`` raises with it)."""
    from megamlm.parallel.dims import ParallelDims

    weights = str(tmp_path / "weights.pt")
    save_weights(weights)
    expected = train(weights, ParallelDims(world_size=1), None, world)  # the global batch as `world` micro-batches
    spawn(check_layouts, world, layouts, weights, expected)
    return expected


def test_modernbert_block_trains_alike_in_every_layout(tmp_path):
    expected = _alike(tmp_path, 2, LAYOUTS)
    assert expected["losses"][-1] < expected["losses"][0]  # the reference trains, so equal losses mean something


@pytest.mark.slow
def test_modernbert_block_trains_alike_with_tp_and_fsdp_under_a_pipeline(tmp_path):
    """TP=2 x PP=2 (the head and its replicated gradients on a TP pair of the last stage), PP=2 x FSDP2 DP=2, and
    HSDP (2 replicas x 2 shards)."""
    expected = _alike(tmp_path, 4, FOUR_RANK_LAYOUTS)
    assert expected["losses"][-1] < expected["losses"][0]

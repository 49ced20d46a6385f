"""The ModernBERT block (LayerNorms, embedding norm, prediction head, decoder bias, sliding and global layers with
their own RoPE bases, packed documents with restarting positions) trains MLM steps under TP=2, PP=2 and FSDP2 DP=2
with the single-process losses, gradient norm and validation numbers: the prediction head replicated and run on the
predicted rows, the LM head's bias split with its rows, the embedding norm sequence-parallel on the first stage."""

from __future__ import annotations

import pytest
from harness import spawn
from modernbert_layout_checks import LAYOUTS, check_layouts, save_weights, train

pytestmark = pytest.mark.distributed
pytest.importorskip("transformers")


def test_modernbert_block_trains_alike_in_every_layout(tmp_path):
    from megamlm.parallel.dims import ParallelDims

    weights = str(tmp_path / "weights.pt")
    save_weights(weights)
    world = 2
    expected = train(weights, ParallelDims(world_size=1), None, world)  # the global batch as 2 micro-batches
    assert expected["losses"][-1] < expected["losses"][0]
    spawn(check_layouts, world, LAYOUTS, weights, expected)

"""The decoder features of Qwen3 and Gemma 3 in megamlm's model, each off by default: sliding-window masks as
transformers defines them (composed with documents), the fallback of other attention backends to them, the
attention scale, and the parameters each feature adds. (Parity with transformers:
tests/unit/hf/test_qwen3_gemma3.py.)"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import tiny_args

from megamlm import kernels
from megamlm.model.attention_backends import attention, window_mask
from megamlm.model.transformer import Transformer


def test_window_masks_are_transformers_definitions():
    seq, w = 9, 3
    bidirectional = window_mask(seq, w, False, None, "cpu")[0, 0]
    causal = window_mask(seq, w, True, None, "cpu")[0, 0]
    for i in range(seq):
        for j in range(seq):
            assert bool(bidirectional[i, j]) == (abs(i - j) < w)
            assert bool(causal[i, j]) == (0 <= i - j < w)  # the last w tokens, itself included
    docs = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 1]])
    both = window_mask(seq, w, False, docs, "cpu")[0, 0]
    for i in range(seq):
        for j in range(seq):
            assert bool(both[i, j]) == (abs(i - j) < w and bool(docs[0, i] == docs[0, j]))


def _naive(q, k, v, mask, scale):
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2)


@pytest.mark.parametrize("causal", [False, True])
def test_windowed_attention_with_scale_and_documents(causal):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 10, 4, 8), torch.randn(2, 10, 2, 8), torch.randn(2, 10, 2, 8)
    docs = torch.tensor([[0] * 6 + [1] * 4, [0] * 10])
    out = attention(q, k, v, causal=causal, document_ids=docs, window=4, scale=0.3)
    want = _naive(q, k, v, window_mask(10, 4, causal, docs, "cpu"), 0.3)
    assert (out - want).abs().max() < 1e-5
    # a backend that does not cover windows (FlexAttention: GPU only) falls back to the same SDPA mask
    assert torch.equal(attention(q, k, v, causal=causal, document_ids=docs, window=4, scale=0.3, backend="flex"), out)
    # the scale reaches the full-attention paths too
    full = attention(q, k, v, causal=causal, scale=0.3)
    assert (full - _naive(q, k, v, window_mask(10, 10, causal, None, "cpu"), 0.3)).abs().max() < 1e-5


def test_features_are_off_by_default_and_add_their_parameters():
    plain = Transformer(tiny_args(num_layers=4))
    names = set(plain.state_dict())
    assert not any("q_norm" in n or "output_layernorm" in n for n in names)
    gemma = Transformer(tiny_args(qk_norm=True, sublayer_output_norms=True, mlp_activation="geglu",
                                  scale_embeddings=True, query_pre_attn_scalar=24, sliding_window=3,
                                  layer_types="sliding,full,sliding,full", local_rope_theta=100.0, num_layers=4))
    added = set(gemma.state_dict()) - names
    assert added == {f"layers.{i}.{n}.weight" for i in range(4)
                     for n in ("self_attn.q_norm", "self_attn.k_norm", "attn_output_layernorm", "mlp_output_layernorm")}
    assert [gemma.layers[str(i)].sliding for i in range(4)] == [True, False, True, False]
    assert gemma.layers["0"].self_attn.window == 3 and gemma.layers["1"].self_attn.window is None
    assert gemma.layers["0"].self_attn.scale == 24 ** -0.5
    assert not torch.equal(gemma.rope_cos_local, gemma.rope_cos)
    assert gemma.embed_scale[torch.bfloat16] == torch.tensor(math.sqrt(gemma.args.hidden_size)).bfloat16().item()
    ids = torch.randint(0, 100, (1, 12))
    assert torch.isfinite(gemma(ids, causal=False)).all() and torch.isfinite(gemma(ids, causal=True)).all()


def test_geglu_is_tanh_gelu_on_every_backend():
    gate, up = torch.randn(3, 5), torch.randn(3, 5)
    want = torch.nn.functional.gelu(gate, approximate="tanh") * up
    for backend in ("auto", "reference", "chunked"):
        assert torch.equal(kernels.geglu(gate, up, backend=backend), want)


@pytest.mark.parametrize("settings, message", [
    (dict(layer_types="sliding,full,full,full"), "sliding_window is not set"),
    (dict(layer_types="full,local,full,full", sliding_window=4), "unknown layer type 'local'"),
    (dict(mlp_activation="relu"), "unknown MLP activation"),
])
def test_bad_feature_settings_are_named(settings, message):
    with pytest.raises(ValueError, match=message):
        tiny_args(**settings)


def test_layer_types_of_another_length_is_refused_when_built():
    with pytest.raises(ValueError, match="names 3 layers, the model has 2"):
        Transformer(tiny_args(layer_types="full,full,full"))

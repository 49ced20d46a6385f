"""Attention backends against a dense, loop-built masked reference (forward and gradients)."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from megamlm.extras import detect_optional_extras
from megamlm.model import attention_backends, attention_table
from megamlm.model.attention_backends import (
    attention,
    dense_document_mask,
    segment_ids,
    varlen_boundaries,
)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DOCS = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2], [5, 5, 5, 5, 5, 5, 7, 7, 5]])


def reference_attention(q, k, v, causal, document_ids=None):
    """Plain softmax attention, the allowed keys of each query listed one by one."""
    batch, seq, heads, dim = q.shape
    group = heads // k.shape[2]
    out = torch.zeros_like(q)
    for b in range(batch):
        for i in range(seq):
            allowed = []
            for j in range(seq):
                if causal and j > i:
                    continue
                if document_ids is not None:
                    lo, hi = sorted((i, j))
                    if not bool((document_ids[b, lo : hi + 1] == document_ids[b, i]).all()):
                        continue  # a different document, or the same id after another document
                allowed.append(j)
            for h in range(heads):
                keys = k[b, allowed, h // group]
                scores = keys @ q[b, i, h] / math.sqrt(dim)
                out[b, i, h] = torch.softmax(scores.float(), dim=0).to(v.dtype) @ v[b, allowed, h // group]
    return out


def _qkv(batch=2, seq=9, heads=4, kv_heads=2, dim=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    make = lambda h: torch.randn(batch, seq, h, dim, generator=g).to(DEVICE, dtype).requires_grad_()  # noqa: E731
    return make(heads), make(kv_heads), make(kv_heads)


def _compare(backend, causal, document_ids, dtype=torch.float32, tol=None, dim=16):
    tol = tol or dict(atol=1e-5, rtol=1e-4)
    q, k, v = _qkv(dtype=dtype, dim=dim)
    ids = None if document_ids is None else document_ids.to(DEVICE)
    out = attention(q, k, v, causal, ids, backend=backend)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    want = reference_attention(q2, k2, v2, causal, ids)
    torch.testing.assert_close(out, want, **tol)
    upstream = torch.randn_like(want)
    grads = torch.autograd.grad((out * upstream).sum(), (q, k, v))
    want_grads = torch.autograd.grad((want * upstream).sum(), (q2, k2, v2))
    for got, expected in zip(grads, want_grads):
        torch.testing.assert_close(got, expected, **tol)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("with_documents", [False, True])
def test_sdpa_matches_reference(causal, with_documents):
    _compare("sdpa", causal, DOCS if with_documents else None)


def test_sdpa_with_documents_and_a_small_head_dim_uses_the_dense_mask():
    # FlexAttention refuses head dims below 16; on GPU "sdpa" then keeps the dense mask.
    _compare("sdpa", True, DOCS, dim=8)


def test_document_mask_is_block_diagonal_and_treats_a_returning_id_as_a_new_document():
    mask = dense_document_mask(DOCS, causal=False)[:, 0]
    assert mask.shape == (2, 9, 9)
    assert mask[0, 0, 2] and not mask[0, 2, 3] and mask[0, 4, 3] and not mask[0, 5, 4]
    assert mask[1, 0, 5] and not mask[1, 8, 0] and not mask[1, 8, 6] and mask[1, 8, 8]
    causal = dense_document_mask(DOCS, causal=True)[:, 0]
    assert torch.equal(causal, mask & torch.ones(9, 9, dtype=torch.bool).tril())
    assert segment_ids(DOCS).tolist()[1] == [1, 1, 1, 1, 1, 1, 2, 2, 3]


def test_varlen_boundaries_split_rows_and_documents():
    cu, longest = varlen_boundaries(DOCS)
    assert cu.dtype == torch.int32
    assert cu.tolist() == [0, 3, 5, 9, 15, 17, 18]
    assert longest == 6


def test_bad_inputs_raise_clear_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="choose one of auto, sdpa, sdpa_flash, sdpa_cudnn, flex, flash"):
        attention(q, k, v, True, backend="xformers")
    with pytest.raises(ValueError, match="'auto' must be resolved per attention mode"):
        attention(q, k, v, True, backend="auto")
    with pytest.raises(ValueError, match="document_ids must be"):
        attention(q, k, v, True, document_ids=torch.zeros(2, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="not a multiple"):
        attention(q, k[:, :, :1].expand(-1, -1, 3, -1), v[:, :, :1].expand(-1, -1, 3, -1), True)


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed")
def test_flash_backend_without_flash_attn_names_the_fix():
    q, k, v = _qkv()
    with pytest.raises(ImportError, match=r'pip install "megamlm\[flash\]"'):
        attention(q, k, v, True, backend="flash")


def test_flex_backend_refuses_cpu_and_small_head_dims():
    q, k, v = _qkv(dim=8)
    with pytest.raises(ValueError, match="head dim of at least 16.*use backend 'sdpa'"):
        attention(q, k, v, False, backend="flex")


@pytest.mark.skipif(DEVICE.type == "cuda", reason="the CPU refusal of SDPA's GPU kernels")
@pytest.mark.parametrize("backend", ["sdpa_flash", "sdpa_cudnn"])
def test_sdpa_gpu_kernels_refuse_cpu_tensors(backend):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="selects a GPU kernel of SDPA.*use backend 'sdpa'"):
        attention(q, k, v, True, backend=backend)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("with_documents", [False, True])
def test_flex_block_masks_give_the_dense_masks_output(monkeypatch, causal, with_documents):
    """The block masks the GPU path builds (no dense mask) against SDPA with the dense mask, forward on CPU
    (FlexAttention has no CPU backward); the uncompiled flex_attention keeps the test fast."""
    from torch.nn.attention.flex_attention import flex_attention

    monkeypatch.setattr(attention_backends, "_compiled_flex", lambda: flex_attention)
    docs = torch.cat([DOCS, torch.tensor([[3] * 7, [6] * 7])], dim=1)  # 16 positions: flex's smallest block
    q, k, v = (t.detach() for t in _qkv(seq=16))
    ids = docs if with_documents else None
    got = attention_backends._flex_attention(q, k, v, causal, ids)
    torch.testing.assert_close(got, attention(q, k, v, causal, ids, backend="sdpa"), atol=1e-5, rtol=1e-4)
    if with_documents:  # the mask matters on these inputs
        assert not torch.allclose(got, attention(q, k, v, causal, None, backend="sdpa"), atol=1e-3)


@pytest.mark.skipif(DEVICE.type != "cuda", reason="FlexAttention/flash-attn paths need a GPU")
@pytest.mark.parametrize("backend", ["sdpa", "sdpa_flash", "sdpa_cudnn", "flex", "flash"])
@pytest.mark.parametrize("causal", [True, False])
def test_gpu_backends_with_documents_match_reference(backend, causal):
    if backend == "flash" and importlib.util.find_spec("flash_attn") is None:
        pytest.skip("flash-attn is not installed")
    _compare(backend, causal, DOCS, dtype=torch.bfloat16, tol=dict(atol=3e-2, rtol=3e-2))
    try:
        _compare(backend, causal, None, dtype=torch.bfloat16, tol=dict(atol=3e-2, rtol=3e-2))
    except RuntimeError as err:  # SDPA held to one kernel that does not take these shapes on this GPU
        if backend.startswith("sdpa_") and "No available kernel" in str(err):
            pytest.skip(f"{backend} does not run grouped-query attention at head dim 16 here: {err}")
        raise


def test_detect_optional_extras_reports_each_accelerator():
    extras = detect_optional_extras()
    assert set(extras) == {"flash_attn", "transformer_engine", "apex", "torchao", "triton"}
    assert extras["triton"] == (None if importlib.util.find_spec("triton") is None else extras["triton"])
    for name, version in extras.items():
        assert version is None or isinstance(version, str)
        assert (version is None) == (importlib.util.find_spec(name) is None)


def test_attention_backend_choices_come_from_the_one_table():
    from typing import get_args

    from megamlm.model.config import AttentionBackend

    table = attention_table.ATTENTION_TABLE
    assert get_args(AttentionBackend) == attention_table.ATTENTION_BACKENDS == ("auto", *table)
    assert [n for n, spec in table.items() if not spec.gpu_only] == ["sdpa"]


def test_attention_backend_problem_names_the_fix(monkeypatch):
    problem = attention_table.attention_backend_problem
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real(name, *a))
    assert problem("flash", None) == ("--attention-backend flash needs the flash-attn package, which is not installed; "
                                      'pip install "megamlm[flash]", or use --attention-backend sdpa')
    assert problem("sdpa_cudnn", "cpu") == ("--attention-backend sdpa_cudnn runs on a GPU, and this run is on cpu; "
                                            "use --attention-backend sdpa or auto")
    assert problem("sdpa_cudnn", None) is None and problem("flex", "cuda") is None
    assert problem("sdpa", "cpu") is None and problem("auto", "cpu") is None
    assert problem("xformers", None).startswith("unknown attention backend 'xformers'; choose one of auto, sdpa")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("with_documents", [False, True])
def test_flex_window_block_masks_give_the_dense_window_masks_output(monkeypatch, causal, with_documents):
    """Sliding windows on the GPU path (a block mask, no dense mask) against SDPA with the dense window mask, forward
    on CPU with the uncompiled flex_attention; the window is shorter than the sequence, so it matters."""
    from torch.nn.attention.flex_attention import flex_attention

    monkeypatch.setattr(attention_backends, "_compiled_flex", lambda: flex_attention)
    docs = torch.cat([DOCS, torch.tensor([[3] * 7, [6] * 7])], dim=1)
    q, k, v = (t.detach() for t in _qkv(seq=16))
    ids = docs if with_documents else None
    got = attention_backends._flex_attention(q, k, v, causal, ids, window=5)
    torch.testing.assert_close(got, attention(q, k, v, causal, ids, backend="sdpa", window=5), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(got, attention(q, k, v, causal, ids, backend="sdpa"), atol=1e-3)


def test_flash_attn_is_given_the_window_as_transformers_defines_it(monkeypatch):
    """flash-attn (absent here) gets window_size (W - 1, W - 1) bidirectional and (W - 1, 0) causal."""
    import sys
    import types

    calls = []
    fake = types.SimpleNamespace(flash_attn_func=lambda q, k, v, **kw: calls.append(kw) or q)
    monkeypatch.setitem(sys.modules, "flash_attn", fake)
    q = torch.zeros(1, 8, 2, 16, dtype=torch.bfloat16)
    # A CPU tensor that reads as a GPU one, past flash's device check (only the arguments are looked at).
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")), raising=False)
    try:
        attention_backends._flash_attention(q, q, q, False, None, window=4)
        attention_backends._flash_attention(q, q, q, True, None, window=4)
    finally:
        monkeypatch.undo()
    assert [c["window_size"] for c in calls] == [(3, 3), (3, 0)]

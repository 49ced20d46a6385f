"""Attention backends: PyTorch SDPA, FlexAttention and flash-attn, with optional document masks.

``attention(q, k, v, causal, document_ids=None, backend="sdpa")`` takes q (batch, seq, heads, dim)
and k/v (batch, seq, kv_heads, dim) (grouped-query when kv_heads < heads) and returns
(batch, seq, heads, dim). With ``document_ids`` (batch, seq) a token attends only to tokens of its
own document (a maximal run of equal ids in its row), causally or not.

backend (``ATTENTION_TABLE``, in megamlm/model/attention_table.py, declares them, once: whether each runs on a
GPU only, the optional package it
needs and the SDPA kernel it holds SDPA to; the ``AttentionBackend`` choice, the dispatch below, the ``auto``
probe and the flag checks all read it):
- ``sdpa``: ``scaled_dot_product_attention``, torch choosing its kernel. With documents it uses a
  block-diagonal boolean mask on CPU, and FlexAttention block masks on GPU (head dim >= 16), where a dense
  mask would rule out the fused flash kernel and the block mask skips the blocks between documents.
- ``sdpa_flash`` / ``sdpa_cudnn``: the same, restricted to SDPA's flash or cuDNN kernel (GPU only).
- ``flex``: FlexAttention (GPU), with or without documents.
- ``flash``: flash-attn (``flash_attn_func``; ``flash_attn_varlen_func`` with documents).
- Sliding windows (``window=W``: bidirectional |i - j| < W, causal the last W tokens, as transformers defines
  Gemma 3's): flash-attn takes the window as its ``window_size`` and FlexAttention as a block mask (on a GPU), both
  composed with the documents; ``sdpa`` takes a dense boolean mask (window and documents), and the SDPA variants
  held to one kernel, which take no mask, fall back to it (logged once).
  ``scale`` (None: 1/sqrt(head dim)) is passed to every backend.
- ``auto`` is not a kernel: ``Backends.attention_for`` resolves it to the backend measured fastest for the
  attention mode (``megamlm.model.attention_probe``) before any call gets here.

The caller passes the backend on every call (the model passes the one it was built with, see
``megamlm.model.config.Backends``); ``check_attention_backend`` validates a name up front, and
``attention_backend_problem`` says in one line why a name cannot run (a package missing, or a GPU backend on
another device) for the flag checks.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from megamlm import extras
from megamlm.log import log
from megamlm.model.attention_table import (
    ATTENTION_BACKENDS,
    ATTENTION_TABLE,
    attention_backend_problem,
    unknown_backend,
)

FLEX_MIN_HEAD_DIM = 16  # FlexAttention's compiled kernels refuse smaller head dims
_FLASH_MISSING = (extras.missing_message("flash_attn", "--attention-backend flash")
                  + " (with --no-build-isolation), or use --attention-backend sdpa")

# The last mask built, reused while the same document_ids tensor comes back (every layer of a step).
_mask_cache: dict[str, tuple] = {}


def check_attention_backend(name: str) -> str:
    """``name`` if it is one of ``ATTENTION_BACKENDS`` whose package is installed; else a clear error."""
    if name not in ATTENTION_BACKENDS:
        raise ValueError(unknown_backend(name))
    package = ATTENTION_TABLE[name].package if name in ATTENTION_TABLE else None
    if package is not None and not extras.installed(package):
        raise ImportError(_FLASH_MISSING if name == "flash" else attention_backend_problem(name, None))
    return name


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    document_ids: torch.Tensor | None = None,
    backend: str = "sdpa",
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention, (batch, seq, heads, dim) in and out; see the module docstring."""
    _check_inputs(q, k, v, document_ids, backend)
    if backend == "auto":
        raise ValueError("attention backend 'auto' must be resolved per attention mode first "
                         "(Backends.attention_for); pass a concrete backend")
    spec = ATTENTION_TABLE[backend]
    if window is not None:
        return _windowed(q, k, v, causal, document_ids, backend, window, scale)
    if spec.implementation == "flash":
        return _flash_attention(q, k, v, causal, document_ids, scale)
    if spec.sdpa_kernel is not None:
        if q.device.type != "cuda":
            raise ValueError(f"attention backend {backend!r} selects a GPU kernel of SDPA, got a {q.device.type} "
                             "tensor; use backend 'sdpa'")
        if document_ids is None:
            with sdpa_kernel(getattr(SDPBackend, spec.sdpa_kernel)):
                return sdpa(q, k, v, attn_mask=None, causal=causal, scale=scale)
        # With documents every SDPA variant takes the block-mask path below (a dense mask rules out both kernels).
    if spec.implementation == "flex":
        if q.device.type != "cuda" or q.shape[-1] < FLEX_MIN_HEAD_DIM:
            raise ValueError(
                f"attention backend 'flex' needs a CUDA/ROCm device (FlexAttention has no CPU backward) and a "
                f"head dim of at least {FLEX_MIN_HEAD_DIM}, got {q.device.type} and {q.shape[-1]}; use backend 'sdpa'"
            )
        return _flex_attention(q, k, v, causal, document_ids, scale)
    if document_ids is not None and q.device.type == "cuda" and q.shape[-1] >= FLEX_MIN_HEAD_DIM:
        return _flex_attention(q, k, v, causal, document_ids, scale)
    if document_ids is None:
        return sdpa(q, k, v, attn_mask=None, causal=causal, scale=scale)
    return sdpa(q, k, v, attn_mask=_cached("dense", document_ids, causal, dense_document_mask), causal=False,
                 scale=scale)


def _windowed(q, k, v, causal, document_ids, backend: str, window: int, scale):
    """A sliding-window layer: flash-attn's window, FlexAttention's block mask (both with documents), else SDPA with
    a dense window mask (on CPU, and for the SDPA variants held to one kernel, which take no mask; logged once)."""
    implementation = ATTENTION_TABLE[backend].implementation
    on_gpu = q.device.type == "cuda"
    if implementation == "flash":
        return _flash_attention(q, k, v, causal, document_ids, scale, window)
    if implementation == "flex" and on_gpu and q.shape[-1] >= FLEX_MIN_HEAD_DIM:
        return _flex_attention(q, k, v, causal, document_ids, scale, window)
    if backend != "sdpa":
        _note_window_fallback(backend)
    return sdpa(q, k, v, attn_mask=window_mask(q.shape[1], window, causal, document_ids, q.device), causal=False,
                 scale=scale)


_window_fallbacks: set[str] = set()


def _note_window_fallback(backend: str) -> None:
    if backend not in _window_fallbacks:
        _window_fallbacks.add(backend)
        log(f"attention backend {backend!r} does not cover sliding windows on this device: the sliding-window "
            "layers use SDPA with a dense window mask")


def window_mask(seq: int, window: int, causal: bool, document_ids: torch.Tensor | None, device) -> torch.Tensor:
    """Boolean mask (1 or batch, 1, seq, seq), True where a query may attend: |i - j| < window (causal: and j <= i),
    within the query's document when ``document_ids`` is given."""
    pos = torch.arange(seq, device=device)
    distance = pos[:, None] - pos[None, :]
    mask = (distance < window) & (distance > -window)
    if causal:
        mask &= distance >= 0
    mask = mask[None, None]
    if document_ids is not None:
        mask = mask & dense_document_mask(document_ids, False)
    return mask


def segment_ids(document_ids: torch.Tensor) -> torch.Tensor:
    """Number the maximal runs of equal ids along each row 0, 1, 2, ... (no host sync)."""
    starts = torch.ones_like(document_ids, dtype=torch.int32)
    starts[:, 1:] = (document_ids[:, 1:] != document_ids[:, :-1]).to(torch.int32)
    return starts.cumsum(dim=1, dtype=torch.int32)


def dense_document_mask(document_ids: torch.Tensor, causal: bool) -> torch.Tensor:
    """(batch, 1, seq, seq) boolean mask, True where a query may attend to a key."""
    seg = segment_ids(document_ids)
    mask = seg[:, :, None] == seg[:, None, :]
    if causal:
        seq = seg.shape[1]
        mask &= torch.ones(seq, seq, dtype=torch.bool, device=seg.device).tril()
    return mask[:, None]


def varlen_boundaries(document_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """flash-attn varlen inputs for the flattened batch: int32 cu_seqlens and the longest document."""
    batch, seq = document_ids.shape
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    offsets = starts.reshape(-1).nonzero().squeeze(1).to(torch.int32)
    end = torch.tensor([batch * seq], dtype=torch.int32, device=document_ids.device)
    cu_seqlens = torch.cat([offsets, end])
    return cu_seqlens, int((cu_seqlens[1:] - cu_seqlens[:-1]).max())


def _cached(kind: str, document_ids: torch.Tensor, causal: bool, build):
    key = (document_ids._version, causal, tuple(document_ids.shape))
    hit = _mask_cache.get(kind)
    if hit is not None and hit[0] is document_ids and hit[1] == key:
        return hit[2]
    value = build(document_ids, causal)
    _mask_cache[kind] = (document_ids, key, value)
    return value


def sdpa(q, k, v, attn_mask, causal, scale=None, dropout_p: float = 0.0):
    """torch's scaled_dot_product_attention, (batch, seq, heads, dim) in and out; ``dropout_p`` drops attention
    probabilities (torch's RNG), for a model trained with attention dropout."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    grouped = k.shape[1] != q.shape[1]
    if grouped and attn_mask is not None:
        # With a mask, the memory-efficient kernel takes no grouped K/V: repeat them instead.
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        grouped = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal, enable_gqa=grouped,
                                         scale=scale, dropout_p=dropout_p)
    return out.transpose(1, 2)


@lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def _flex_block_mask(document_ids: torch.Tensor | None, causal: bool, batch: int, seq: int, device,
                     window: int | None = None):
    """FlexAttention's block mask: causal and/or within each document and/or within ``window`` (|i - j| < W)."""
    from torch.nn.attention.flex_attention import create_block_mask

    seg = segment_ids(document_ids) if document_ids is not None else None

    def mask_mod(b, h, q_idx, kv_idx):
        keep = q_idx >= kv_idx if causal else q_idx == q_idx
        if window is not None:
            keep = keep & (q_idx - kv_idx < window) & (kv_idx - q_idx < window)
        if seg is not None:
            keep = keep & (seg[b, q_idx] == seg[b, kv_idx])
        return keep

    return create_block_mask(mask_mod, batch if seg is not None else None, None, seq, seq, device=device)


def _flex_attention(q, k, v, causal, document_ids, scale=None, window: int | None = None):
    batch, seq = q.shape[:2]
    block_mask = None
    if document_ids is not None:
        block_mask = _cached(f"flex-{window}", document_ids, causal,
                             lambda ids, c: _flex_block_mask(ids, c, batch, seq, q.device, window))
    elif causal or window is not None:
        block_mask = _flex_block_mask(None, causal, batch, seq, q.device, window)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    out = _compiled_flex()(qt, kt, vt, block_mask=block_mask, enable_gqa=kt.shape[1] != qt.shape[1], scale=scale)
    return out.transpose(1, 2)


def _flash_attention(q, k, v, causal, document_ids, scale=None, window: int | None = None):
    try:
        import flash_attn
    except ImportError as e:
        raise ImportError(_FLASH_MISSING) from e
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(
            f"attention backend 'flash' runs on CUDA/ROCm in fp16/bf16, got {q.dtype} on {q.device.type}; "
            "enable bf16 autocast or use --attention-backend sdpa"
        )
    # flash-attn's window (left, right) keeps keys i - left .. i + right: |i - j| < W, or the last W when causal.
    window_size = (-1, -1) if window is None else (window - 1, 0 if causal else window - 1)
    if document_ids is None:
        return flash_attn.flash_attn_func(q, k, v, causal=causal, softmax_scale=scale, window_size=window_size)
    batch, seq, heads, dim = q.shape
    cu_seqlens, longest = _cached("flash", document_ids, causal, lambda ids, c: varlen_boundaries(ids))
    flat = [t.reshape(batch * seq, t.shape[2], dim) for t in (q, k, v)]
    out = flash_attn.flash_attn_varlen_func(*flat, cu_seqlens, cu_seqlens, longest, longest, causal=causal,
                                         softmax_scale=scale, window_size=window_size)
    return out.view(batch, seq, heads, dim)


def _check_inputs(q, k, v, document_ids, backend):
    if backend not in ATTENTION_BACKENDS:
        raise ValueError(unknown_backend(backend))
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(
            f"attention: expected q (batch, seq, heads, dim) and k, v (batch, seq, kv_heads, dim), got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"attention: {q.shape[2]} query heads are not a multiple of {k.shape[2]} kv heads")
    if document_ids is not None and (document_ids.shape != q.shape[:2] or document_ids.is_floating_point()):
        raise ValueError(
            f"attention: document_ids must be an integer (batch, seq) = {tuple(q.shape[:2])} tensor, got "
            f"{document_ids.dtype} {tuple(document_ids.shape)}"
        )


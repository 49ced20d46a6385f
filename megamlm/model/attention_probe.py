"""``--attention-backend auto``: time the attention backends that run here on the model's own shapes, once at
start, and keep the fastest for bidirectional (MLM) and for causal (CLM) attention.

Which kernel wins depends on the GPU, the torch build, the head dimension, the sequence length and whether
documents are masked, and it changes between releases; a table written down once would go stale, so the
choice is measured on the device that trains (a forward and backward pass per backend and mode, a few seconds
plus FlexAttention's first compilation). On CPU only ``sdpa`` runs, and nothing is timed.
``benchmarks/attention.py`` prints the same measurements as a table.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass

import torch

from megamlm import extras
from megamlm.model.attention_backends import FLEX_MIN_HEAD_DIM, attention
from megamlm.model.attention_table import ATTENTION_TABLE, AttentionBackendSpec
from megamlm.model.config import Backends, ModelArgs


def candidate_backends(device: torch.device, head_dim: int, dtype: torch.dtype, documents: bool) -> list[str]:
    """The backends that can run these inputs here, in ``ATTENTION_TABLE``'s order. With documents, SDPA's
    variants all use FlexAttention's block masks on GPU, so FlexAttention stands for them."""
    if device.type != "cuda":
        return [name for name, spec in ATTENTION_TABLE.items() if not spec.gpu_only]
    half = dtype in (torch.float16, torch.bfloat16)

    def runs(spec: AttentionBackendSpec) -> bool:
        if spec.package is not None:
            return extras.installed(spec.package) and (half or not spec.half_precision_only)
        if documents and spec.implementation == "sdpa":
            return False
        return spec.implementation != "flex" or head_dim >= FLEX_MIN_HEAD_DIM

    names = [name for name, spec in ATTENTION_TABLE.items() if runs(spec)]
    # Documents at a head dim too small for FlexAttention: plain SDPA (with its dense mask) still runs.
    return names if any(ATTENTION_TABLE[n].package is None for n in names) else ["sdpa", *names]


def synthetic_documents(batch: int, seq: int, device: torch.device, mean_length: int = 512) -> torch.Tensor:
    """Document ids of packed windows: documents of varying length around ``mean_length`` tokens."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(mean_length // 4, 2 * mean_length, (batch * seq // max(mean_length // 4, 1) + 1,),
                            generator=g)
    ids = torch.repeat_interleave(torch.arange(len(lengths)), lengths)[: batch * seq]
    return ids.view(batch, seq).to(device)


@dataclass(frozen=True)
class AttentionInputs:
    """The attention inputs timed: ``batch`` x ``seq`` queries of ``heads`` heads against ``kv_heads`` key and value
    heads, each ``head_dim`` wide; with ``documents``, packed documents masked from each other."""

    batch: int
    seq: int
    heads: int
    kv_heads: int
    head_dim: int
    documents: bool = False


def time_attention(backend: str, inputs: AttentionInputs, causal: bool, device: torch.device, dtype: torch.dtype,
                   warmup: int = 2, reps: int = 5) -> float | None:
    """Median seconds of one forward + backward pass, or None when the backend refuses these inputs."""
    batch, seq, head_dim = inputs.batch, inputs.seq, inputs.head_dim
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(batch, seq, inputs.heads, head_dim, device=device, dtype=dtype, generator=g, requires_grad=True)
    k, v = (torch.randn(batch, seq, inputs.kv_heads, head_dim, device=device, dtype=dtype, generator=g,
                        requires_grad=True) for _ in range(2))
    document_ids = synthetic_documents(batch, seq, device) if inputs.documents else None
    upstream = torch.randn_like(q)
    times = []
    try:
        for i in range(warmup + reps):
            _sync(device)
            start = time.perf_counter()
            out = attention(q, k, v, causal, document_ids, backend=backend)
            out.backward(upstream)
            _sync(device)
            if i >= warmup:
                times.append(time.perf_counter() - start)
    except (RuntimeError, ValueError, ImportError, NotImplementedError):
        # A kernel that does not support this GPU, dtype or shape (or does not fit) is not a candidate.
        return None
    return statistics.median(times)


def choose_attention_backends(device: torch.device, inputs: AttentionInputs,
                              dtype: torch.dtype) -> tuple[tuple[str, str], dict[str, dict]]:
    """((bidirectional, causal) fastest backends, {mode: {backend: seconds or None}})."""
    candidates = candidate_backends(device, inputs.head_dim, dtype, inputs.documents)
    timings: dict[str, dict] = {}
    choice = []
    for causal in (False, True):
        mode = "causal" if causal else "bidirectional"
        if len(candidates) == 1:
            timings[mode] = {candidates[0]: None}
            choice.append(candidates[0])
            continue
        timings[mode] = {name: time_attention(name, inputs, causal, device, dtype) for name in candidates}
        ran = {name: t for name, t in timings[mode].items() if t is not None}
        choice.append(min(ran, key=ran.get) if ran else "sdpa")
    return (choice[0], choice[1]), timings


def resolve_auto_attention(backends: Backends, device: torch.device, args: ModelArgs, micro_batch: int,
                           tp: int = 1, documents: bool = False, dtype: torch.dtype = torch.bfloat16) -> Backends:
    """``backends`` with ``auto`` attention measured on ``device`` for this rank's heads (``tp`` splits them);
    unchanged when the attention backend was named explicitly."""
    if backends.attention != "auto":
        return backends
    inputs = AttentionInputs(micro_batch, args.max_seq_length, args.num_attention_heads // tp,
                             max(args.num_query_groups // tp, 1), args.head_dim, documents)
    choice, _ = choose_attention_backends(device, inputs, dtype)
    return dataclasses.replace(backends, auto_attention=choice)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)

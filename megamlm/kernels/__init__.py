"""Hot-path ops, each with a ``backend`` argument that picks its implementation.

The model calls ``rms_norm``, ``apply_rotary``, ``swiglu`` (or ``geglu``, reference only) and
``linear_cross_entropy`` from here,
passing the kernel backend it was built with (``megamlm.model.config.Backends.kernels``; the names are
declared in ``megamlm.kernel_backends``); the loss
outside the model passes the model's backend too. There is no process-wide setting: two models built
with different backends run side by side in one process. The backend is one of ``KERNEL_BACKENDS``:

- ``"auto"`` (default): Triton kernels for tensors on a CUDA/ROCm device when triton imports;
  elsewhere the references, except ``linear_cross_entropy`` which uses the pure-PyTorch chunked
  version (it never holds the full logits and was measured faster than the reference on CPU at
  vocabulary 128,256: see benchmarks/kernels.py). Inside ``torch.compile`` the element-wise ops use
  the references, which inductor fuses itself.
- ``"triton"``: Triton kernels everywhere (on CPU only under ``TRITON_INTERPRET=1``).
- ``"reference"``: the pure-PyTorch references of ``reference.py``, full logits included.
- ``"chunked"``: references, but ``linear_cross_entropy`` chunked in pure PyTorch.

Tensor subclasses (DTensor under tensor/sequence parallelism, fake tensors while tracing) always
take the references, which their own dispatch knows how to shard; the fused kernels need plain tensors.

``check_kernel_backend`` validates a name (unknown names, and ``"triton"`` where triton does not
import, raise a message naming the fix); the trainer calls it while planning a run, so a bad choice
fails before any work. Every op checks its ``backend`` again on each call.

Importing this package never imports triton; the Triton modules load on first use.
"""

from __future__ import annotations

import importlib
import os

import torch

from megamlm import extras
from megamlm.kernel_backends import KERNEL_BACKENDS
from megamlm.kernels import reference
from megamlm.kernels.chunked_linear_cross_entropy import chunked_linear_cross_entropy

__all__ = [
    "rms_norm",
    "apply_rotary",
    "swiglu",
    "geglu",
    "geglu_erf",
    "linear_cross_entropy",
    "check_kernel_backend",
    "triton_available",
    "resolve_backend",
]

_OP_MODULES = {
    "rms_norm": "megamlm.kernels.triton_rms_norm",
    "apply_rotary": "megamlm.kernels.triton_rotary",
    "swiglu": "megamlm.kernels.triton_swiglu",
    "linear_cross_entropy": "megamlm.kernels.triton_cross_entropy",
}


def triton_available() -> bool:
    """True when triton imports (checked once; a broken install counts as absent)."""
    return extras.usable("triton")


def check_kernel_backend(name: str) -> str:
    """``name`` if it is one of ``KERNEL_BACKENDS`` that can run here; else a clear error naming the fix."""
    if name not in KERNEL_BACKENDS:
        raise ValueError(f"unknown kernel backend {name!r}; choose one of {', '.join(KERNEL_BACKENDS)}")
    if name == "triton" and not triton_available():
        raise RuntimeError(extras.missing_message("triton", "kernel backend 'triton'")
                           + ", or use --kernel-backend auto")
    return name


def _on_accelerator(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"  # ROCm tensors also report "cuda"


def _plain(t: torch.Tensor) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter)


def resolve_backend(op: str, tensor: torch.Tensor, *others: torch.Tensor, backend: str = "auto") -> str:
    """Which implementation ``op`` uses for these inputs under ``backend``: triton/chunked/reference."""
    check_kernel_backend(backend)
    if not all(_plain(t) for t in (tensor, *others)):
        return "reference"
    if backend == "triton":
        if not _on_accelerator(tensor) and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(
                f"kernel backend 'triton' got a {tensor.device.type} tensor in {op}; Triton runs on CUDA/ROCm "
                "devices (or on CPU with TRITON_INTERPRET=1); use --kernel-backend auto"
            )
        return "triton"
    if backend == "reference":
        return "reference"
    if backend == "chunked":
        return "chunked" if op == "linear_cross_entropy" else "reference"
    # auto
    if _on_accelerator(tensor) and triton_available():
        if op != "linear_cross_entropy" and torch.compiler.is_compiling():
            return "reference"
        return "triton"
    return "chunked" if op == "linear_cross_entropy" else "reference"


def _triton_op(op: str):
    return getattr(importlib.import_module(_OP_MODULES[op]), op)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5, backend: str = "auto") -> torch.Tensor:
    if resolve_backend("rms_norm", x, weight, backend=backend) == "triton":
        return _triton_op("rms_norm")(x, weight, eps)
    return reference.rms_norm(x, weight, eps)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    # The Triton kernel treats the tables as constants; differentiable tables take the reference.
    # Per-token tables (batch, seq, head_dim), from position ids, take the reference too.
    if (resolve_backend("apply_rotary", x, cos, sin, backend=backend) == "triton"
            and not (cos.requires_grad or sin.requires_grad) and cos.dim() == 2):
        return _triton_op("apply_rotary")(x, cos, sin)
    return reference.apply_rotary(x, cos, sin)


def swiglu(gate: torch.Tensor, up: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    if resolve_backend("swiglu", gate, up, backend=backend) == "triton":
        return _triton_op("swiglu")(gate, up)
    return reference.swiglu(gate, up)


def geglu(gate: torch.Tensor, up: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """GeGLU (tanh GELU). No fused kernel covers it: every backend (triton included) computes the reference,
    which inductor fuses under compile; the backend name is still checked."""
    resolve_backend("geglu", gate, up, backend=backend)
    return reference.geglu(gate, up)


def geglu_erf(gate: torch.Tensor, up: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """GeGLU with the exact (erf) GELU, ModernBERT's; like ``geglu``, the reference on every backend."""
    resolve_backend("geglu_erf", gate, up, backend=backend)
    return reference.geglu_erf(gate, up)


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    chunk_size: int = 0,
    backend: str = "auto",
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sum (fp32) of token cross-entropies of ``hidden @ weight.T (+ bias)``; see ``reference.linear_cross_entropy``."""
    choice = resolve_backend("linear_cross_entropy", hidden, weight, targets, backend=backend)
    with_bias = {"bias": bias} if bias is not None else {}  # a head without a bias calls as before
    if choice == "triton":
        return _triton_op("linear_cross_entropy")(hidden, weight, targets, ignore_index, chunk_size, **with_bias)
    if choice == "chunked":
        return chunked_linear_cross_entropy(hidden, weight, targets, ignore_index, chunk_size, **with_bias)
    return reference.linear_cross_entropy(hidden, weight, targets, ignore_index, chunk_size, **with_bias)

"""The attention backends as the flags know them, declared once and importable without torch: what each computes
with, where it runs, what it needs (``ATTENTION_TABLE``), and why a name cannot run here
(``attention_backend_problem``). megamlm/model/attention_backends.py computes with them; the config and
``pretrain.py --help`` read only this module, so they start without importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from megamlm import extras


@dataclass(frozen=True)
class AttentionBackendSpec:
    """One attention backend: how it computes, where it runs, what it needs."""

    implementation: Literal["sdpa", "flex", "flash"]
    """The function that computes it: SDPA (``sdpa``), FlexAttention or flash-attn."""
    gpu_only: bool
    """Runs on a CUDA/ROCm GPU only."""
    package: str | None = None
    """The optional package it needs (a ``megamlm.extras`` name), None when torch is enough."""
    sdpa_kernel: str | None = None
    """The one SDPA kernel SDPA is held to, by its ``torch.nn.attention.SDPBackend`` name (named, not imported:
    the flag checks read this table without torch); None: torch chooses (or not SDPA)."""
    half_precision_only: bool = False
    """Takes fp16/bf16 inputs only."""
    summary: str = ""
    """A few words for --help."""


ATTENTION_TABLE: dict[str, AttentionBackendSpec] = {
    "sdpa": AttentionBackendSpec("sdpa", gpu_only=False, summary="scaled_dot_product_attention"),
    "sdpa_flash": AttentionBackendSpec("sdpa", gpu_only=True, sdpa_kernel="FLASH_ATTENTION",
                                       summary="SDPA held to its flash kernel"),
    "sdpa_cudnn": AttentionBackendSpec("sdpa", gpu_only=True, sdpa_kernel="CUDNN_ATTENTION",
                                       summary="SDPA held to its cuDNN kernel"),
    "flex": AttentionBackendSpec("flex", gpu_only=True, summary="FlexAttention"),
    "flash": AttentionBackendSpec("flash", gpu_only=True, package="flash_attn", half_precision_only=True,
                                  summary="flash-attn"),
}
"""The attention backends, declared once (in the order ``--help`` and the ``auto`` probe list them)."""
ATTENTION_BACKENDS: tuple[str, ...] = ("auto", *ATTENTION_TABLE)
"""The ``--attention-backend`` choices: ``auto`` (resolved per attention mode before any call) and the table's."""
def attention_backend_problem(name: str, device_type: str | None = None) -> str | None:
    """Why ``--attention-backend name`` cannot run, in one line naming the fix, or None when it can.

    Checks that the package it needs is installed (looked up, never imported) and, with ``device_type``
    (``"cpu"``, ``"cuda"``), that a GPU-only backend runs on a GPU; ``device_type=None`` checks the package only.
    ``auto`` always can (it measures what runs here, ``sdpa`` on CPU).
    """
    if name not in ATTENTION_BACKENDS:
        return unknown_backend(name)
    spec = ATTENTION_TABLE.get(name)
    if spec is None:  # auto
        return None
    if spec.package is not None and not extras.installed(spec.package):
        return extras.missing_message(spec.package, f"--attention-backend {name}") + ", or use --attention-backend sdpa"
    if device_type is not None and device_type != "cuda" and spec.gpu_only:
        return (f"--attention-backend {name} runs on a GPU, and this run is on {device_type}; "
                "use --attention-backend sdpa or auto")
    return None


def unknown_backend(name: str) -> str:
    return f"unknown attention backend {name!r}; choose one of {', '.join(ATTENTION_BACKENDS)}"

"""The kernel backends' names, declared once below both their users: ``megamlm.kernels`` dispatches on them and the
model records the one it was built with (``megamlm.model.config.Backends``); torch-free, so the flag parser offers
them without importing torch."""

from __future__ import annotations

from typing import Literal, get_args

KernelBackend = Literal["auto", "triton", "chunked", "reference"]
"""auto: Triton on GPU tensors, the chunked LM-head loss on CPU; see ``megamlm.kernels``."""
KERNEL_BACKENDS: tuple[str, ...] = get_args(KernelBackend)

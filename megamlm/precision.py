"""Mixed precision: bf16 autocast on GPU (``auto`` or ``bf16``), plain fp32 otherwise."""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, ContextManager

import torch


def uses_bf16(device: torch.device, precision: str) -> bool:
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")


def autocast_for(device: torch.device, precision: str) -> Callable[[], ContextManager]:
    """The forward's precision context, decided once: a factory of ``torch.autocast`` to bf16, or
    ``contextlib.nullcontext`` (fp32); ``with autocast():`` around each forward."""
    if uses_bf16(device, precision):
        return functools.partial(torch.autocast, device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext

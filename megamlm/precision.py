"""Mixed precision: bf16 autocast on GPU (``auto`` or ``bf16``), plain fp32 otherwise."""

from __future__ import annotations

import contextlib

import torch


def uses_bf16(device: torch.device, precision: str) -> bool:
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")


def autocast_context(device: torch.device, precision: str):
    if uses_bf16(device, precision):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()

"""``torch.compile`` of a built model (``--compile``): which mode a layout gets, and applying it.

Modes:
- ``none``: eager.
- ``blocks``: each transformer block compiled on its own (every block has the same code, so one graph serves
  them all); composes with every layout, including pipeline stages and activation checkpointing.
- ``model``: the whole model's forward (embedding, every block, final norm) as one compiled call, so the
  compiler also fuses across block boundaries. Composes with FSDP2/DDP (their hooks run between the compiled
  regions) and activation checkpointing. Where it does not compose, the blocks are compiled instead: under
  PP (stages are pruned copies driven by the schedule) and under TP (torch 2.13's compiler cannot trace the
  vocabulary-parallel embedding's masked partial sum, DTensor's ``_MaskPartial``).
- ``cudagraphs``: ``model`` with CUDA graphs (inductor's ``reduce-overhead``), which replays each step's kernels
  without launching them from the host one by one. Only where every step has the same shapes and no
  collective runs inside the model: one GPU process.
- ``auto``: the mode measured fastest for the device and layout (``_MEASURED_BEST``).

The loss stays outside the compiled region: the sparse LM head selects the predicted positions (a
data-dependent shape), and on GPU it is already one fused Triton kernel.
"""

from __future__ import annotations

from typing import get_args

import torch
import torch.nn as nn

from megamlm.config import CompileMode
from megamlm.parallel.dims import ParallelDims

COMPILE_MODES = tuple(mode for mode in get_args(CompileMode) if mode != "auto")
"""The concrete modes (``--compile``'s choices but ``auto``, which resolves to one of them)."""
COMPILER_BACKEND = "inductor"
"""torch.compile's backend. Tests that check how compilation composes with a layout set ``aot_eager`` (the same
graph capture and autograd, without generating kernels) to stay fast on CPU."""

# The mode ``auto`` picks per device type, with where the figure comes from. On GPU, per-block compile was
# measured at 42.3% MFU against 37.6% eager for 610m MLM on one H200 (benchmarks/RESULTS.md, 2026-11-30);
# whole-model compile and CUDA graphs have not been measured yet (benchmarks/gpu_session.sh measures them).
# On CPU compile time outweighs what it saves in short runs, so CPU stays eager.
_MEASURED_BEST = {"cuda": "blocks", "cpu": "none"}


def compile_mode_problem(mode: str, device: torch.device, dims: ParallelDims) -> str | None:
    """Why ``--compile mode`` cannot run on ``device`` in ``dims``, in one line naming the fix; None when it can.
    (The start-up checks raise it, megamlm/training/startup.py.)"""
    if mode != "auto" and mode not in COMPILE_MODES:
        return f"unknown --compile mode {mode!r}; choose one of auto, {', '.join(COMPILE_MODES)}"
    if mode == "cudagraphs" and (device.type != "cuda" or dims.is_parallel):
        return ("--compile cudagraphs needs one GPU process (CUDA graphs replay fixed shapes and no "
                f"collectives), got {device.type} with {dims.world_size} processes; use --compile model")
    return None


def resolve_compile_mode(mode: str, device: torch.device, dims: ParallelDims) -> str:
    """The concrete mode a run uses. A mode the start-up checks refuse (``compile_mode_problem``) is a ValueError
    here: a caller that skipped them."""
    if problem := compile_mode_problem(mode, device, dims):
        raise ValueError(problem)
    if mode == "auto":
        mode = _MEASURED_BEST.get(device.type, "none")
    if mode == "model" and (dims.pp > 1 or dims.tp > 1):
        return "blocks"  # see the module docstring
    return mode


def apply_compile(model: nn.Module, mode: str) -> None:
    """Compile ``model`` in place for a resolved ``mode`` (in place keeps the parameter names)."""
    if mode == "blocks":
        for block in model.layers.values():
            block.compile(backend=COMPILER_BACKEND)
    elif mode == "model":
        model.compile(backend=COMPILER_BACKEND)
    elif mode == "cudagraphs":
        model.compile(backend=COMPILER_BACKEND, mode="reduce-overhead")
    elif mode != "none":
        raise ValueError(f"unresolved compile mode {mode!r}; resolve it with resolve_compile_mode")

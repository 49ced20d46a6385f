"""Throughput: tokens/s, MFU and peak device memory (the trainer's log line and the benchmark's), and durations.

The interval averages behind the log line and the TensorBoard scalars are training/reporter.py's."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamlm.model.config import ModelArgs


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


# Dense bf16 peak of common accelerators, FLOP/s (vendor data sheets, without sparsity). Looked up by a
# substring of ``torch.cuda.get_device_name``; ``--peak-tflops`` style overrides cover the rest.
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "MI250X": 191.5e12, "MI300X": 1307e12,
                   "L40S": 362e12, "A10": 125e12}


def model_flops(args: ModelArgs, tokens: int, predicted: int, causal: bool) -> float:
    """Training FLOPs (forward + backward = 3x forward) of the work the objective needs, for ``tokens`` tokens
    in windows of ``args.max_seq_length`` of which ``predicted`` carry a loss.

    Matmuls: 2 FLOPs per weight per token in the blocks, the LM head only on predicted positions (MLM
    predicts the selected positions only); attention scores and values: 4 * seq * hidden per token per
    layer, halved under a causal mask. Linear in ``tokens`` and ``predicted``, so it sums over steps.
    """
    h, f, layers = args.hidden_size, args.ffn_hidden_size, args.num_layers
    kv = args.num_query_groups * args.head_dim
    block_weights = layers * (2 * h * h + 2 * h * kv + 3 * h * f)
    attention = layers * 4 * args.max_seq_length * h * (0.5 if causal else 1.0)
    forward = 2 * block_weights * tokens + attention * tokens + 2 * h * args.vocab_size * predicted
    return 3.0 * forward


def device_peak_flops(device: torch.device, override_tflops: float | None = None) -> float | None:
    """The device's dense bf16 peak in FLOP/s: the override, the table's entry for a known GPU, else None."""
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_FLOPS.items() if key in name), None)


def peak_device_memory_mib(device: torch.device) -> float | None:
    """Peak memory allocated by torch on ``device`` since the last reset, MiB; None off GPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20


@dataclass
class Throughput:
    tokens_per_second: float
    mfu: float | None
    """Model FLOPs per second over the devices' dense bf16 peak; None where the peak is unknown."""
    peak_memory_mib: float | None
    """This process's device, since the last reset of torch's peak statistics."""


def throughput(args: ModelArgs, tokens: int, predicted: int, causal: bool, seconds: float, device: torch.device,
               peak_tflops: float | None = None, devices: int = 1) -> Throughput:
    """Tokens/s, MFU and peak device memory of ``tokens`` trained in ``seconds`` (one step or an interval
    of steps of one objective) on ``devices`` devices like ``device``; the benchmark and the trainer's log line
    both report this."""
    seconds = max(seconds, 1e-9)
    peak = device_peak_flops(device, peak_tflops)
    flops = model_flops(args, tokens, predicted, causal)
    return Throughput(tokens / seconds, flops / seconds / (peak * devices) if peak else None,
                      peak_device_memory_mib(device))

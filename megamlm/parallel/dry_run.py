"""``pretrain.py --dry-run``: check a layout and estimate each rank's parameters and memory, on any machine.

The model is built on the meta device (no memory, no GPU) and cut into the pipeline stages of each
pipeline rank; TP and FSDP shares are then divided out. Memory is an estimate, per rank:

- weights, gradients and AdamW state: fp32 (4 + 4 + 8 bytes per parameter), divided by the FSDP shard
  degree (DDP keeps them whole); under bf16 FSDP also one block's gathered bf16 weights at a time;
- activations, per layer and in-flight micro-batch, Megatron's estimate with sequence parallelism and
  fused attention: 34 * seq * micro-batch * hidden bytes / TP (bf16), or just the layer input (2 bytes per
  value) with --recompute; a 1F1B pipeline rank p holds up to PP - p micro-batches in flight;
- the sparse LM head on the last stage: fp32 logits and softmax of every predicted token over V / TP.
"""

from __future__ import annotations

import os

import torch

from megamlm.config import Config, model_args_for, resolved_shape
from megamlm.config.phases import recipe_of
from megamlm.data import load_tokenizer
from megamlm.data.embedded import TOKENIZER_FILE
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.pipeline_stages import prune_to_stages, rank_stages
from megamlm.precision import uses_bf16

GIB = 1024 ** 3


def dry_run_model_args(cfg: Config) -> ModelArgs:
    if resolved_shape(cfg.model)["vocab_size"] is not None:
        return model_args_for(cfg, 0)
    # Tokenizer-sized (tiny): read just the tokenizer, not the corpus.
    return model_args_for(cfg, load_tokenizer(str(cfg.data.tokenizer_model or TOKENIZER_FILE)).vocab_size)


REPLICATED_UNDER_TP = ("norm.weight", "norm.bias", "o_proj.bias", "down_proj.bias")
"""Parameter names (by ending) that tensor parallelism keeps whole on every rank (beside the prediction head)."""


def _split_counts(model: Transformer, tp: int) -> tuple[int, int]:
    """(parameters split over TP ranks, parameters replicated on each): the norms, the row-wise projections'
    biases and the prediction head are replicated; a tied embedding counts once (``named_parameters`` lists a
    shared parameter once)."""
    split = replicated = 0
    for name, p in model.named_parameters():
        if name.endswith(REPLICATED_UNDER_TP) or name.startswith("head."):
            replicated += p.numel()
        else:
            split += p.numel()
    return split, replicated


def rank_estimates(cfg: Config, dims: ParallelDims, args: ModelArgs) -> list[dict]:
    """One row per pipeline rank (every TP/DP rank of a pipeline rank holds the same share)."""
    t = cfg.training
    # A dry run plans for the GPUs it will run on: --device auto counts as one.
    mixed = uses_bf16(torch.device("cpu" if t.device == "cpu" else "cuda"), t.precision)
    act_bytes = 2 if mixed else 4
    shard = dims.dp_shard if dims.data_parallel_impl == "fsdp" else 1
    micro_batches = t.global_batch_size // (t.micro_batch_size * dims.dp)
    seq, mbs, hidden = args.max_seq_length, t.micro_batch_size, args.hidden_size
    rows = []
    for pp_rank in range(dims.pp):
        with torch.device("meta"):
            model = Transformer(args)
        stages = rank_stages(pp_rank, dims.pp, dims.stages_per_rank) if dims.pp > 1 else [0]
        if dims.pp > 1:
            prune_to_stages(model, stages, dims.num_stages)
        split, replicated = _split_counts(model, dims.tp)
        local = split // dims.tp + replicated
        state_bytes = 16 * local / shard
        block = sum(p.numel() for p in model.layers[next(iter(model.layers))].parameters()) // dims.tp
        gathered = 2 * block if (shard > 1 and mixed) else 0
        in_flight = min(micro_batches, dims.pp - pp_rank) if dims.pp > 1 else 1
        per_layer = (act_bytes * seq * mbs * hidden / dims.tp if cfg.parallel.recompute
                     else 34 * seq * mbs * hidden * act_bytes / 2 / dims.tp)
        activations = per_layer * len(model.layers) * in_flight
        head = 0.0
        if model.lm_head is not None:
            head = 2 * 4 * mbs * (seq - 1) * args.vocab_size / dims.tp  # CLM predicts every position but one
        rows.append({"pp_rank": pp_rank, "stages": stages, "layers": list(model.layers.keys()),
                     "parameters": local, "replicated": replicated, "parameters_per_rank": local / shard,
                     "state_gib": state_bytes / GIB,
                     "activations_gib": (activations + gathered) / GIB, "head_gib": head / GIB,
                     "total_gib": (state_bytes + activations + gathered + head) / GIB})
    return rows


def _ramp_words(cfg: Config) -> str:
    """The batch-size ramp-up in words, where the run has one (the batch line shows the global batch it reaches)."""
    if not cfg.training.rampup_batch_size:
        return ""
    start, increment, samples = cfg.training.rampup_batch_size
    return f", after a ramp-up from {start} by {increment} over {samples:,} samples (--rampup-batch-size)"


def dry_run_report(cfg: Config, dims: ParallelDims) -> str:
    """``--dry-run``'s report of ``cfg`` in its checked layout ``dims`` (megamlm/training/startup.py)."""
    args = dry_run_model_args(cfg)
    with torch.device("meta"):
        total = sum(p.numel() for p in Transformer(args).parameters())
    lines = [f"dry run: model {cfg.checkpoint.init_from or cfg.model.model} ({total / 1e6:.1f}M parameters, "
             f"{args.num_layers} layers, hidden {args.hidden_size}, vocab {args.vocab_size}, seq "
             f"{args.max_seq_length})",
             f"layout: {dims.describe()}",
             f"batch: global {cfg.training.global_batch_size} = micro {cfg.training.micro_batch_size} x DP {dims.dp} x "
             f"{cfg.training.global_batch_size // (cfg.training.micro_batch_size * dims.dp)} micro-batches per step"
             + _ramp_words(cfg) + (" | recompute" if cfg.parallel.recompute else ""),
             "per rank (every TP and data-parallel rank of a pipeline rank holds the same share):",
             f"{'pp rank':>7} {'layers':>12} {'params/TP':>12} {'held':>12} {'weights+grads+adam':>19} "
             f"{'activations':>12} {'LM head':>8} {'total':>9}"]
    if cfg.recipe.phases:  # what each phase trains, after the batch line
        lines[3:3] = [f"  {line}" for line in recipe_of(cfg).describe()]
    for row in rank_estimates(cfg, dims, args):
        layers = row["layers"]
        contiguous = [int(n) for n in layers] == list(range(int(layers[0]), int(layers[-1]) + 1))
        span = f"{layers[0]}-{layers[-1]}" if contiguous else ",".join(layers)
        lines.append(f"{row['pp_rank']:>7} {span:>12} {row['parameters'] / 1e6:>11.1f}M "
                     f"{row['parameters_per_rank'] / 1e6:>11.1f}M {row['state_gib']:>17.2f}G "
                     f"{row['activations_gib']:>11.2f}G {row['head_gib']:>7.2f}G {row['total_gib']:>8.2f}G")
    return "\n".join(lines)


def device_memory_bytes(device: torch.device) -> int | None:
    """The memory one rank may use: the GPU's, or on CPU the host's shared by the ranks of this node."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    ranks_here = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or "1"
    return host // max(1, int(ranks_here))


def memory_note(cfg: Config, dims: ParallelDims, args: ModelArgs, device: torch.device) -> str:
    """One line with the estimated peak memory per device; a warning when it exceeds what the device has."""
    available = device_memory_bytes(device)
    rows = rank_estimates(cfg, dims, args)
    worst = max(rows, key=lambda row: row["total_gib"])
    where = f" (pipeline rank {worst['pp_rank']})" if dims.pp > 1 else ""
    estimate = (f"estimated memory per device: {worst['total_gib']:.2f} GiB{where} = weights, gradients and AdamW "
                f"{worst['state_gib']:.2f} + activations {worst['activations_gib']:.2f} + LM head "
                f"{worst['head_gib']:.2f} (an estimate, as --dry-run prints)")
    if available is None or worst["total_gib"] * GIB <= available:
        return estimate
    what = "the GPU" if device.type == "cuda" else "this rank's share of the host memory"
    return (f"warning: {estimate} exceeds the {available / GIB:.2f} GiB of {what}: the run may run out of memory; "
            "lower --micro-batch-size, add --recompute, or spread the model wider (--tp, --pp, more FSDP ranks)")

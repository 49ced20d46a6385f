"""Training-step throughput and peak memory: megamlm against Hugging Face transformers, in one run.

    python benchmarks/train_step.py --preset cpu --objective mlm --compare hf
    python benchmarks/train_step.py --preset cpu --block modernbert --compare hf

Both sides train the same configuration (same weights, same batches, the same MLM masks) with AdamW:
megamlm through the trainer's own ``train_step`` (sparse LM head, fused/chunked kernels where they run),
transformers through ``EuroBertForMaskedLM`` (MLM) or ``LlamaForCausalLM`` (CLM) with ``labels``; with
``--block modernbert`` the preset's shape gets ModernBERT's block (``megamlm.model.config.MODERNBERT_BLOCK``: LayerNorm,
embedding norm, prediction head, erf GeGLU, a global layer every 3 and 128-token windows between) and transformers
trains ``ModernBertForMaskedLM`` (MLM) or ``ModernBertDecoderForCausalLM`` (CLM).
Steps alternate between the two after warm-up, so machine noise hits both alike; the figures are
medians. Peak memory is ``torch.cuda.max_memory_allocated`` on GPU; on CPU it is the peak resident set
of a child process per side (the same steps, sampled every 2 ms), above the RSS right after the build.
On GPU the script also prints MFU (model FLOPs, attention included, over the device's bf16 peak; the
trainer computes it with the same function, ``megamlm.training.metrics.throughput``) and, with ``--max-batch``,
the largest micro-batch each side fits.

megamlm's side runs as the trainer would with ``--compile MODE``, ``--fp8`` and ``--attention`` (``auto``
included); ``--micro-batch-sizes 8,16,24,32`` times several micro-batches in one process (same models);
``--profile DIR`` then records a PyTorch profiler trace of megamlm's steps and prints the top kernels (CPU
operators on CPU) and the share of step time in matmuls, attention, element-wise work, the optimizer and
host gaps (see ``megamlm.training.profiling``):

    python benchmarks/train_step.py --preset 610m --compare none --compile model --profile /tmp/prof
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import get_args

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.config import CompileMode  # noqa: E402
from megamlm.hf.export import hf_state_dict  # noqa: E402
from megamlm.hf.hf_config import SpecialIds, hf_config_for  # noqa: E402
from megamlm.hf.keymaps import EXPORT_ARCHS  # noqa: E402
from megamlm.hf.modernbert import modernbert_hf_config  # noqa: E402
from megamlm.model.attention_probe import resolve_auto_attention  # noqa: E402
from megamlm.model.config import (  # noqa: E402
    MODERNBERT_BLOCK,
    PRESETS,
    AttentionBackend,
    Backends,
    ModelArgs,
    global_every_layer_types,
)
from megamlm.model.transformer import Transformer  # noqa: E402
from megamlm.objectives import MaskingSpec, ObjectiveSchedule  # noqa: E402
from megamlm.parallel.dims import ParallelDims  # noqa: E402
from megamlm.parallel.parallelize import parallelize  # noqa: E402
from megamlm.precision import uses_bf16  # noqa: E402
from megamlm.training.metrics import peak_device_memory_mib, throughput  # noqa: E402
from megamlm.training.nonfinite import NonFiniteGuard  # noqa: E402
from megamlm.training.optim import build_optimizer  # noqa: E402
from megamlm.training.profiling import profile_steps, summarize_trace  # noqa: E402
from megamlm.training.step import StepSetup, skip_streak, train_step  # noqa: E402

# CPU-sized configuration of the target: hidden 384, Llama 3 vocabulary, sequence 512.
BENCH_PRESETS = {
    "cpu": dict(vocab_size=128_256, num_layers=4, hidden_size=384, ffn_hidden_size=1536,
                num_attention_heads=6, num_query_groups=6, max_seq_length=512),
    **{name: dict(shape, vocab_size=shape["vocab_size"] or 128_256) for name, shape in PRESETS.items()},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--preset", default="cpu", choices=sorted(BENCH_PRESETS))
    p.add_argument("--objective", default="mlm", choices=["mlm", "clm"])
    p.add_argument("--block", default="preset", choices=["preset", "modernbert"],
                   help="modernbert: the preset's shape with ModernBERT's block, against transformers' ModernBERT")
    p.add_argument("--hf-sparse-prediction", action="store_true",
                   help="with --block modernbert: transformers' ModernBERT computes logits at the masked positions "
                        "only (its sparse_prediction, as ModernBERT trained; its released configs and default: off)")
    p.add_argument("--compare", default="hf", choices=["hf", "none"])
    p.add_argument("--micro-batch-size", type=int, default=None, help="default: 4 on CPU, 8 on GPU")
    p.add_argument("--micro-batch-sizes", default=None,
                   help="comma-separated micro-batches timed one after the other with the same models (a sweep; "
                        "compiled models recompile once with a dynamic batch dimension, then serve every size)")
    p.add_argument("--seq-length", type=int, default=None, help="default: the preset's")
    p.add_argument("--mask-ratio", type=float, default=0.4)
    p.add_argument("--steps", type=int, default=5, help="timed steps per side")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation happens here)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--compile", nargs="?", const="blocks", default="none", choices=get_args(CompileMode),
                   help="megamlm's torch.compile mode, as the trainer's --compile (bare: blocks; default: none)")
    p.add_argument("--fp8", action="store_true", help="megamlm's block linears in float8 (torchao), as --fp8")
    p.add_argument("--kernels", default="auto", help="megamlm kernel backend (see megamlm.kernels)")
    p.add_argument("--attention", default="sdpa", choices=get_args(AttentionBackend),
                   help="megamlm attention backend (auto: measured at start, as the trainer does)")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="after timing, write a profiler trace of megamlm's steps to DIR and print where time goes")
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--max-batch", action="store_true", help="GPU: search the largest micro-batch per side")
    p.add_argument("--peak-tflops", type=float, default=None, help="override the device's bf16 peak for MFU")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def resolve_device(choice: str) -> torch.device:
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def model_args(opts) -> ModelArgs:
    shape = dict(BENCH_PRESETS[opts.preset])
    if opts.seq_length:
        shape["max_seq_length"] = opts.seq_length
    if opts.block == "modernbert":  # ModernBERT has no grouped-query attention: every head its own keys and values
        shape.update(MODERNBERT_BLOCK, num_query_groups=shape["num_attention_heads"],
                     layer_types=global_every_layer_types(shape["num_layers"], 3))
    return ModelArgs(**shape)


def make_batches(args: ModelArgs, opts, count: int, micro_batch: int):
    """``count`` micro-batches as (megamlm Batch, HF input_ids, HF labels), masks from megamlm's contract."""
    spec = MaskingSpec(opts.mask_ratio, 1.0, 0.0, 0.0, mask_id=4, special_ids=(0, 1, 2, 3, 4),
                       random_vocab_size=args.vocab_size)
    schedule = ObjectiveSchedule(opts.objective, None, 10, spec, seed=0)
    rng = np.random.default_rng(0)
    batches = []
    for i in range(count):
        tokens = rng.integers(5, args.vocab_size, size=(micro_batch, args.max_seq_length))
        ids = list(range(i * micro_batch, (i + 1) * micro_batch))
        batch = schedule.make_batch(1, tokens, ids)
        if opts.objective == "mlm":
            hf_inputs, hf_labels = batch.input_ids, batch.targets
        else:  # transformers shifts the labels itself
            hf_inputs, hf_labels = batch.input_ids, batch.input_ids.clone()
        batches.append((batch, hf_inputs, hf_labels))
    return batches


def build_megamlm(args: ModelArgs, device, opts):
    """The trainer's own single-process layout (a ParallelModel with one part) and its optimizer."""
    backends = resolve_auto_attention(Backends(attention=opts.attention, kernels=opts.kernels), device, args,
                                      opts.micro_batch_size,
                                      dtype=torch.bfloat16 if uses_bf16(device, "auto") else torch.float32)
    torch.manual_seed(0)
    with torch.device(device):  # initialise on the device: seconds saved per build at 610m
        model = Transformer(args, backends=backends)
    pm = parallelize(model, ParallelDims(world_size=1), None, device, compile=opts.compile, fp8=opts.fp8)
    return pm, build_optimizer(model, 1e-4, 0.1, (0.9, 0.95), 1e-5)


HF_CLASSES = {"eurobert": "EuroBertForMaskedLM", "llama": "LlamaForCausalLM", "modernbert": "ModernBertForMaskedLM",
              "modernbert-decoder": "ModernBertDecoderForCausalLM"}


def build_hf(args: ModelArgs, device, objective: str, weights_from=None, sparse_prediction: bool = False):
    import transformers

    ids = SpecialIds(bos_id=0, eos_id=1, pad_id=2, mask_id=4)
    if args.prediction_head:
        arch = "modernbert" if objective == "mlm" else "modernbert-decoder"
        config = modernbert_hf_config(arch, args, ids)
        config.sparse_prediction = sparse_prediction
    else:
        arch = "eurobert" if objective == "mlm" else "llama"
        config = hf_config_for(arch, args, ids)
    config._attn_implementation = "sdpa"
    cls = getattr(transformers, HF_CLASSES[arch])
    with torch.device(device):
        model = cls(config)
    if weights_from is not None:
        model.load_state_dict(hf_state_dict(weights_from, EXPORT_ARCHS[arch], torch.float32), strict=False)
    model = model.to(device)
    return model, build_optimizer(model, 1e-4, 0.1, (0.9, 0.95), 1e-5)


def megamlm_step(pm, optimizer, batch, device):
    """The trainer's step: with the fused AdamW the non-finite skip is decided on the device, and on a GPU the host
    does not wait for the step's numbers."""
    streak = skip_streak(NonFiniteGuard(max_in_a_row=1), optimizer, device, None)
    train_step(StepSetup.of(pm, device, 1.0, "auto"), optimizer, [batch[0]], 1e-4, streak=streak)


def hf_step(model, optimizer, batch, device):
    use_bf16 = device.type == "cuda"
    input_ids, labels = batch[1].to(device), batch[2].to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
        loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(step, model, optimizer, batch, device) -> float:
    sync(device)
    start = time.perf_counter()
    step(model, optimizer, batch, device)
    sync(device)
    return time.perf_counter() - start


def child_peak_rss(opts, side: str) -> float:
    """Peak resident memory (MiB) of one side's steps above the RSS after building, in a fresh process."""
    cmd = [sys.executable, __file__, "--_child", side, "--preset", opts.preset, "--objective", opts.objective,
           "--steps", str(opts.steps), "--warmup", str(opts.warmup), "--device", "cpu",
           "--micro-batch-size", str(opts.micro_batch_size), "--mask-ratio", str(opts.mask_ratio),
           "--kernels", opts.kernels, "--attention", opts.attention, "--compile", opts.compile, "--block", opts.block]
    if opts.hf_sparse_prediction:
        cmd.append("--hf-sparse-prediction")
    if opts.fp8:
        cmd.append("--fp8")
    if opts.seq_length:
        cmd += ["--seq-length", str(opts.seq_length)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_above_build_mib"]


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def run_child(opts):
    """Build one side, then run its steps while a thread samples the resident set every 2 ms; print the
    peak above the RSS right after the build (ru_maxrss would include the build's own peak)."""
    device = torch.device("cpu")
    args = model_args(opts)
    batches = make_batches(args, opts, opts.warmup + opts.steps, opts.micro_batch_size)
    if opts._child == "megamlm":
        model, optimizer = build_megamlm(args, device, opts)
        step = megamlm_step
    else:
        model, optimizer = build_hf(args, device, opts.objective, sparse_prediction=opts.hf_sparse_prediction)
        step = hf_step
    gc.collect()
    base = _rss_mib()
    peak, done = [base], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mib())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for batch in batches:
        step(model, optimizer, batch, device)
    done.set()
    sampler.join()
    print(json.dumps({"peak_above_build_mib": max(peak[0], _rss_mib()) - base}))


def max_micro_batch(build, step, args, opts, device) -> int:
    """Largest power-of-two micro-batch (then refined) whose training step fits in GPU memory."""
    def fits(mb: int) -> bool:
        model = optimizer = None
        try:
            model, optimizer = build()
            batch = make_batches(args, opts, 1, mb)[0]
            step(model, optimizer, batch, device)
            step(model, optimizer, batch, device)
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            del model, optimizer
            torch.cuda.empty_cache()

    low, high = 0, 1
    while fits(high):
        low, high = high, high * 2
        if high > 4096:
            break
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def time_sides(sides: dict, args: ModelArgs, opts, device) -> dict:
    """Time every side at ``opts.micro_batch_size``, steps alternating between sides; print and return the figures."""
    mb = opts.micro_batch_size
    batches = make_batches(args, opts, opts.warmup + opts.steps, mb)
    tokens = mb * args.max_seq_length
    predicted = int(sum((b[0].targets != -100).sum() for b in batches) / len(batches))
    times = {name: [] for name in sides}
    peaks = {name: 0.0 for name in sides}
    failed: set[str] = set()
    for i, batch in enumerate(batches):
        for name, (step, model, optimizer) in sides.items():
            if name in failed:
                continue
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            try:
                elapsed = timed(step, model, optimizer, batch, device)
            except torch.OutOfMemoryError:
                failed.add(name)
                optimizer.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                continue
            peaks[name] = max(peaks[name], peak_device_memory_mib(device) or 0.0)
            if i >= opts.warmup:
                times[name].append(elapsed)
    if device.type == "cpu":
        peaks = {name: child_peak_rss(opts, name) for name in sides}
    figures = {"preset": opts.preset, "objective": opts.objective, "device": str(device),
               "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "micro_batch_size": mb, "seq_length": args.max_seq_length,
               "vocab_size": args.vocab_size, "hidden_size": args.hidden_size, "torch": torch.__version__,
               "threads": torch.get_num_threads(), "compile": opts.compile, "fp8": opts.fp8,
               "attention": opts.attention}
    print(f"# {opts.preset} ({args.num_layers} layers, hidden {args.hidden_size}, vocab {args.vocab_size}), "
          f"{opts.objective}, micro-batch {mb} x {args.max_seq_length} tokens, {figures['device_name']}, "
          f"compile {opts.compile}{', fp8' if opts.fp8 else ''}, attention {opts.attention}, "
          f"{opts.steps} timed steps after {opts.warmup} warm-up")
    for name in sides:
        if name in failed:
            figures[f"{name}_out_of_memory"] = True
            print(f"{name:8s} out of memory at micro-batch {mb}")
            continue
        median = statistics.median(times[name])
        rate = throughput(args, tokens, predicted, opts.objective == "clm", median, device, opts.peak_tflops)
        figures[f"{name}_tokens_per_s"] = rate.tokens_per_second
        figures[f"{name}_peak_mib"] = peaks[name]
        line = f"{name:8s} {rate.tokens_per_second:10.0f} tok/s | peak memory {peaks[name]:9.1f} MiB"
        if rate.mfu is not None:
            figures[f"{name}_mfu"] = rate.mfu
            line += f" | MFU {100 * rate.mfu:.1f}%"
        print(line)
    if "hf" in sides and not failed:
        figures["tokens_per_s_ratio"] = figures["megamlm_tokens_per_s"] / figures["hf_tokens_per_s"]
        figures["peak_memory_ratio"] = figures["megamlm_peak_mib"] / max(figures["hf_peak_mib"], 1e-9)
        print(f"tokens/s megamlm/hf: {figures['tokens_per_s_ratio']:.2f}x")
        print(f"peak memory megamlm/hf: {figures['peak_memory_ratio']:.2f}x")
    return figures


def profile_megamlm(pm, optimizer, args: ModelArgs, opts, device) -> dict:
    """A profiler trace of megamlm's steps at ``opts.micro_batch_size``; prints the summary and returns it."""
    batch = make_batches(args, opts, 1, opts.micro_batch_size)[0]
    megamlm_step(pm, optimizer, batch, device)  # warm (a new shape may compile)
    trace = profile_steps(lambda: megamlm_step(pm, optimizer, batch, device), opts.profile_steps,
                          Path(opts.profile) / f"trace_{opts.preset}_{opts.objective}_mb{opts.micro_batch_size}.json",
                          device)
    summary = summarize_trace(trace)
    print(summary.format())
    print(f"trace: {trace}")
    return {**summary.to_dict(), "trace": str(trace), "micro_batch_size": opts.micro_batch_size}


def main(argv=None):
    opts = parse_args(argv)
    device = resolve_device(opts.device)
    default_mb = 8 if device.type == "cuda" else 4
    sizes = ([int(x) for x in opts.micro_batch_sizes.split(",")] if opts.micro_batch_sizes
             else [opts.micro_batch_size or default_mb])
    opts.micro_batch_size = sizes[0]
    if opts._child:
        return run_child(opts)

    args = model_args(opts)
    ours, ours_opt = build_megamlm(args, device, opts)
    sides = {"megamlm": (megamlm_step, ours, ours_opt)}
    if opts.compare == "hf":
        theirs, theirs_opt = build_hf(args, device, opts.objective, weights_from=ours.model,
                                      sparse_prediction=opts.hf_sparse_prediction)
        sides["hf"] = (hf_step, theirs, theirs_opt)
    runs = []
    for mb in sizes:
        opts.micro_batch_size = mb
        runs.append(time_sides(sides, args, opts, device))
        write_json(opts.json, runs[0] if len(sizes) == 1 else {"sweep": runs})  # kept if a time limit cuts the run
    figures = runs[0]
    if len(runs) > 1:
        ran = [r for r in runs if "megamlm_tokens_per_s" in r]
        best = max(ran, key=lambda r: r["megamlm_tokens_per_s"]) if ran else runs[0]
        figures = {"sweep": runs, "best": best}
        print("sweep: " + ", ".join(f"mb {r['micro_batch_size']}: " + (
            f"{r['megamlm_tokens_per_s']:.0f} tok/s" + (f" ({100 * r['megamlm_mfu']:.1f}% MFU)" if "megamlm_mfu" in r
                                                        else "") if "megamlm_tokens_per_s" in r else "out of memory")
            for r in runs) + f"; best micro-batch {best['micro_batch_size']}")
        opts.micro_batch_size = best["micro_batch_size"]
    if opts.profile:
        if "hf" in sides:
            del sides["hf"], theirs, theirs_opt
            if device.type == "cuda":
                torch.cuda.empty_cache()
        figures["profile"] = profile_megamlm(ours, ours_opt, args, opts, device)
    if opts.max_batch and device.type == "cuda":
        del sides
        torch.cuda.empty_cache()
        figures["megamlm_max_micro_batch"] = max_micro_batch(lambda: build_megamlm(args, device, opts),
                                                             megamlm_step, args, opts, device)
        if opts.compare == "hf":
            figures["hf_max_micro_batch"] = max_micro_batch(lambda: build_hf(args, device, opts.objective,
                                                                          sparse_prediction=opts.hf_sparse_prediction),
                                                            hf_step, args, opts, device)
            print(f"largest micro-batch megamlm/hf: {figures['megamlm_max_micro_batch']} / "
                  f"{figures['hf_max_micro_batch']}")
    write_json(opts.json, figures)
    return figures


def write_json(path: str | None, figures: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(path).with_suffix(".tmp")
        tmp.write_text(json.dumps(figures, indent=2))
        tmp.replace(path)


if __name__ == "__main__":
    main()

"""Kernel vs reference: forward+backward time and peak memory, side by side.

    PYTHONPATH=. python benchmarks/kernel_speed.py                 # CPU, or the GPU when there is one
    PYTHONPATH=. python benchmarks/kernel_speed.py --device cpu --quick --json out.json

On a GPU every op runs through each backend of ``megamlm.kernels`` (reference, triton, and chunked
for the LM-head cross-entropy), and document-masked attention runs as SDPA with a dense mask against
FlexAttention block masks; on CPU only the cross-entropy has a second backend (chunked; Triton runs
on CPU only in its slow interpreter). Time is the median of ``--reps`` timed forward+backward
passes after one warm-up; peak memory is the high-water mark above what was allocated before the
pass (CUDA allocator stats on GPU, the process's peak resident set on CPU). Ratios are against the
reference: time < 1 is faster, memory < 1 is leaner.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm import kernels  # noqa: E402
from megamlm.model import attention_backends as ab  # noqa: E402

VOCAB = 128_256


@dataclass
class Case:
    op: str
    shape: str
    backend: str
    ms: float
    peak_mib: float | None
    time_ratio: float | None = None
    memory_ratio: float | None = None


def _cpu_rss_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_cpu_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (peak RSS) to the current RSS
        return True
    except OSError:
        return False


def measure(step: Callable[[], None], device: torch.device, reps: int) -> tuple[float, float | None]:
    """Median ms of ``step`` and its peak memory (MiB) above the memory in use before it."""
    step()  # warm-up: compiles kernels, fills allocator caches
    times, peaks = [], []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
            peaks.append((torch.cuda.max_memory_allocated() - base) / 2**20)
        else:
            base = _cpu_rss_bytes("VmRSS")
            can_peak = _reset_cpu_peak()
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1000)
            if can_peak:
                peaks.append((_cpu_rss_bytes("VmHWM") - base) / 2**20)
    return statistics.median(times), (max(peaks) if peaks else None)


def _fwd_bwd(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]):
    """A step that runs fn forward and backward on fresh-grad leaves."""

    def step() -> None:
        for t in inputs:
            t.grad = None
        out = fn(*inputs)
        if out.dim() == 0:
            out.backward()
        else:
            out.backward(torch.ones_like(out))
        for t in inputs:
            t.grad = None

    return step


@dataclass
class Bench:
    op: str
    shape: str
    make_inputs: Callable[[], list[torch.Tensor]]
    variants: list[tuple[str, Callable[..., torch.Tensor]]]  # (name, call); the first is the reference


def _kernel_variants(op: str, device: torch.device,
                     call: Callable[[str], Callable[..., torch.Tensor]]) -> list[tuple[str, Callable]]:
    """(backend name, ``call(backend)``) for each kernel backend that runs ``op`` here, the reference first."""
    names = ["reference"]
    if device.type == "cuda" and kernels.triton_available():
        names.append("triton")
    if op == "linear_cross_entropy":
        names.append("chunked")
    return [(name, call(name)) for name in names]


def benches_for(device: torch.device, quick: bool, ce_chunks: list[int]) -> list[Bench]:
    gpu = device.type == "cuda"
    dt = torch.bfloat16 if gpu else torch.float32

    def leaf(*shape, dtype=dt, scale=1.0):
        return (torch.randn(*shape, device=device, dtype=torch.float32) * scale).to(dtype).requires_grad_()

    out = []
    if gpu:
        rows, hidden, inter = (4096, 1024, 2816) if quick else (16384, 2048, 5632)
        batch, seq, heads, head_dim = (2, 2048, 16, 64) if quick else (8, 2048, 16, 128)
        out.append(Bench("rms_norm", f"x ({rows}, {hidden}) {dt}", lambda: [leaf(rows, hidden), leaf(hidden)],
                         _kernel_variants("rms_norm", device,
                                          lambda b: lambda x, w: kernels.rms_norm(x, w, 1e-5, backend=b))))
        cos, sin = torch.randn(seq, head_dim, device=device), torch.randn(seq, head_dim, device=device)
        out.append(Bench("apply_rotary", f"x ({batch}, {seq}, {heads}, {head_dim}) {dt}",
                         lambda: [leaf(batch, seq, heads, head_dim)],
                         _kernel_variants("apply_rotary", device,
                                          lambda b: lambda x: kernels.apply_rotary(x, cos, sin, backend=b))))
        out.append(Bench("swiglu", f"gate/up halves of ({rows}, {2 * inter}) {dt}", lambda: [leaf(rows, 2 * inter)],
                         _kernel_variants("swiglu", device,
                                          lambda b: lambda fused: kernels.swiglu(*fused.chunk(2, dim=-1), backend=b))))
        out.append(_document_attention_bench(device, leaf, batch, seq, heads, head_dim, quick))

    n_rows, hidden = ((2048, 512) if quick else (16384, 1152)) if gpu else ((512, 256) if quick else (2048, 384))
    targets = torch.randint(0, VOCAB, (n_rows,), device=device)
    targets[::7] = -100

    def ce(chunk):
        return lambda backend: lambda h, w: kernels.linear_cross_entropy(h, w, targets, chunk_size=chunk,
                                                                         backend=backend)

    variants = _kernel_variants("linear_cross_entropy", device, ce(0))
    fused = "triton" if any(name == "triton" for name, _ in variants) else "chunked"
    variants += [(f"{fused}@{chunk}", ce(chunk)(fused)) for chunk in ce_chunks]
    out.append(Bench("linear_cross_entropy", f"hidden ({n_rows}, {hidden}) x vocab {VOCAB} {dt}",
                     lambda: [leaf(n_rows, hidden), leaf(VOCAB, hidden, scale=0.02)], variants))
    return out


def _document_attention_bench(device, leaf, batch, seq, heads, head_dim, quick) -> Bench:
    """Document-masked attention: dense boolean mask through SDPA (reference) vs FlexAttention block masks."""
    kv_heads = heads // 4
    # Packed windows of documents 300-900 tokens long (a fixed pattern, so every run sees the same mask).
    lengths = torch.tensor([300, 900, 500, 700, 400, 800], device=device).repeat(seq // 300 + 1)
    ids = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)[:seq]
    document_ids = ids.expand(batch, seq).contiguous()

    mask = ab.dense_document_mask(document_ids, causal=False)  # built once, as attention() caches it

    def dense(q, k, v):
        return ab.sdpa(q, k, v, attn_mask=mask, causal=False)

    def flex(q, k, v):
        return ab.attention(q, k, v, causal=False, document_ids=document_ids, backend="flex")

    return Bench("document_attention", f"q ({batch}, {seq}, {heads}, {head_dim}), {kv_heads} kv heads, bidirectional",
                 lambda: [leaf(batch, seq, heads, head_dim), leaf(batch, seq, kv_heads, head_dim),
                          leaf(batch, seq, kv_heads, head_dim)],
                 [("sdpa+dense", dense), ("flex", flex)])


def run(device: torch.device, reps: int, quick: bool, ce_chunks: list[int]) -> list[Case]:
    results: list[Case] = []
    for bench in benches_for(device, quick, ce_chunks):
        if len(bench.variants) == 1:
            continue
        torch.manual_seed(0)
        inputs = bench.make_inputs()
        rows: list[Case] = []
        for name, call in bench.variants:
            try:
                ms, peak = measure(_fwd_bwd(call, inputs), device, reps)
            except Exception as e:  # one failing variant must not hide the others' figures
                print(f"  {bench.op:22s} {name:14s} FAILED: {type(e).__name__}: {e}", flush=True)
                continue
            rows.append(Case(bench.op, bench.shape, name, round(ms, 3), None if peak is None else round(peak, 1)))
            print(f"  {bench.op:22s} {name:14s} {ms:10.2f} ms  peak {peak if peak is None else round(peak)} MiB",
                  flush=True)
        if rows:
            ref = rows[0]
            for row in rows:
                row.time_ratio = round(row.ms / ref.ms, 3)
                if row.peak_mib is not None and ref.peak_mib:
                    row.memory_ratio = round(row.peak_mib / ref.peak_mib, 3)
        results.extend(rows)
        del inputs
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def print_table(results: list[Case], device_name: str) -> None:
    print(f"\nkernels vs reference (first row of each op) on {device_name} (forward+backward; ratio < 1 is better)")
    print(f"{'op':22s} {'backend':14s} {'ms':>10s} {'peak MiB':>10s} {'time/ref':>9s} {'mem/ref':>8s}  shape")
    for r in results:
        peak = "n/a" if r.peak_mib is None else f"{r.peak_mib:.0f}"
        mem = "n/a" if r.memory_ratio is None else f"{r.memory_ratio:.2f}x"
        print(f"{r.op:22s} {r.backend:14s} {r.ms:10.2f} {peak:>10s} {r.time_ratio:8.2f}x {mem:>8s}  {r.shape}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per case (median reported)")
    parser.add_argument("--quick", action="store_true", help="smaller shapes (smoke run)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--ce-chunks", default="",
                        help="comma-separated explicit chunk sizes to also time for the fused cross-entropy "
                             "(Triton on GPU, chunked on CPU); the default rows use the automatic chunk")
    args = parser.parse_args(argv)
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            parser.error("--device cuda but no CUDA device is visible; use --device cpu")
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    try:
        ce_chunks = [int(c) for c in args.ce_chunks.split(",") if c.strip()]
    except ValueError:
        parser.error(f"--ce-chunks takes comma-separated integers, got {args.ce_chunks!r}")
    if any(c < 1 for c in ce_chunks):
        parser.error("--ce-chunks sizes must be positive")
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"device {device_name}, torch {torch.__version__}, threads {torch.get_num_threads()}", flush=True)
    results = run(device, args.reps, args.quick, ce_chunks)
    print_table(results, device_name)
    if args.json:
        payload = {"device": device_name, "torch": torch.__version__, "quick": args.quick,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "results": [asdict(r) for r in results]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=args.json.parent, delete=False, suffix=".tmp") as f:
            json.dump(payload, f, indent=2)
        os.replace(f.name, args.json)


if __name__ == "__main__":
    main()

"""Time (and trace the memory of) the per-epoch sample index and the blend index, C++ helper against numpy.

    python benchmarks/index_build.py                          # 100B tokens, seq_length 2048: 48.8M samples per epoch
    python benchmarks/index_build.py --tokens 1e7             # CI size: seconds
    python benchmarks/index_build.py --tokens 1e9 --epochs 2  # two epochs of a 1B-token corpus
    python benchmarks/index_build.py --cache                  # also the cache: build + write, then a verified read

The corpus is synthetic (document lengths drawn with a fixed seed; only lengths matter to the
index). For each builder the run builds `--epochs` epochs (document order, sample index and
shuffle index of each, as `megamlm.data.sample_index.build_epoch` does) and the blend
interleave of `--blend-samples` entries (default: the samples of those epochs). Time is wall
seconds (process CPU seconds in brackets, fairer on a shared machine); memory is the peak that
tracemalloc traces during the build (numpy arrays included, output arrays included) over what
was allocated before it, measured in a second pass so tracing does not slow the timed one.
The builders are checked to give identical arrays before any figure is printed.

Measured (defaults, a shared 2-core VM; see RESULTS.md): one epoch of 100B tokens in 3.9-5.7 s
with the C++ helper (peak 1.0 GiB) and 13-18 s with numpy only (peak 2.75 GiB).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.data import _helpers_loader  # noqa: E402
from megamlm.data.blending import build_blend_index  # noqa: E402
from megamlm.data.index_cache import load_or_build_epochs  # noqa: E402
from megamlm.data.sample_index import (  # noqa: E402
    build_document_order,
    build_sample_index,
    build_shuffle_index,
    windows_per_epoch,
)

STEPS = ("document_order", "sample_index", "shuffle_index")


def timed(function):
    """(result, wall seconds, CPU seconds of this process)."""
    start, cpu = time.perf_counter(), time.process_time()
    result = function()
    return result, time.perf_counter() - start, time.process_time() - cpu


def traced_peak(function) -> int:
    """Bytes: tracemalloc's peak while `function` runs, over what was allocated before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = function()
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    del result
    return peak


def build_epochs(sizes, seq_length, seed, epochs, use_cpp, figures):
    """Every epoch's arrays (time per step summed over the epochs into `figures`)."""
    windows = windows_per_epoch(int(sizes.sum(dtype=np.int64)), seq_length)
    out = []
    for epoch in range(epochs):
        order, wall, cpu = timed(lambda epoch=epoch: build_document_order(len(sizes), seed, epoch, use_cpp))
        index, wall2, cpu2 = timed(lambda order=order: build_sample_index(sizes, order, seq_length, windows, use_cpp))
        shuffle, wall3, cpu3 = timed(lambda epoch=epoch: build_shuffle_index(windows, seed, epoch, use_cpp))
        for step, w, c in zip(STEPS, (wall, wall2, wall3), (cpu, cpu2, cpu3)):
            figures[step + "_s"] = figures.get(step + "_s", 0.0) + w
            figures[step + "_cpu_s"] = figures.get(step + "_cpu_s", 0.0) + c
        out.append((order, index, shuffle))
    figures["epoch_index_s"] = sum(figures[s + "_s"] for s in STEPS)
    figures["epoch_index_cpu_s"] = sum(figures[s + "_cpu_s"] for s in STEPS)
    return out


def time_cache(sizes, seq_length, seed, epochs) -> dict:
    """Seconds (wall, CPU) of ``load_or_build_epochs`` with a cache folder: build + write (checksums included),
    then the read a later run does (checksums and structure verified)."""
    with tempfile.TemporaryDirectory(prefix="index-cache-") as folder:
        _, write_s, write_cpu = timed(lambda: load_or_build_epochs(sizes, seq_length, seed, epochs, cache_dir=folder))
        _, read_s, read_cpu = timed(lambda: load_or_build_epochs(sizes, seq_length, seed, epochs, cache_dir=folder))
    return {"build_and_write_s": write_s, "build_and_write_cpu_s": write_cpu, "read_s": read_s, "read_cpu_s": read_cpu}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--tokens", type=float, default=100e9, help="corpus size in tokens (default 100e9)")
    parser.add_argument("--seq-length", type=int, default=2048)
    parser.add_argument("--mean-document-length", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=1, help="epochs to build (each is built on its own)")
    parser.add_argument("--blend-samples", type=float, default=None, help="blend interleave length (default: the "
                                                                          "samples)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--no-memory", action="store_true", help="skip the traced-memory pass")
    parser.add_argument("--cache", action="store_true",
                        help="also time the index cache: the first run's build and write of every epoch, then a "
                             "later run's (verified) read of them, in a temporary folder")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--output", default=None, help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)

    helpers = _helpers_loader.load()
    if helpers is None:
        print("the C++ helper is not built (pip install -e . or python setup.py build_ext --inplace); "
              "timing numpy only", file=sys.stderr)
    builders = {"cpp": True, "numpy": False} if helpers is not None else {"numpy": False}
    rng = np.random.default_rng(args.seed)
    num_documents = max(1, int(args.tokens // args.mean_document_length))
    sizes = rng.integers(1, 2 * args.mean_document_length, num_documents, dtype=np.int32)
    tokens = int(sizes.sum(dtype=np.int64))
    windows = windows_per_epoch(tokens, args.seq_length)
    blend_samples = int(args.blend_samples) if args.blend_samples else windows * args.epochs
    weights = [0.5, 0.3, 0.2]
    figures = {
        "documents": num_documents, "tokens": tokens, "seq_length": args.seq_length, "epochs": args.epochs,
        "samples_per_epoch": windows, "blend_samples": blend_samples, "builders": {},
    }

    reference = None
    for name, use_cpp in builders.items():
        f = figures["builders"][name] = {}
        epochs = build_epochs(sizes, args.seq_length, args.seed, args.epochs, use_cpp, f)
        if reference is None:
            reference = epochs
            figures["epoch_bytes"] = sum(a.nbytes for a in epochs[0])
        else:
            for got, want in zip(epochs, reference):
                assert all(np.array_equal(a, b) for a, b in zip(got, want)), f"{name} epoch arrays differ"
        del epochs
        blend, f["blend_index_s"], f["blend_index_cpu_s"] = timed(
            lambda use_cpp=use_cpp: build_blend_index(weights, blend_samples, use_cpp))
        if name == next(iter(builders)):
            reference_blend = blend
        else:
            assert all(np.array_equal(a, b) for a, b in zip(blend, reference_blend)), f"{name} blend arrays differ"
        del blend
    del reference, reference_blend

    if args.cache:
        figures["cache"] = time_cache(sizes, args.seq_length, args.seed, args.epochs)

    if not args.no_memory:
        for name, use_cpp in builders.items():
            f = figures["builders"][name]
            f["epoch_index_peak_bytes"] = traced_peak(
                lambda use_cpp=use_cpp: build_epochs(sizes, args.seq_length, args.seed, 1, use_cpp, {}))
            f["blend_index_peak_bytes"] = traced_peak(
                lambda use_cpp=use_cpp: build_blend_index(weights, blend_samples, use_cpp))
    figures["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    figures["command"] = "python benchmarks/index_build.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.output:
        Path(args.output).write_text(json.dumps(figures, indent=1) + "\n")
    if args.json:
        print(json.dumps(figures))
        return 0
    gib = 2**30

    def size(n: int) -> str:
        return f"{n / gib:.2f} GiB" if n >= gib / 10 else f"{n / 2**20:.1f} MiB"

    print(f"{tokens / 1e9:,.2f}B tokens in {num_documents:,} documents, seq_length {args.seq_length}: "
          f"{windows:,} samples per epoch ({size(figures['epoch_bytes'])} of index per epoch); "
          f"{args.epochs} epoch(s), blend of {blend_samples:,} samples")
    print("  wall seconds [CPU seconds]; peak = traced allocation during one epoch's build (outputs included)")
    for name, f in figures["builders"].items():
        steps = ", ".join(f"{s.replace('_', ' ')} {f[s + '_s']:.2f}" for s in STEPS)
        line = f"  {name:<6} epoch index {f['epoch_index_s']:7.2f} s [{f['epoch_index_cpu_s']:7.2f}] ({steps})"
        if "epoch_index_peak_bytes" in f:
            line += f", peak {size(f['epoch_index_peak_bytes'])}"
        print(line)
        line = f"  {'':<6} blend index {f['blend_index_s']:7.2f} s [{f['blend_index_cpu_s']:7.2f}]"
        if "blend_index_peak_bytes" in f:
            line += f", peak {size(f['blend_index_peak_bytes'])}"
        print(line)
    if "cache" in figures:
        c = figures["cache"]
        print(f"  cache  build + write {c['build_and_write_s']:7.2f} s [{c['build_and_write_cpu_s']:7.2f}], "
              f"a later run's read {c['read_s']:.2f} s [{c['read_cpu_s']:.2f}]")
    print(f"  identical arrays from every builder; process max RSS {size(figures['max_rss_bytes'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The summary table of a benchmarks/gpu_session.sh run: one line per training-step figure found in its folder.

    python benchmarks/session_summary.py /tmp/gpu
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def runs_of(figures: dict) -> list[dict]:
    """The timed runs of one train_step.py JSON: one run, or every micro-batch of a sweep."""
    return figures.get("sweep", [figures])


def line(name: str, run: dict) -> str:
    mode = f"{run.get('compile', 'none')}{' fp8' if run.get('fp8') else ''}"
    cells = [f"{name:28s}", f"{run.get('preset', '?'):5s} {run.get('objective', '?'):3s} mb "
                            f"{run.get('micro_batch_size', '?'):>3}",
             f"{mode:15s}"]
    if run.get("megamlm_out_of_memory"):
        return " | ".join(cells + ["out of memory"])
    cells.append(f"{run.get('megamlm_tokens_per_s', 0):9.0f} tok/s")
    if "megamlm_mfu" in run:
        cells.append(f"MFU {100 * run['megamlm_mfu']:5.1f}%")
    cells.append(f"{run.get('megamlm_peak_mib', 0) / 1024:6.1f} GiB")
    if "tokens_per_s_ratio" in run:
        cells.append(f"vs hf {run['tokens_per_s_ratio']:.2f}x tok/s, {run['peak_memory_ratio']:.2f}x memory")
    elif run.get("hf_out_of_memory"):
        cells.append("hf out of memory")
    return " | ".join(cells)


def main(folder: str) -> list[str]:
    lines = []
    for path in sorted(Path(folder).glob("*.json")):
        if path.name in ("attention_backends.json", "summary.json"):
            continue
        figures = json.loads(path.read_text())
        lines += [line(path.stem, run) for run in runs_of(figures)]
        if "profile" in figures:
            shares = figures["profile"]["shares"]
            lines.append(f"{'':28s}   profile: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in shares.items()))
    attention = Path(folder) / "attention_backends.json"
    if attention.exists():
        for row in json.loads(attention.read_text())["rows"]:
            lines.append(f"attention seq {row['seq_length']} {row['mode']}: fastest {row['fastest']} "
                         f"({', '.join(f'{b} {t:.2f} ms' for b, t in row['times_ms'].items() if t is not None)})")
    print("\n".join(lines) if lines else f"no figures in {folder}")
    return lines


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/gpu_session")

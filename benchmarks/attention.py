"""Attention backends side by side: forward + backward time of each backend that runs here, for bidirectional
(MLM) and causal (CLM) attention, with and without document masks, at the given sequence lengths.

    python benchmarks/attention.py --seq-lengths 2048,8192 --json /tmp/attention.json

The shapes are the 610m preset's (18 query heads, 6 KV heads, head dim 64, bf16 on GPU), with the batch
chosen so that every sequence length sees the same number of tokens. The timing is the one
``--attention-backend auto`` uses at start (``megamlm.model.attention_probe``), so this table shows what it
chooses and by how much.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.model.attention_probe import AttentionInputs, candidate_backends, time_attention  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--seq-lengths", default="2048,8192")
    p.add_argument("--tokens", type=int, default=16384, help="tokens per call (batch = tokens / sequence length)")
    p.add_argument("--heads", type=int, default=18)
    p.add_argument("--kv-heads", type=int, default=6)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    opts = parse_args(argv)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if opts.device == "auto" else opts.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"# attention forward + backward, {opts.heads} heads / {opts.kv_heads} KV heads, head dim {opts.head_dim}, "
          f"{opts.tokens} tokens per call, {dtype}, {name}, torch {torch.__version__}")
    rows = []
    for seq in (int(s) for s in opts.seq_lengths.split(",")):
        batch = max(opts.tokens // seq, 1)
        for documents in (False, True):
            for causal in (False, True):
                mode = ("causal" if causal else "bidirectional") + (" + documents" if documents else "")
                inputs = AttentionInputs(batch, seq, opts.heads, opts.kv_heads, opts.head_dim, documents)
                times = {b: time_attention(b, inputs, causal, device, dtype, reps=opts.reps)
                         for b in candidate_backends(device, opts.head_dim, dtype, documents)}
                ran = {b: t for b, t in times.items() if t is not None}
                best = min(ran, key=ran.get) if ran else None
                rows.append({"seq_length": seq, "batch": batch, "mode": mode, "times_ms":
                             {b: (None if t is None else 1e3 * t) for b, t in times.items()}, "fastest": best})
                cells = ", ".join(f"{b} {'-' if t is None else f'{1e3 * t:.2f} ms'}" for b, t in times.items())
                print(f"seq {seq:6d} x {batch:3d} | {mode:26s} | {cells} | fastest: {best}")
    figures = {"device_name": name, "torch": torch.__version__, "dtype": str(dtype), "heads": opts.heads,
               "kv_heads": opts.kv_heads, "head_dim": opts.head_dim, "tokens": opts.tokens, "rows": rows}
    if opts.json:
        Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.json).write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()

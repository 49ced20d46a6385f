"""Where a training step's time goes, read from a PyTorch profiler trace (Chrome trace JSON).

``profile_steps`` records a few steps under ``torch.profiler`` (each step inside a ``STEP_MARK``
annotation) and writes the trace; ``summarize_trace`` reads such a trace back and splits the steps' wall time
into matmuls, attention, element-wise work, the optimizer (with gradient clipping), communication and host
gaps:

- on a GPU from the device kernels: each kernel's time goes to the category its name belongs to, and the
  host gaps are the part of the steps' wall time in which no kernel ran (the GPU waited for the host);
- on a CPU from the operators' *self* times (an operator's time less that of the operators it called), and
  the host gaps are the steps' time outside any operator (Python, the autograd engine, the allocator).

Kernels on different streams may overlap (communication beside compute), so GPU shares can add up to more
than 1; the host-gap share is exact either way.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

STEP_MARK = "megamlm_step"
CATEGORIES = ("matmul", "attention", "element-wise", "optimizer", "communication", "host gaps")

# Order matters: the first pattern that matches a kernel or operator name wins.
_PATTERNS = (
    ("communication", r"nccl|rccl|gloo|c10d::|all_reduce|allreduce|reduce_scatter|all_gather|allgather"),
    ("attention", r"flash|fmha|attention|attn|sdpa|flex|_efficient_"),
    ("optimizer", r"adam|multi_tensor|_foreach_|optimizer|clip_grad|_fused_sgd|lamb"),
    ("matmul", (r"gemm|triton_tem_|cutlass|xmma|cublas|hipblas|rocblas|wgmma|_scaled_mm|\baten::(mm|addmm|bmm|baddbmm|"
                r"matmul|linear|_int_mm|addmv|mv)_?\b|^(sm\d+|ampere|hopper|volta|turing)_|nvjet|ck_gemm|\bmm_")),
)
_COMPILED = [(name, re.compile(pattern, re.IGNORECASE)) for name, pattern in _PATTERNS]


def categorize(name: str) -> str:
    """The category of a kernel or operator name: matmul, attention, optimizer, communication or element-wise."""
    for category, pattern in _COMPILED:
        if pattern.search(name):
            return category
    return "element-wise"


@dataclass
class ProfileSummary:
    source: str
    """"gpu kernels" or "cpu operators": what the times were read from."""
    steps: int
    step_seconds: float
    """Wall time of the profiled steps together."""
    shares: dict[str, float]
    """Share of the steps' wall time per category of ``CATEGORIES``."""
    top: list[tuple[str, float, int, str]] = field(default_factory=list)
    """(name, seconds, calls, category), the most expensive first."""

    def to_dict(self) -> dict:
        return {"source": self.source, "steps": self.steps, "step_seconds": self.step_seconds,
                "shares": self.shares,
                "top": [{"name": n, "seconds": s, "calls": c, "category": k} for n, s, c, k in self.top]}

    def format(self) -> str:
        per_step = self.step_seconds / max(self.steps, 1)
        lines = [f"profile: {self.steps} steps, {1e3 * per_step:.1f} ms per step, times from {self.source}",
                 "share of step time: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in self.shares.items())]
        lines.append(f"{'ms/step':>9} {'calls':>6}  {'category':13s} name")
        for name, seconds, calls, category in self.top:
            lines.append(f"{1e3 * seconds / max(self.steps, 1):9.2f} {calls:6d}  {category:13s} {name[:110]}")
        return "\n".join(lines)


def profile_steps(step: Callable[[], None], steps: int, trace_path: str | Path, device: torch.device) -> Path:
    """Run ``step`` ``steps`` times under the profiler (CPU operators, and GPU kernels on a GPU); write the trace."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            with record_function(STEP_MARK):
                step()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    return trace_path


def summarize_trace(trace: str | Path | dict, top: int = 15) -> ProfileSummary:
    """Split the annotated steps of a Chrome trace into ``CATEGORIES``; see the module docstring."""
    if not isinstance(trace, dict):
        trace = json.loads(Path(trace).read_text())
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    windows = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                     if e.get("cat") == "user_annotation" and e.get("name") == STEP_MARK)
    if not windows:
        raise ValueError(f"the trace has no {STEP_MARK!r} annotation; record it with profile_steps")
    wall = sum(end - start for start, end in windows)
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if kernels:
        timed = [(e["name"], categorize(e["name"]), float(e["ts"]), float(e["ts"]) + float(e["dur"]))
                 for e in kernels]
        timed = _clip(timed, windows)
        busy = _union_length([(s, e) for _, _, s, e in timed])
        source = "gpu kernels"
    else:
        ops = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation") and e.get("name") != STEP_MARK]
        timed = _clip(_self_times(ops), windows)
        busy = sum(e - s for _, _, s, e in timed)
        source = "cpu operators"
    per_name: dict[tuple[str, str], list] = defaultdict(lambda: [0.0, 0])
    per_category = dict.fromkeys(CATEGORIES, 0.0)
    for name, category, start, end in timed:
        per_name[(name, category)][0] += end - start
        per_name[(name, category)][1] += 1
        per_category[category] += end - start
    per_category["host gaps"] = max(wall - busy, 0.0)
    ranked = sorted(per_name.items(), key=lambda item: -item[1][0])[:top]
    return ProfileSummary(source=source, steps=len(windows), step_seconds=wall * 1e-6,
                          shares={k: v / wall for k, v in per_category.items()},
                          top=[(n, t * 1e-6, c, k) for (n, k), (t, c) in ranked])


def _self_times(ops: list[dict]) -> list[tuple[str, str, float, float]]:
    """Each operator's own time as (name, category, start, start + self duration): the time of the operators it
    called is subtracted. An operator without a category of its own takes its caller's (the element-wise ops
    inside ``_foreach_mul_`` or ``Optimizer.step`` are the optimizer's); annotations lend context, not time."""
    out = []
    by_thread: dict = defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(
            (float(e["ts"]), float(e["dur"]), e["name"], e.get("cat") == "user_annotation"))
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda op: (op[0], -op[1]))
        stack: list[list] = []  # [end, name, start, children's time, category, is an annotation]
        for start, dur, name, annotation in thread_ops:
            while stack and stack[-1][0] <= start:
                _pop_into(out, stack)
            category = categorize(name)
            if category == "element-wise" and stack:
                category = stack[-1][4]
            if not annotation:
                # An operator's time is its closest enclosing operator's children time (annotations hold none).
                for frame in reversed(stack):
                    if not frame[5]:
                        frame[3] += dur
                        break
            stack.append([start + dur, name, start, 0.0, category, annotation])
        while stack:
            _pop_into(out, stack)
    return out


def _pop_into(out: list, stack: list[list]) -> None:
    end, name, start, children, category, annotation = stack.pop()
    if not annotation:
        out.append((name, category, start, start + max(end - start - children, 0.0)))


def _clip(timed: list[tuple[str, str, float, float]], windows: list[tuple[float, float]]):
    """Keep the part of each interval that lies inside a step window."""
    out = []
    for name, category, start, end in timed:
        for w_start, w_end in windows:
            s, e = max(start, w_start), min(end, w_end)
            if e > s:
                out.append((name, category, s, e))
    return out


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, current_end = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > current_end:
            total += end - max(start, current_end)
            current_end = end
    return total

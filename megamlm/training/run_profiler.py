"""``--profile-steps A B``: a ``torch.profiler`` trace of steps A..B of the real run, in any layout.

The profiler starts before step A and stops after step B (or at the run's end, if it stops earlier); each profiled
step is one ``STEP_MARK`` annotation, and on a GPU the host waits for the device at its end, so that the step's
kernels fall inside it. The trace is written in TensorBoard's profiler-plugin format
(``<save>/profile/rank<R>.<time>.pt.trace.json``: Chrome trace JSON, which ``tensorboard --logdir <save>/profile``,
Perfetto and chrome://tracing open), then summarized on one screen (training/profiling.py: top operators or kernels,
the share of matmuls, attention, element-wise work and the optimizer, and of waiting: communication and host
gaps); the summary is logged and written beside the trace (``rank<R>.summary.txt``). Rank 0 profiles, or every
rank with --profile-all-ranks. Off (the default), each step costs one comparison.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, tensorboard_trace_handler

from megamlm.log import log, rank
from megamlm.training.profiling import STEP_MARK, summarize_trace

PROFILE_FOLDER = "profile"
"""Where the traces go, under --save."""


class RunProfiler:
    """Profiles the steps ``first``..``last`` of this rank (no-op when ``first`` is None)."""

    def __init__(self, first: int | None, last: int | None, folder: Path | None, device: torch.device):
        self.first, self.last, self.folder, self.device = first, last, folder, device
        self.profiler: profile | None = None
        self.done = first is None

    @classmethod
    def of(cls, cfg, device: torch.device) -> RunProfiler:
        """The profiler --profile-steps asks for, on the ranks that profile (a no-op elsewhere and when off)."""
        steps, save = cfg.logging.profile_steps, cfg.checkpoint.save
        if not steps or not save or (rank() != 0 and not cfg.logging.profile_all_ranks):
            return cls(None, None, None, device)
        return cls(steps[0], steps[1], Path(save) / PROFILE_FOLDER, device)

    def step(self, step: int):
        """The context the trainer runs ``step`` in: the profiler's annotation for a profiled step."""
        if self.done or step < self.first:
            return contextlib.nullcontext()
        return self._profiled(step)

    @contextlib.contextmanager
    def _profiled(self, step: int):
        if self.profiler is None:
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
            self.profiler = profile(activities=activities, record_shapes=False)
            self.profiler.start()
            log(f"profiling steps {step}-{self.last} (--profile-steps)")
        with record_function(STEP_MARK):
            yield
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the step's kernels end inside its annotation
        if step >= self.last:
            self.close()

    def close(self) -> Path | None:
        """Stop the profiler (after the last profiled step, or at the run's end), write the trace and its summary;
        the trace's path (None when nothing was profiled)."""
        if self.profiler is None:
            self.done = True
            return None
        profiler, self.profiler, self.done = self.profiler, None, True
        profiler.stop()
        self.folder.mkdir(parents=True, exist_ok=True)
        before = set(self.folder.glob("*.pt.trace.json"))
        tensorboard_trace_handler(str(self.folder), worker_name=f"rank{rank()}")(profiler)
        (trace,) = set(self.folder.glob(f"rank{rank()}.*.pt.trace.json")) - before
        summary = summarize_trace(trace).format()
        (self.folder / f"rank{rank()}.summary.txt").write_text(summary + "\n")
        log(f"profile trace {trace} (open with tensorboard --logdir {self.folder})\n{summary}")
        return trace

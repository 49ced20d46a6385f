"""When a run stops early, cleanly and with a checkpoint: a pre-emption signal, --exit-duration-in-mins,
--exit-interval. Every rank takes the same decision after the same step (``any_rank``, one tiny all-reduce).

Stop signals: the first SIGTERM/SIGUSR1/SIGINT asks the run to save and stop; a second one exits at once.

SLURM sends SIGUSR1 ahead of a time limit (``--signal=USR1@120``) and SIGTERM on pre-emption; Ctrl-C sends
SIGINT. The handler only sets a flag; the training loop finishes the step in progress, saves a checkpoint and
exits 0. Exiting at once on the second signal cannot corrupt anything: a checkpoint only counts once its
completion marker is written, and the ``latest`` pointer is replaced by an atomic rename.

One request often arrives twice within milliseconds: SLURM signals every process of a job step while the launch
script forwards the signal to the workers too, and Ctrl-C reaches a whole process group. A signal within
``SAME_REQUEST_S`` of the first is therefore the same request, not the second one.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

from megamlm.errors import UserError
from megamlm.log import log, write_line
from megamlm.parallel.launch import host_collective_device

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
SAME_REQUEST_S = 1.0


class ExitSignalHandler:
    """Context manager that installs the handlers and restores the previous ones on exit."""

    def __init__(self, signals: tuple[int, ...] = DEFAULT_SIGNALS):
        self.signals = signals
        self.received: str | None = None
        self._received_at = 0.0
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.received is not None

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.received is not None and time.monotonic() - self._received_at < SAME_REQUEST_S:
            return  # the same request delivered twice (see the module docstring)
        if self.received is not None:
            write_line(f"received a second signal ({name}) after {self.received}: exiting now without saving",
                       sys.stderr)
            try:
                sys.stdout.flush()
            except BrokenPipeError:  # `| tee log`, whose tee the same Ctrl-C ended: the lines are lost, not the exit
                pass
            os._exit(128 + signum)
        self.received, self._received_at = name, time.monotonic()
        log(f"received {name}: finishing this step, then saving a checkpoint and exiting "
            "(send it again to exit at once without saving)")

    def __enter__(self) -> "ExitSignalHandler":
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
        else:
            log("warning: not on the main thread, so SIGTERM/SIGUSR1/SIGINT keep their default action (no save on "
                "exit)")
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


def any_rank(flags: list[bool], group=None) -> list[bool]:
    """Element-wise OR of ``flags`` over the ranks of ``group`` (the whole job when None); local without
    torch.distributed."""
    if not (dist.is_available() and dist.is_initialized()):
        return list(flags)
    tensor = torch.tensor([1 if f else 0 for f in flags], dtype=torch.int32, device=host_collective_device(group))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return [bool(v) for v in tensor.tolist()]


class WriteFailure(UserError):
    """The run stopped because a file it writes as it goes (metrics.jsonl, TensorBoard events) could not be
    written, e.g. a full disk; the message says which checkpoint holds the run (exit 2)."""


class StopPolicy:
    def __init__(self, signals: ExitSignalHandler, exit_interval: int | None = None,
                 exit_duration_in_mins: float | None = None, start_time: float | None = None, group=None):
        """``start_time`` (``time.monotonic()``): when the run started, which --exit-duration-in-mins counts from;
        default now. The trainer passes the start of ``pretrain`` so that loading data and building the model count
        against a job's time limit, but not the age of a process that ran other things first (a study driver, a
        test session)."""
        self.signals = signals
        self.exit_interval = exit_interval
        self.exit_duration_in_mins = exit_duration_in_mins
        self.start_time = time.monotonic() if start_time is None else start_time
        self.group = group
        self.failure: str | None = None
        """Set by the trainer: this rank's failed write (training/reporter.py), a reason to stop on every rank."""
        self.failed = False
        """Whether some rank's write failed, as of the last ``reason_to_stop``."""

    def reason_to_stop(self, step: int) -> str | None:
        """Why the run stops after ``step`` (the same answer on every rank), or None to continue."""
        out_of_time = (self.exit_duration_in_mins is not None
                       and time.monotonic() - self.start_time >= 60.0 * self.exit_duration_in_mins)
        failed, signalled, out_of_time = any_rank([self.failure is not None, self.signals.requested, out_of_time],
                                                  self.group)
        self.failed = failed
        if failed:
            return self.failure or "a failed write on another rank"
        if signalled:
            return f"signal {self.signals.received}" if self.signals.received else "a signal on another rank"
        if out_of_time:
            return f"--exit-duration-in-mins {self.exit_duration_in_mins} reached"
        if self.exit_interval and step % self.exit_interval == 0:
            return f"--exit-interval {self.exit_interval} reached at step {step}"
        return None

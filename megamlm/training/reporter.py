"""Step accounting: what the host reads from the device and when, and where a run's numbers go (the console log
line, TensorBoard scalars and ``metrics.jsonl``, training/metrics_file.py).

A step's loss, gradient norm and applied flag come out of ``train_step`` as 0-d device tensors (``StepResult``,
training/step.py). The loop hands every finished step to a ``StepLedger`` and settles it when the numbers are needed:
every step, or, where the host reads only then (a ``SkipStreak`` holds back the updates in between, the GPU path),
at a log line, a validation, a checkpoint, a stop, the last step, and every step when an ``on_step`` callback
watches. The pending steps are read in one device-to-host copy, then accounted for in order, step by step: the
callback, the skip warning, the NonFiniteGuard's streak and the ``RunReporter``. The logged values are therefore the
same whenever they are read; only the moment the host reads them moves. Where the host does not wait, it builds the
next step's batch while the device still runs the current one.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.utils.tensorboard import SummaryWriter

from megamlm.errors import os_error_text
from megamlm.log import log, rank
from megamlm.model.config import ModelArgs
from megamlm.training.metrics import format_duration, throughput
from megamlm.training.metrics_file import METRICS_FILE, MetricsFile
from megamlm.training.nonfinite import NonFiniteGuard
from megamlm.training.step import StepOutcome, StepResult
from megamlm.training.tracker_backends import open_trackers
from megamlm.training.trackers import Trackers, tensorboard_folder
from megamlm.training.validation import ValidationResult


@dataclass(frozen=True)
class PendingStep:
    """A finished step the host has not read: ``train_step``'s result and what the loop knows of the step."""

    result: StepResult
    step: int
    objective: str
    lr: float
    sample_ids: list[int]
    """The global sample ids this rank trained on."""
    consumed_samples: int
    is_switch_step: bool


def read_steps(steps: list[PendingStep]) -> list[StepOutcome]:
    """``steps`` with host numbers; the device tensors of all of them come back in one transfer."""
    if not steps:
        return []
    values = torch.stack([torch.stack([s.result.loss.double(), s.result.grad_norm.double(),
                                       s.result.applied.double()]) for s in steps]).tolist()
    return [StepOutcome(loss=loss, grad_norm=norm, applied=bool(applied), predicted_tokens=s.result.predicted_tokens,
                        lr=s.lr, sample_ids=s.sample_ids, step=s.step, objective=s.objective,
                        consumed_samples=s.consumed_samples, is_switch_step=s.is_switch_step)
            for s, (loss, norm, applied) in zip(steps, values)]


class StepLedger:
    """Steps the host has not read yet, and their accounting once read."""

    def __init__(self, guard: NonFiniteGuard, reporter: RunReporter, batch_sizes: Sequence[int],
                 on_step: Callable[[StepOutcome], None] | None = None):
        self.guard, self.reporter, self.on_step = guard, reporter, on_step
        self.batch_sizes = batch_sizes
        """The global batch of each step (step k at index k - 1)."""
        self.pending: list[PendingStep] = []

    def add(self, step: PendingStep) -> None:
        self.pending.append(step)

    def settle(self) -> int | None:
        """Read and account for every pending step, oldest first. Returns the step at which the guard stops the
        run (its --max-skipped-steps streak is complete); the steps after it were held back on the device
        (``SkipStreak``) and are not accounted for. None when the run goes on."""
        steps, self.pending = read_steps(self.pending), []
        for s in steps:
            if self.on_step is not None:
                self.on_step(s)
            if not s.applied:
                log(f"warning: step {s.step} skipped (update not applied): loss {s.loss}, grad-norm "
                    f"{s.grad_norm}; {len(self.guard.in_a_row) + 1} in a row, the run stops at "
                    f"{self.guard.max_in_a_row}")
            if self.guard.record(s.step, s.applied, s.loss, s.grad_norm, s.sample_ids):
                return s.step
            self.reporter.step(s, self.batch_sizes[s.step - 1])
        return None


@dataclass
class IntervalSummary:
    loss: float
    grad_norm: float
    tokens: int
    predicted: int
    """Tokens that carried a loss (the LM head's work)."""
    seconds: float


class IntervalMeter:
    """Averages loss and grad norm over the steps since the last log line and counts the work done in them."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        self.start = time.perf_counter()
        self.losses, self.grad_norms, self.tokens, self.predicted = [], [], 0, 0

    def add(self, loss: float, grad_norm: float, tokens: int, predicted: int) -> None:
        self.losses.append(loss)
        self.grad_norms.append(grad_norm)
        self.tokens += tokens
        self.predicted += predicted

    def flush(self) -> IntervalSummary:
        n = max(len(self.losses), 1)
        summary = IntervalSummary(sum(self.losses) / n, sum(self.grad_norms) / n, self.tokens, self.predicted,
                                  time.perf_counter() - self.start)
        self._reset()
        return summary


def _tensorboard_thread_errors_in_one_line() -> None:
    """TensorBoard writes from its own thread; an OSError there (a full disk) would print that thread's traceback.
    The thread keeps the error and the main thread raises it at its next write or close, which RunReporter turns
    into the one line that stops the run; so the thread's own report is dropped (others are reported as before)."""
    previous = threading.excepthook
    if getattr(previous, "megamlm_tensorboard", False):
        return

    def hook(args) -> None:
        if isinstance(args.exc_value, OSError) and type(args.thread).__name__ == "_AsyncWriterThread":
            return
        previous(args)

    hook.megamlm_tensorboard = True
    threading.excepthook = hook


class TensorBoardWriter:
    """TensorBoard scalars when a folder is given (rank 0 only); a no-op otherwise."""

    def __init__(self, log_dir: str | None, start_step: int = 0):
        self.writer = None
        if log_dir and rank() == 0:
            _tensorboard_thread_errors_in_one_line()
            # a resume writes on in the same folder; TensorBoard drops what an earlier launch wrote past the
            # checkpoint it resumes (steps > start_step), so that each step is there once
            self.writer = SummaryWriter(log_dir=log_dir, purge_step=start_step + 1 if start_step else None)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(name, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


ETA_WINDOW = 3
"""Log intervals the ETA's pace is measured over (after the first step, which compiles and warms up)."""


class RunReporter:
    """Logs every ``log_interval`` steps (and at the switch and the last step) and every validation.

    Throughput is ``metrics.throughput`` of the interval's tokens, the benchmark's function: tokens/s of the whole
    job, MFU over the ``devices`` devices' peak (where the device's peak is known) and this process's peak device
    memory (GPU only).
    """

    def __init__(self, save_dir: str | None, tensorboard_dir: str | None, log_interval: int, train_iters: int,
                 start_step: int, model_args: ModelArgs, device: torch.device, devices: int = 1):
        self.log_interval, self.train_iters, self.start_step = log_interval, train_iters, start_step
        self.model_args, self.device, self.devices = model_args, device, devices
        self.seq_length = model_args.max_seq_length
        self.meter = IntervalMeter()
        self.tensorboard = TensorBoardWriter(tensorboard_dir, start_step)
        self.metrics = MetricsFile(save_dir, start_step)
        self.run_start = time.perf_counter()
        self.failure: str | None = None
        """Why writing the metrics or TensorBoard events failed (a full disk): the trainer stops the run on it
        like on a signal, saving a checkpoint if it can. Nothing more is written after a failure."""
        self.marks: deque[tuple[int, float]] = deque(maxlen=ETA_WINDOW + 1)
        """(step, time it was accounted) of the first step and the recent log lines: the ETA's window."""
        self.recipe = None
        """The run's phases (config/phases.py), set by the trainer: where they change the sequence length, each
        step's tokens are its batch x its phase's length (``tokens_at``)."""
        self.tokens_through = None
        """With a document --sample-mode, set by the trainer: the tokens of the stream's samples [0, n) without their
        padding (``data.documents.tokens_through``), which every token count then reads."""
        self.trackers = Trackers()
        """The experiment trackers (--report-to, training/trackers.py): each metrics record goes to them too."""
        self.phase_index: int | None = None
        """The recipe phase of the last step accounted (a change is an event for the trackers)."""
        self.objective: str | None = None
        """The objective of the last step accounted (a change is an event for the trackers)."""

    def open_trackers(self, cfg, record: dict) -> None:
        """Start the trackers of ``cfg`` (a Config) with the run ``record``; TensorBoard shares this reporter's
        events folder (--tensorboard-dir, or <save>/tensorboard with --report-to tensorboard alone)."""
        log_cfg = cfg.logging
        folder = tensorboard_folder(log_cfg.tensorboard_dir, log_cfg.report_to, cfg.checkpoint.save)
        if folder and self.tensorboard.writer is None:
            self.tensorboard = TensorBoardWriter(folder, self.start_step)
        self.trackers = open_trackers(cfg, record, self.tensorboard.writer, self.start_step,
                                      self.metrics.dropped_through)

    def _record(self, kind: str, step: int, **fields) -> None:
        """One metrics.jsonl record, and the same to the trackers; in a recipe of several phases it names the phase
        (numbered from 1, as the log) that trained ``step``."""
        if self.recipe is not None and len(self.recipe.phases) > 1:
            fields = {"phase": self.recipe.phase_at(step).index + 1, **fields}
        self._write(METRICS_FILE, self.metrics.append, kind, step, **fields)
        self.trackers.record(kind, step, fields)

    def _events(self, s: StepOutcome) -> None:
        """Phase and objective changes at step ``s``, as the trackers' events."""
        if self.recipe is not None and len(self.recipe.phases) > 1:
            phase = self.recipe.phase_at(s.step)
            if self.phase_index is not None and phase.index != self.phase_index:
                self.trackers.event(s.step, f"entering {phase.describe()}")
            self.phase_index = phase.index
        if self.objective is not None and s.objective != self.objective:
            self.trackers.event(s.step, f"objective switch before step {s.step}: {self.objective} -> {s.objective}")
        self.objective = s.objective

    def seq_length_at(self, step: int) -> int:
        return self.recipe.phase_at(step).seq_length if self.recipe is not None else self.seq_length

    def tokens_at(self, step: int, consumed_samples: int) -> int:
        """Tokens the model has trained on once ``step`` is done: consumed samples x the sequence length, or with
        phases of several lengths, the recipe's tokens through the step plus any samples consumed before its step 1
        (a --continue-from parent's) at the first phase's length."""
        recipe = self.recipe
        if self.tokens_through is not None:
            return self.tokens_through(consumed_samples)
        if recipe is None or len({p.seq_length for p in recipe.phases}) == 1:
            return consumed_samples * self.seq_length_at(step)
        before = consumed_samples - recipe.samples_through[min(step, recipe.last_step)]
        return recipe.tokens_through(step) + before * recipe.phases[0].seq_length

    def _write(self, what: str, write, *args, **kwargs) -> None:
        if self.failure is not None:
            return
        try:
            write(*args, **kwargs)
        except OSError as err:
            self.failure = f"writing {what} failed: {os_error_text(err)}"

    def eta(self, step: int, now: float) -> float:
        """Seconds left, at the pace of the recent steps: from the end of the first step (which compiles and warms
        up) or, later, over the last ``ETA_WINDOW`` log intervals; the whole run's pace at the first step."""
        earlier = [(s, t) for s, t in self.marks if s < step]
        if earlier:
            first_step, first_time = earlier[0]
            per_step = (now - first_time) / (step - first_step)
        else:
            per_step = (now - self.run_start) / max(step - self.start_step, 1)
        return per_step * (self.train_iters - step)

    def logs_at(self, step: int, is_switch_step: bool) -> bool:
        return step % self.log_interval == 0 or step == self.train_iters or is_switch_step

    def step(self, s: StepOutcome, global_batch_size: int) -> None:
        """One finished step, with host numbers (``s`` read)."""
        tokens = global_batch_size * self.seq_length_at(s.step) if self.tokens_through is None else \
            self.tokens_through(s.consumed_samples) - self.tokens_through(s.consumed_samples - global_batch_size)
        self.meter.add(s.loss, s.grad_norm, tokens, s.predicted_tokens)
        if self.trackers.active:
            self._events(s)
        now = time.perf_counter()
        if s.step == self.start_step + 1:
            self.marks.append((s.step, now))
        self._write("the TensorBoard events", self.tensorboard.scalars, s.step, {
            "loss": s.loss, f"loss/{s.objective}": s.loss, "lr": s.lr, "grad_norm": s.grad_norm})
        if not self.logs_at(s.step, s.is_switch_step):
            return
        # The steps this record averages: after a resume the first window starts at the resumed step, not at the
        # window's start (the steps before it were in the launch before, which recorded none of them).
        steps = [s.step - len(self.meter.losses) + 1, s.step]
        summary = self.meter.flush()
        rate = throughput(self.model_args, summary.tokens, summary.predicted, s.objective == "clm", summary.seconds,
                          self.device, devices=self.devices)
        eta = self.eta(s.step, now)
        if not self.marks or self.marks[-1][0] != s.step:
            self.marks.append((s.step, now))
        mfu = f" | MFU {100 * rate.mfu:.1f}%" if rate.mfu is not None else ""
        memory = f" | peak memory {rate.peak_memory_mib:.0f} MiB" if rate.peak_memory_mib is not None else ""
        tokens = self.tokens_at(s.step, s.consumed_samples)
        log(f"step {s.step}/{self.train_iters} | objective {s.objective} | loss {summary.loss:.4f} | lr {s.lr:.1e} | "
            f"tokens {tokens:,} | "
            f"grad-norm {summary.grad_norm:.2f} | {rate.tokens_per_second:.0f} tok/s{mfu}{memory} | "
            f"eta {format_duration(eta)}")
        # TensorBoard gets this record's scalars (train/tokens_per_second, ...) as a tracker (training/trackers.py)
        self._record("train", s.step, steps=steps, samples=s.consumed_samples, tokens=tokens, objective=s.objective,
                     loss=summary.loss, lr=s.lr, grad_norm=summary.grad_norm,
                     tokens_per_second=rate.tokens_per_second, mfu=rate.mfu, peak_memory_mib=rate.peak_memory_mib)

    def validation(self, result: ValidationResult, consumed_samples: int) -> None:
        self.meter.start += result.seconds  # tokens/s measures training: the evaluation's time does not count
        log(result.describe())
        self._record("validation", result.step, samples=consumed_samples,
                     tokens=self.tokens_at(result.step, consumed_samples), **result.scalars(),
                     validation_samples=result.samples,
                     **result.token_counts(), **result.setting())

    def close(self) -> None:
        """Close the trackers, then flush and close the TensorBoard events (also after a failed write: what was
        written stays whole)."""
        self.trackers.close()
        try:
            self.tensorboard.close()
        except OSError as err:
            self.failure = self.failure or f"writing the TensorBoard events failed: {os_error_text(err)}"

"""Interval averages for the log line, and TensorBoard scalars."""

from __future__ import annotations

import time
from dataclasses import dataclass

from torch.utils.tensorboard import SummaryWriter

from megamlm.log import rank


@dataclass
class IntervalSummary:
    loss: float
    grad_norm: float
    tokens_per_second: float


class IntervalMeter:
    """Averages loss and grad norm over the steps since the last log line and measures throughput."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        self.start = time.perf_counter()
        self.losses, self.grad_norms, self.tokens = [], [], 0

    def add(self, loss: float, grad_norm: float, tokens: int) -> None:
        self.losses.append(loss)
        self.grad_norms.append(grad_norm)
        self.tokens += tokens

    def flush(self) -> IntervalSummary:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        n = max(len(self.losses), 1)
        summary = IntervalSummary(sum(self.losses) / n, sum(self.grad_norms) / n, self.tokens / elapsed)
        self._reset()
        return summary


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class TensorBoardWriter:
    """TensorBoard scalars when a folder is given (rank 0 only); a no-op otherwise."""

    def __init__(self, log_dir: str | None):
        self.writer = None
        if log_dir and rank() == 0:
            self.writer = SummaryWriter(log_dir=log_dir)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(name, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

"""When a run stops early, cleanly and with a checkpoint: a pre-emption signal, --exit-duration-in-mins,
--exit-interval. Every rank takes the same decision after the same step."""

from __future__ import annotations

import time

from megamlm.training.agreement import any_rank
from megamlm.training.signals import ExitSignalHandler

# --exit-duration-in-mins counts from about process start (this module is imported with the trainer), so the
# minutes spent loading data and building the model count against a job's time limit too.
PROCESS_START = time.monotonic()


class StopPolicy:
    def __init__(self, signals: ExitSignalHandler, exit_interval: int | None = None,
                 exit_duration_in_mins: float | None = None, start_time: float | None = None, group=None):
        self.signals = signals
        self.exit_interval = exit_interval
        self.exit_duration_in_mins = exit_duration_in_mins
        self.start_time = PROCESS_START if start_time is None else start_time
        self.group = group

    def reason_to_stop(self, step: int) -> str | None:
        """Why the run stops after ``step`` (the same answer on every rank), or None to continue."""
        out_of_time = (self.exit_duration_in_mins is not None
                       and time.monotonic() - self.start_time >= 60.0 * self.exit_duration_in_mins)
        signalled, out_of_time = any_rank([self.signals.requested, out_of_time], self.group)
        if signalled:
            return f"signal {self.signals.received}" if self.signals.received else "a signal on another rank"
        if out_of_time:
            return f"--exit-duration-in-mins {self.exit_duration_in_mins} reached"
        if self.exit_interval and step % self.exit_interval == 0:
            return f"--exit-interval {self.exit_interval} reached at step {step}"
        return None

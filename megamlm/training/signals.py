"""Stop signals: the first SIGTERM/SIGUSR1/SIGINT asks the run to save and stop; a second one exits at once.

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

from megamlm.log import log

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
            print(f"received a second signal ({name}) after {self.received}: exiting now without saving",
                  file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(128 + signum)
        self.received, self._received_at = name, time.monotonic()
        log(f"received {name}: finishing this step, then saving a checkpoint and exiting "
            "(send it again to exit at once without saving)")

    def __enter__(self) -> "ExitSignalHandler":
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
        else:
            log("warning: not on the main thread, so SIGTERM/SIGUSR1/SIGINT keep their default action (no save on exit)")
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

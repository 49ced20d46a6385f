"""``metrics.jsonl`` beside the checkpoints: one JSON object per line, appended as the run goes.

Every record has ``kind``, ``step``, ``samples`` and ``tokens`` (consumed so far by the model: a
``--continue-from`` run counts its parent's too, so runs of a study line up on a tokens axis), then:

- ``"train"`` (every logged step): ``objective``, ``loss`` and ``grad_norm`` (means over the steps since the
  previous record, as in the log line), ``lr``, ``tokens_per_second``, ``mfu`` (model FLOPs utilisation over the
  devices' dense bf16 peak; ``null`` where the device's peak is unknown, as on CPU) and ``peak_memory_mib``
  (rank 0's peak device memory so far; ``null`` off GPU), both as ``metrics.throughput`` computes them for the
  benchmark;
- ``"validation"``: ``mlm_loss``, ``mlm_accuracy``, ``clm_loss``, ``validation_samples`` and the tokens scored
  (``mlm_tokens``: the masked positions, ``clm_tokens``); a run that trains MNTP adds ``mntp_loss`` and
  ``mntp_tokens``.

Records may carry more fields (a reader takes those it knows); non-finite numbers are written as ``null``.
A launch that starts at step k first drops every record after step k (the file is rewritten to a temporary name,
then renamed), so a resumed run never holds a step twice; a line cut short by a crash is dropped too.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from megamlm.errors import UserError
from megamlm.log import rank

METRICS_FILE = "metrics.jsonl"


class MetricsError(UserError, ValueError):
    """A run folder without a readable metrics file."""


def _finite(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def read_metrics(path: str | Path, kind: str | None = None) -> list[dict]:
    """The records of a metrics file (or of a run folder's), in order; only ``kind`` ones when given."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise MetricsError(f"{path} not found; pass the --save folder of a run (its metrics.jsonl is written there)")
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the last line of a run that was killed while writing it
        if isinstance(record, dict) and (kind is None or record.get("kind") == kind):
            records.append(record)
    return records


class MetricsFile:
    """Appends records to ``save_dir/metrics.jsonl`` (rank 0 only; nothing without a folder)."""

    def __init__(self, save_dir: str | Path | None, start_step: int):
        self.path = Path(save_dir) / METRICS_FILE if save_dir and rank() == 0 else None
        self.dropped_through = start_step
        """The last step of the records dropped (an earlier launch ran past the checkpoint this one starts from):
        the trackers got those records already (training/trackers.py)."""
        if self.path is not None and self.path.exists():
            records = read_metrics(self.path)
            kept = [r for r in records if int(r.get("step", 0)) <= start_step]
            self.dropped_through = max([start_step, *(int(r.get("step", 0)) for r in records)])
            tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
            try:
                tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
            except OSError:
                tmp.unlink(missing_ok=True)  # the file itself is untouched
                raise
            os.replace(tmp, self.path)

    def append(self, kind: str, step: int, **fields) -> None:
        """One record as one whole line: a write that fails (a full disk) is cut back to the file's previous
        size, and the OSError, naming the file, is raised."""
        if self.path is None:
            return
        record = {"kind": kind, "step": step, **{k: _finite(v) for k, v in fields.items()}}
        line = (json.dumps(record) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                _write_all(fd, line)
            except OSError as err:
                os.ftruncate(fd, size)
                raise OSError(err.errno, err.strerror, str(self.path)) from None
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]

"""Experiment trackers (``--report-to``): TensorBoard, trackio, wandb and MLflow, fed from the run's own records.

``metrics.jsonl`` stays the source of truth (training/metrics_file.py); every tracker gets the same records:

- at start, the run record (``run_record.json``: the resolved configuration, model shape, schedules, software,
  lineage) and the run's name, project and group (a study's runs share the study's name as their group);
- every record ``metrics.jsonl`` gets, as scalars named ``kind/field`` (``train/loss``, ``train/tokens_per_second``,
  ``train/mfu`` where measured, ``validation/mlm_loss``, ``validation/clm_loss``...) at the record's step; text
  fields and nulls (a non-finite number, an unknown MFU) are left out, as a reader of the file skips them;
- events at the step they happen: an objective switch and the entry into a recipe phase, as one line of text.

Trackers run on rank 0 only. One that raises (no network, a bad key, a full disk) warns once, in one line naming it
and the error, and gets nothing more; the run goes on. Each tracker's library is an optional extra, imported only
when the tracker opens (training/tracker_backends.py, which opens them: ``open_trackers``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from megamlm.log import log

LIBRARY_TRACKERS = ("trackio", "wandb", "mlflow")
"""The trackers whose library is an optional extra (megamlm/extras.py names each under its own name)."""


@dataclass(frozen=True)
class TrackedRun:
    """What every tracker is told at start."""

    name: str
    """The run's name: --tracker-run-name, or the --save folder's name."""
    project: str
    group: str | None
    """--tracker-group: a study's name, shared by its runs."""
    record: dict
    """The run record (training/run_record.py) with its lineage."""
    folder: Path | None
    """The --save folder: local stores without a setting of their own go under it (TensorBoard's events)."""

    @property
    def parent(self) -> str | None:
        """The run this one branched, continued or was initialised from (the lineage's last event), if any."""
        lineage = self.record.get("lineage") or []
        return str(lineage[-1].get("parent_run")) if lineage and lineage[-1].get("parent_run") else None


def record_scalars(kind: str, fields: dict) -> dict[str, float]:
    """The numbers of one metrics.jsonl record as tracker scalars: ``{"train/loss": 2.3, ...}``."""
    return {f"{kind}/{name}": float(value) for name, value in fields.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)}


def flatten(values: dict, prefix: str = "") -> dict[str, object]:
    """Nested dicts as one level of dotted keys (``training.lr``), for trackers whose parameters are flat."""
    flat: dict[str, object] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class Trackers:
    """The trackers of a run behind one guard: the first exception of a tracker is one warning and drops it."""

    def __init__(self, trackers: list | None = None):
        self.active = list(trackers or [])

    def _each(self, doing: str, call) -> None:
        for tracker in list(self.active):
            try:
                call(tracker)
            except Exception as err:  # whatever a tracker's library raises, training goes on without it
                self.active.remove(tracker)
                reason = (str(err).strip().splitlines() or [""])[0][:300]
                log(f"warning: the {tracker.name} tracker failed {doing} ({type(err).__name__}: {reason}); it gets "
                    "nothing more and the run goes on (metrics.jsonl has every record)")

    def start(self, run: TrackedRun) -> None:
        self._each("to start", lambda t: t.start(run))

    def record(self, kind: str, step: int, fields: dict) -> None:
        scalars = record_scalars(kind, fields)
        if scalars:
            self._each(f"at step {step}", lambda t: t.scalars(step, scalars))

    def event(self, step: int, text: str) -> None:
        self._each(f"at step {step}", lambda t: t.event(step, text))

    def close(self) -> None:
        self._each("to close", lambda t: t.close())
        self.active = []


def tracker_names(report_to: list[str], tensorboard_dir: str | None) -> list[str]:
    """The trackers a run feeds: --report-to's, and TensorBoard whenever --tensorboard-dir is given."""
    names = list(dict.fromkeys(report_to))
    return names + ["tensorboard"] if tensorboard_dir and "tensorboard" not in names else names


def tensorboard_folder(tensorboard_dir: str | None, report_to: list[str], save: str | None) -> str | None:
    """Where TensorBoard's events go: --tensorboard-dir, or with --report-to tensorboard alone <save>/tensorboard."""
    if tensorboard_dir or "tensorboard" not in report_to or not save:
        return tensorboard_dir
    return str(Path(save) / "tensorboard")

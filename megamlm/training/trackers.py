"""Experiment trackers (``--report-to``): TensorBoard, trackio, wandb and MLflow, fed from the run's own records.

``metrics.jsonl`` stays the source of truth (training/metrics_file.py); every tracker gets the same records:

- at start, the run record (``run_record.json``: the resolved configuration, model shape, schedules, software,
  lineage) and the run's name, project and group (a study's runs share the study's name as their group);
- every record ``metrics.jsonl`` gets, as scalars named ``kind/field`` (``train/loss``, ``train/tokens_per_second``,
  ``train/mfu`` where measured, ``validation/mlm_loss``, ``validation/clm_loss``...) at the record's step; text
  fields and nulls (a non-finite number, an unknown MFU) are left out, as a reader of the file skips them;
- events at the step they happen: an objective switch and the entry into a recipe phase, as one line of text.

A run keeps its tracker runs across launches: each tracker's run id is stored in ``<save>/trackers.json`` (written
to a temporary name, then renamed), and a launch that resumes its own run (started from a checkpoint, with that
file in its --save folder) continues those tracker runs (wandb's id with ``resume="allow"``, MLflow's run id,
trackio's ``resume="allow"``, TensorBoard's folder with ``purge_step`` past the checkpoint's step). Steps an earlier
launch ran past its last checkpoint are in those runs already: TensorBoard drops them and gets them again, the others
keep them and get the steps after (each step is there once; metrics.jsonl holds the resumed launch's). A branch (a run
started from another run's checkpoint into another --save folder) is a new tracker run that names its parent, and
the parent's tracker run ids where that folder holds them.

Trackers run on rank 0 only. One that raises (no network, a bad key, a full disk) warns once, in one line naming it
and the error, and gets nothing more; the run goes on. Each tracker's library is an optional extra, imported only
when the tracker opens (training/tracker_backends.py, which opens them: ``open_trackers``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from megamlm.checkpoint.integrity import write_json_durably
from megamlm.log import log

TRACKER_IDS = "trackers.json"
"""The file of a --save folder that names its tracker runs: ``{tracker: {its ids}}``."""

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
    start_step: int = 0
    """The step this launch starts after (the checkpoint's; 0 for a new run)."""
    previous: dict = field(default_factory=dict)
    """The tracker runs of this run's earlier launches (``{tracker: ids}``), which a resume continues; empty for a
    new run or a branch."""
    sent_through: int = 0
    """The last step an earlier launch sent the tracker runs this one continues (past ``start_step`` when it ran on
    after its last checkpoint): a tracker that cannot drop those steps keeps them and gets the steps after it."""

    @property
    def parent(self) -> str | None:
        """The run this one branched, continued or was initialised from (the lineage's last event), if any."""
        lineage = self.record.get("lineage") or []
        return str(lineage[-1].get("parent_run")) if lineage and lineage[-1].get("parent_run") else None

    def parent_ids(self, tracker: str) -> dict:
        """The parent run's ids in ``tracker`` (from its folder's trackers.json), or {}."""
        return read_tracker_ids(self.parent).get(tracker, {}) if self.parent else {}


def read_tracker_ids(folder: str | Path | None) -> dict:
    """The tracker runs a --save folder names (``{}`` when it names none, or its file cannot be read)."""
    path = Path(folder) / TRACKER_IDS if folder else None
    try:
        return json.loads(path.read_text()) if path and path.is_file() else {}
    except (OSError, ValueError):
        return {}


def continues_its_run(record: dict, save: str | None, start_step: int) -> bool:
    """Whether a launch continues the tracker runs its --save folder names: it starts from a checkpoint of that
    folder (step ``start_step`` > 0) and does not branch there (a branch at this step within the folder, its
    schedule changed, is a new tracker run naming the earlier one as its parent)."""
    if not save or start_step <= 0:
        return False
    last = (record.get("lineage") or [{}])[-1]
    here = bool(last.get("parent_run")) and Path(last["parent_run"]).resolve() == Path(save).resolve()
    return not (last.get("kind") == "branch" and here and last.get("step") == start_step)


def write_tracker_ids(folder: Path, ids: dict) -> None:
    """Name the run's tracker runs in ``folder`` (rank 0), whole or not at all (temporary name, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json_durably(folder / TRACKER_IDS, ids)


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
        self.sent_through = 0
        """Steps up to this one reach only the trackers that rewind or start a run (``TrackedRun.sent_through``)."""
        self.continued: set[str] = set()
        """The trackers that continue a run of an earlier launch."""

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
        """Start (or continue) each tracker's run; the --save folder then names them all."""
        self.sent_through = run.sent_through
        self._each("to start", lambda t: t.start(run))
        # a tracker whose earlier run is gone (started_anew) gets every step of its new run
        self.continued = {t.name for t in self.active if t.name in run.previous and not getattr(t, "started_anew", 0)}
        ids = {t.name: t.ids for t in self.active if getattr(t, "ids", None)}
        if run.folder is not None and ids:
            write_tracker_ids(run.folder, {**run.previous, **ids})

    def record(self, kind: str, step: int, fields: dict) -> None:
        scalars = record_scalars(kind, fields)
        if scalars:
            self._each(f"at step {step}", lambda t: self._sends(t, step) and t.scalars(step, scalars))

    def event(self, step: int, text: str) -> None:
        self._each(f"at step {step}", lambda t: self._sends(t, step) and t.event(step, text))

    def _sends(self, tracker, step: int) -> bool:
        """Whether ``tracker`` gets ``step``: not a step its run holds already from an earlier launch (so each step is
        there once), unless it drops those on resuming (TensorBoard)."""
        return step > self.sent_through or tracker.name not in self.continued or getattr(tracker, "rewinds", False)

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

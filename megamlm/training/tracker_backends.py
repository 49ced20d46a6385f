"""One class per experiment tracker, each through its own library (training/trackers.py feeds them and guards them).

Every class has ``name`` and ``start(run)``, ``scalars(step, values)``, ``event(step, text)`` and ``close()``.
Where a library keeps its store is its own setting, read from its environment: ``TRACKIO_DIR`` (default
``~/.cache/huggingface/trackio``; ``trackio show`` opens the dashboard), ``WANDB_DIR`` and ``WANDB_MODE=offline``
(default: the --save folder; ``wandb sync`` uploads an offline run later), ``MLFLOW_TRACKING_URI`` (a server, or a
local store). The libraries are optional extras, imported when their tracker opens.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from megamlm.extras import require
from megamlm.log import log, rank
from megamlm.training.trackers import (
    TrackedRun,
    Trackers,
    continues_its_run,
    flatten,
    read_tracker_ids,
    tracker_names,
)

MLFLOW_BATCH = 100
"""Parameters and metrics per MLflow request (its limits: 100 parameters, 1,000 metrics)."""


class TensorBoardTracker:
    """The run record as text and the records' scalars in the reporter's TensorBoard events (or its own folder)."""

    name = "tensorboard"
    rewinds = True
    """Its resumed folder drops what followed the checkpoint (``purge_step``): it gets those steps again."""

    def __init__(self, writer=None):
        self.writer = writer
        """The reporter's SummaryWriter (training/reporter.py), which writes the per-step scalars too."""

    def start(self, run: TrackedRun) -> None:
        """A resumed run writes on in its folder: the reporter's writer purges what followed the checkpoint."""
        if self.writer is None:
            raise RuntimeError("no TensorBoard folder: pass --tensorboard-dir or --save")
        self.ids = {"log_dir": str(self.writer.log_dir)}
        text = "```\n" + json.dumps(run.record, indent=2, sort_keys=True) + "\n```"
        self.writer.add_text("run_record", text, run.start_step if run.previous else 0)
        if run.parent:
            self.writer.add_text("lineage/parent_run", run.parent, 0)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

    def event(self, step: int, text: str) -> None:
        self.writer.add_text("events", text, step)

    def close(self) -> None:
        self.writer.flush()  # the reporter closes the writer


class TrackioTracker:
    """trackio: local (a SQLite file per project under TRACKIO_DIR), no account."""

    name = "trackio"

    def start(self, run: TrackedRun) -> None:
        trackio = require("trackio", "--report-to trackio")
        self.trackio = trackio
        earlier = run.previous.get(self.name, {})
        parent = run.parent_ids(self.name)
        self.run = trackio.init(project=earlier.get("project", run.project), name=earlier.get("name", run.name),
                                group=run.group, resume="allow" if earlier else "never",
                                config={**run.record, "parent_run": run.parent, "parent_trackio_run": parent or None},
                                embed=False, auto_log_cpu=False, auto_log_gpu=False)
        self.ids = {"project": earlier.get("project", run.project), "name": self.run.name}

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def event(self, step: int, text: str) -> None:
        self.run.alert(title=f"step {step}", text=text, level=self.trackio.AlertLevel.INFO)

    def close(self) -> None:
        self.run.finish()


class WandbTracker:
    """Weights & Biases: online with a key, or WANDB_MODE=offline (``wandb sync`` later)."""

    name = "wandb"

    def start(self, run: TrackedRun) -> None:
        wandb = require("wandb", "--report-to wandb")
        # WANDB_DIR as it is now (wandb reads its environment once per process, at its first run)
        folder = os.environ.get("WANDB_DIR") or (None if run.folder is None else str(run.folder))
        if folder is not None:
            os.makedirs(folder, exist_ok=True)
        parent = run.parent_ids(self.name).get("id")
        notes = f"from {run.parent}" + (f" (wandb run {parent})" if parent else "") if run.parent else None
        earlier = run.previous.get(self.name, {})
        # console="off": the run's own log lines stay as they are (wandb would wrap stdout); a resume continues the
        # run of that id (offline, wandb starts a folder of the same id, which `wandb sync` adds to that run)
        self.run = wandb.init(project=earlier.get("project", run.project), name=run.name, group=run.group,
                              job_type="pretrain", config=run.record, notes=notes, dir=folder,
                              id=earlier.get("id") or uuid.uuid4().hex[:8], resume="allow",
                              allow_val_change=bool(earlier),
                              settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))
        self.ids = {"id": self.run.id, "project": earlier.get("project", run.project)}

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def event(self, step: int, text: str) -> None:
        self.run.log({"event": text}, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    """MLflow: the experiment is --tracker-group (a study's name) or --tracker-project; the configuration as
    parameters, the whole run record as the artifact run_record.json, events as tags."""

    name = "mlflow"

    def start(self, run: TrackedRun) -> None:
        mlflow = require("mlflow", "--report-to mlflow")
        from mlflow.entities import Param

        self.entities = mlflow.entities
        self.client = client = mlflow.MlflowClient()
        logged = self._continue(run.previous.get(self.name, {}).get("run_id"), run.start_step)
        if self.run_id is None:
            name = run.group or run.project
            experiment = client.get_experiment_by_name(name)
            experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
            parent_id = run.parent_ids(self.name).get("run_id")
            tags = {"megamlm.group": run.group, "megamlm.parent_run": run.parent, "megamlm.parent_run_id": parent_id}
            self.run_id = client.create_run(experiment_id, run_name=run.name,
                                            tags={k: v for k, v in tags.items() if v}).info.run_id
        self.ids = {"run_id": self.run_id}
        params = [Param(key, str(value)[:6000]) for key, value in
                  flatten({**run.record["config"], "model_args": run.record.get("model_args", {})}).items()
                  if key not in logged]  # MLflow's parameters are set once: a resume adds the new ones
        for first in range(0, len(params), MLFLOW_BATCH):
            client.log_batch(self.run_id, params=params[first:first + MLFLOW_BATCH])
        client.log_dict(self.run_id, run.record, "run_record.json")

    def _continue(self, run_id: str | None, start_step: int) -> dict:
        """Reopen the run ``run_id`` of this run's earlier launch (``self.run_id``; None when there is none or the
        store no longer has it); its parameters."""
        self.run_id = None
        if run_id is None:
            return {}
        try:
            earlier = self.client.get_run(run_id)
        except Exception:  # another store (MLFLOW_TRACKING_URI changed) or a deleted run: a new run
            log(f"mlflow: run {run_id} of this run's earlier launch is not in this store; starting a new one")
            self.started_anew = True
            return {}
        self.run_id = run_id
        self.client.update_run(run_id, status="RUNNING")
        self.client.set_tag(run_id, f"megamlm.resumed_after_step_{start_step:07d}", "resumed from its checkpoint")
        return dict(earlier.data.params)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        metrics = [self.entities.Metric(name, value, now, step) for name, value in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def event(self, step: int, text: str) -> None:
        self.client.set_tag(self.run_id, f"event.step_{step:07d}", text)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


BACKENDS = {"tensorboard": TensorBoardTracker, "trackio": TrackioTracker, "wandb": WandbTracker,
            "mlflow": MlflowTracker}
"""The class of each --report-to value."""


def open_trackers(cfg, record: dict, tensorboard_writer=None, start_step: int = 0, sent_through: int = 0) -> Trackers:
    """Open and start the trackers of ``cfg`` (a Config) on rank 0 (none elsewhere). ``tensorboard_writer``: the
    reporter's SummaryWriter, which the TensorBoard tracker shares (one events folder); ``start_step``: the step
    the launch starts after; ``sent_through``: the last step an earlier launch of the run recorded."""
    log_cfg, save = cfg.logging, cfg.checkpoint.save
    names = tracker_names(log_cfg.report_to, log_cfg.tensorboard_dir)
    if rank() != 0 or not names:
        return Trackers()
    previous = read_tracker_ids(save) if continues_its_run(record, save, start_step) else {}
    run = TrackedRun(name=log_cfg.tracker_run_name or (Path(save).resolve().name if save else "megamlm"),
                     project=log_cfg.tracker_project, group=log_cfg.tracker_group, record=record,
                     folder=Path(save) if save else None, start_step=start_step, previous=previous,
                     sent_through=max(start_step, sent_through) if previous else start_step)
    trackers = Trackers([BACKENDS[name](tensorboard_writer) if name == "tensorboard" else BACKENDS[name]()
                         for name in names])
    trackers.start(run)
    if trackers.active:
        log(f"reporting to {', '.join(t.name for t in trackers.active)} as run {run.name!r}"
            + (f" in group {run.group!r}" if run.group else ""))
    return trackers

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
from pathlib import Path

from megamlm.extras import require
from megamlm.log import log, rank
from megamlm.training.trackers import TrackedRun, Trackers, flatten, tracker_names

MLFLOW_BATCH = 100
"""Parameters and metrics per MLflow request (its limits: 100 parameters, 1,000 metrics)."""


class TensorBoardTracker:
    """The run record as text and the records' scalars in the reporter's TensorBoard events (or its own folder)."""

    name = "tensorboard"

    def __init__(self, writer=None):
        self.writer = writer
        """The reporter's SummaryWriter (training/reporter.py), which writes the per-step scalars too."""

    def start(self, run: TrackedRun) -> None:
        if self.writer is None:
            raise RuntimeError("no TensorBoard folder: pass --tensorboard-dir or --save")
        self.writer.add_text("run_record", "```\n" + json.dumps(run.record, indent=2, sort_keys=True) + "\n```", 0)
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
        self.run = trackio.init(project=run.project, name=run.name, group=run.group,
                                config={**run.record, "parent_run": run.parent}, embed=False,
                                auto_log_cpu=False, auto_log_gpu=False)

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
        folder = None if os.environ.get("WANDB_DIR") or run.folder is None else str(run.folder)
        if folder is not None:
            os.makedirs(folder, exist_ok=True)
        notes = f"from {run.parent}" if run.parent else None
        # console="off": the run's own log lines stay as they are (wandb would wrap stdout)
        self.run = wandb.init(project=run.project, name=run.name, group=run.group, job_type="pretrain",
                              config=run.record, notes=notes, dir=folder,
                              settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))

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
        name = run.group or run.project
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
        tags = {"megamlm.group": run.group, "megamlm.parent_run": run.parent}
        self.run_id = client.create_run(experiment_id, run_name=run.name,
                                        tags={k: v for k, v in tags.items() if v}).info.run_id
        params = [Param(key, str(value)[:6000]) for key, value in
                  flatten({**run.record["config"], "model_args": run.record.get("model_args", {})}).items()]
        for first in range(0, len(params), MLFLOW_BATCH):
            client.log_batch(self.run_id, params=params[first:first + MLFLOW_BATCH])
        client.log_dict(self.run_id, run.record, "run_record.json")

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


def open_trackers(cfg, record: dict, tensorboard_writer=None) -> Trackers:
    """Open and start the trackers of ``cfg`` (a Config) on rank 0 (none elsewhere). ``tensorboard_writer``: the
    reporter's SummaryWriter, which the TensorBoard tracker shares (one events folder)."""
    log_cfg, save = cfg.logging, cfg.checkpoint.save
    names = tracker_names(log_cfg.report_to, log_cfg.tensorboard_dir)
    if rank() != 0 or not names:
        return Trackers()
    run = TrackedRun(name=log_cfg.tracker_run_name or (Path(save).resolve().name if save else "megamlm"),
                     project=log_cfg.tracker_project, group=log_cfg.tracker_group, record=record,
                     folder=Path(save) if save else None)
    trackers = Trackers([BACKENDS[name](tensorboard_writer) if name == "tensorboard" else BACKENDS[name]()
                         for name in names])
    trackers.start(run)
    if trackers.active:
        log(f"reporting to {', '.join(t.name for t in trackers.active)} as run {run.name!r}"
            + (f" in group {run.group!r}" if run.group else ""))
    return trackers

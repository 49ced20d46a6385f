"""The trivial baselines' scores beside the fine-tuning runs: ``<output>/baselines/<task>.json``, one file per task
holding every baseline of that task (megamlm.eval.baselines), written atomically with the fingerprint of what
determines them (the task and the example limits), so that other settings into the same folder are refused as
the runs' are. In tables a baseline is the model ``baseline:NAME`` (no LR, no seeds: it is not trained)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from megamlm.eval.baselines import trivial_baselines
from megamlm.eval.examples import FAMILY_OF_KIND, TaskData
from megamlm.eval.results import fingerprint, write_json_atomic

PREFIX = "baseline:"


@dataclass
class BaselineRow:
    model: str
    """``baseline:NAME``."""
    task: str
    family: str
    metric: str
    validation: float
    test: float
    description: str


def baseline_path(output: Path, task: str) -> Path:
    return Path(output) / "baselines" / f"{task}.json"


def read_baseline_file(output: Path, task: str) -> dict | None:
    try:
        return json.loads(baseline_path(output, task).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def write_baselines(output: Path, task: str, data: TaskData, settings: dict) -> Path:
    """Compute the task's trivial baselines and store them (``settings``: what determines them, fingerprinted)."""
    baselines = trivial_baselines(data)
    payload = {"task": task, "family": FAMILY_OF_KIND[data.kind], "kind": data.kind, "metric": baselines[0].metric,
               "settings": settings, "fingerprint": fingerprint(settings),
               "baselines": [asdict(b) for b in baselines]}
    path = baseline_path(output, task)
    write_json_atomic(path, payload)
    return path


def read_baselines(output: Path, tasks: list[str]) -> list[BaselineRow]:
    """The stored baselines of ``tasks`` (a task without a file has none)."""
    rows = []
    for task in tasks:
        stored = read_baseline_file(output, task)
        if stored is None:
            continue
        for b in stored["baselines"]:
            rows.append(BaselineRow(PREFIX + b["name"], task, stored["family"], stored["metric"],
                                    b["validation"]["score"], b["test"]["score"], b["description"]))
    return rows

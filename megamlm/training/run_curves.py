"""The curves of runs from their ``metrics.jsonl`` files, for the figures that overlay them (megamlm.figures draws).

- ``validation_vs_steps.png`` and ``validation_vs_tokens.png``: validation MLM loss and CLM loss of every run; a
  branch (``--load`` of another run's checkpoint) or continuation (``--continue-from``) whose parent is plotted too
  is drawn from the parent's point where it leaves the parent (as the study report draws it), a continuation's
  steps after its parent's; a run without validation records is named so in the legend; a line breaks where the
  validation setting changes (another data, length or masking: ``VALIDATION_SETTING``), whose scores do not compare;
- ``training_loss.png``: the training loss of every run, each boundary between its recipe's phases (or, without
  phases, each objective switch) marked by a dashed line labelled with what changed there (objective, length, data,
  mask, RoPE base, batch, learning rate; ``phase_changes``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from megamlm import figures
from megamlm.training.metrics_file import MetricsError, read_metrics
from megamlm.training.run_record import RUN_RECORD

FIGURES = ("validation_vs_steps.png", "validation_vs_tokens.png", "training_loss.png")
VALIDATION_SETTING = ("validation_data", "validation_seq_length", "validation_masking", "validation_sample_mode")
"""What a validation record names of what it scored (training/validation.py): scores compare only where it agrees."""


DEFAULT_OUTPUT = "run_plots"
"""The folder tools/plot_runs.py writes into when no --output is given."""


@dataclass
class RunMetrics:
    name: str
    train: list[dict]
    validation: list[dict]
    switch_step: int | None
    folder: Path | None = None
    origin: dict | None = None
    """The lineage event the run started from: kind ``branch`` or ``continue``, ``parent_run``, ``step``."""
    switch_steps: tuple[int, ...] = ()
    """Every objective switch (a schedule of three or more stages has several)."""
    boundaries: tuple[tuple[int, str], ...] = ()
    """(last step of a phase, what the next phase changes, in words) of every phase boundary of the run's recipe;
    its objective switches where it has no recipe of several phases."""


PHASE_CHANGES = (("objective", "objective", "{}"), ("seq_length", "length", "{}"), ("data_path", "data", None),
                 ("mask_ratio", "mask", "{:g}"), ("rope_bases", "RoPE base", None),
                 ("global_batch_size", "batch", "{}"), ("lr", "LR", "{:g}"), ("lr_decay", "decay", None),
                 ("valid_data_path", "validation data", None))
"""(recipe field, its word, how its values are shown or None for the word alone) of what a boundary marker names."""


def phase_changes(before: dict, after: dict) -> str:
    """What phase ``after`` changes from phase ``before`` (run record recipe entries), in words:
    ``length 128->512, data, mask 0.3->0.15``; ``phase N`` when nothing named changes."""
    words = []
    for field, word, shown in PHASE_CHANGES:
        a, b = before.get(field), after.get(field)
        if a == b:
            continue
        words.append(word if shown is None or a is None or b is None else
                     f"{word} {shown.format(a)}->{shown.format(b)}")
    return ", ".join(words) or f"phase {after.get('index', 0) + 1}"


def boundaries_of(record: dict, switches: tuple[int, ...]) -> tuple[tuple[int, str], ...]:
    """The markers of a run: its recipe's phase boundaries with what changes at each, or its objective switches."""
    recipe = record.get("recipe") or []
    if len(recipe) > 1:
        return tuple((a["last_step"], phase_changes(a, b)) for a, b in zip(recipe, recipe[1:]))
    return tuple((step, "objective") for step in switches)


def load_run(folder: str | Path) -> RunMetrics:
    """A run's records and its switch step (from its run record, else where its objective changed)."""
    folder = Path(folder)
    records = read_metrics(folder)
    train = [r for r in records if r.get("kind") == "train"]
    origin, record = None, {}
    if (folder / RUN_RECORD).is_file():
        record = json.loads((folder / RUN_RECORD).read_text())
        switches = tuple(record.get("switch_steps") or ([record["switch_step"]] if record.get("switch_step") else []))
        origin = next((e for e in record.get("lineage") or [] if e.get("kind") in ("branch", "continue")), None)
    else:  # the trainer logs the switch step itself, so the last record of the first objective is the switch
        switches = tuple(a["step"] for a, b in zip(train, train[1:]) if a.get("objective") != b.get("objective"))
    return RunMetrics(folder.name, train, [r for r in records if r.get("kind") == "validation"],
                      switches[0] if switches else None, folder.resolve(), origin, switches,
                      boundaries_of(record, switches))


def validation_curve(run: RunMetrics, runs: list[RunMetrics], x: str, metric: str) -> tuple[list, list]:
    """``run``'s validation ``metric`` against ``x`` (step or tokens) as drawn: a branch starts at its parent's
    last point up to the branch step, a continuation at its parent's point where it stopped, with its own steps
    counted after the parent's (tokens already count the parent's)."""
    xs, ys = _series(run.validation, x, metric)
    origin = run.origin
    parent = None
    if origin is not None:
        parent_folder = Path(origin.get("parent_run", "")).resolve()
        parent = next((r for r in runs if r.folder == parent_folder and r is not run), None)
    if parent is None:
        return xs, ys
    leave_step = int(origin.get("step", 0))
    before = [r for r in parent.validation if r.get("step", 0) <= leave_step and r.get(metric) is not None]
    if origin["kind"] == "continue" and x == "step":
        xs = [leave_step + v for v in xs]
    if before:
        xs, ys = [before[-1][x], *xs], [before[-1][metric], *ys]
    return xs, ys


def legend_name(run: RunMetrics) -> str:
    """The run's name, and ``(no validation)`` when it has no validation records to draw."""
    return run.name if run.validation else f"{run.name} (no validation)"


def _series(records: list[dict], x: str, y: str) -> tuple[list, list]:
    """The points of ``y`` against ``x``, a NaN between two records of different validation settings (the line
    breaks there)."""
    xs, ys, setting = [], [], None
    for r in records:
        if r.get(x) is None or r.get(y) is None:
            continue
        if setting is not None and [r.get(key) for key in VALIDATION_SETTING] != setting:
            xs, ys = [*xs, r[x]], [*ys, math.nan]
        xs, ys, setting = [*xs, r[x]], [*ys, r[y]], [r.get(key) for key in VALIDATION_SETTING]
    return xs, ys


def plot_runs(folders: list[str | Path], output: str | Path) -> list[Path]:
    """Write the three figures for these run folders into ``output`` (drawn by megamlm.figures); their paths."""
    runs = [load_run(folder) for folder in folders]
    if not figures.available():
        raise MetricsError(figures.MISSING)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for x, label, name in (("step", "step", FIGURES[0]), ("tokens", "tokens seen", FIGURES[1])):
        curves = [(legend_name(run), bool(run.validation),
                   {metric: validation_curve(run, runs, x, metric) for metric in ("mlm_loss", "clm_loss")})
                  for run in runs]
        written.append(figures.run_validation(curves, label, output / name))
    losses = [(run.name, _series(run.train, "step", "loss"), run.boundaries) for run in runs]
    written.append(figures.run_training_loss(losses, output / FIGURES[2]))
    return written

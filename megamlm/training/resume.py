"""Where resume compatibility is decided: how a launch starts, as one comparison of the saved run it starts from
(``checkpoint/saved_run.py``, read once) with its launch plan, setting by setting, by each setting's role
(``config/roles.py``). ``decide_start`` answers before any model exists, and the trainer acts on the answer.

The answer is a start from scratch (``fresh``), from a checkpoint's weights (``init``, ``--init-from``), from its
weights and data position (``continue``, ``--continue-from``: the parent's samples continue with a fresh optimizer,
LR schedule and step count), or from its whole state: the same schedule (``resume``), a schedule that agrees up to
the checkpoint's step (``branch``), or one that disagrees, with ``--override-schedule`` (``override``). Otherwise
the launch is refused with one line naming the stored value, the given one and the flag that would accept it.

Each difference between the checkpoint's record and this launch's is, by the setting's role's resume rule:

- ``refuse``: the model's shape, the sample stream (seed, data, ``--split``, the tokenizer's ids) and the masking fix
  the samples, the masks and the weights' meaning (``--override-data`` accepts other data; ``--init-from`` starts a
  new run from the weights). A stream setting is compared by what it stands for where that is not its text: the
  data by its content's fingerprint, the tokenizer by its ids (``RECORDED_AS``), the shape by the resolved
  ``ModelArgs``;
- ``history`` (``training/lineage.py``): the objective and the learning rate of every step up to the checkpoint's,
  and the optimizer settings, must be the ones this launch's schedule gives those steps; then the run continues
  exactly, also when the schedule differs after the checkpoint (a *branch*), else it is refused unless
  ``--override-schedule`` says this launch's values win from the next step;
- ``note``: honoured and noted in the lineage: another global batch size continues the same sample stream at the
  consumed-sample count; another precision computes the next steps in this launch's arithmetic;
- ``ignore``: the layout, the outputs, validation and where the launch starts from.

Besides the config, on the CPU torch's version, the processor, torch's CPU kernels and the intra-op thread count
are honoured and noted, since a continuation reproduces the uninterrupted run bitwise only where they agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from megamlm.checkpoint.checkpointer import CHECKPOINT_FORMAT, resolve_checkpoint
from megamlm.checkpoint.saved_run import SavedRun, read_saved_run
from megamlm.config import MODEL_FLAG_NAMES, SECTION_CLASSES, Config, phase_fields
from megamlm.config.flags import flag_name
from megamlm.config.phases import compared_phase_fields
from megamlm.config.roles import ROLES, default_of, fields_with, role_of
from megamlm.errors import ResumeError
from megamlm.model.config import shape_record
from megamlm.training.lineage import (
    OPTIMIZER_DEFAULTS,
    Comparison,
    History,
    Segment,
    lineage_event,
)
from megamlm.training.recipe_run import FIX, RecipeStart, as_phase_dicts, phase_differences, phase_layout

RECORDED_AS: dict[tuple[str, str], tuple[tuple[tuple[str, ...], str], ...]] = {
    ("data", "data_path"): ((("data_fingerprint",), "--data-path"),),
    ("data", "tokenizer_model"): ((("tokenizer", "mask_id"), "the tokenizer's mask id (--tokenizer-model)"),
                                  (("tokenizer", "vocab_size"), "the tokenizer's vocabulary (--tokenizer-model)")),
}
"""Settings a resume compares by what they stand for, not by their text: (record path, how it is named) of each. The
data is its content (a run moved to another cluster resumes), the tokenizer its ids; the model section is the
resolved shape (``model_args``)."""
# What decides the last bits of a CPU run besides the config (run_record.arithmetic): where one differs from the
# checkpoint's, the run still continues exactly (same weights, optimizer state, samples and schedule), but its
# numbers can differ in the last bits from those of a run that never stopped, so it is noted, not refused.
_ARITHMETIC = (
    (("software", "torch"), "torch"),
    (("arithmetic", "cpu"), "the processor"),
    (("arithmetic", "cpu_capability"), "torch's CPU kernels"),
    (("arithmetic", "intra_op_threads"), "the intra-op thread count (torch.get_num_threads(), OMP_NUM_THREADS)"),
)
_MISSING = object()
_ROLE_ORDER = list(ROLES)
_SETTINGS = tuple(
    ((role := SECTION_CLASSES[section].__dataclass_fields__[name].metadata["role"]), ROLES[role].on_resume,
     default_of(SECTION_CLASSES[section], name),
     RECORDED_AS.get((section, name), ((("config", section, name), flag_name(name)),)))
    for section, name in fields_with(SECTION_CLASSES, *ROLES) if section != "model")
"""(role, resume rule, default, [(record path, how it is named)]) of every setting but the model section's
(compared as the resolved shape), in declaration order: the comparison's table, built once from the roles."""


def phase_rows(accepted: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    """(phase field, role) of every phase setting a resume compares, phase by phase (``recipe_start``): the table's
    phase rows, the inherited phase fields whose declared role (config/phase_fields.py) refuses or notes a
    difference, read from the declarations at each start as ``_SETTINGS`` reads the sections'. ``accepted``: fields
    this launch accepts changed (``data_path`` under --override-data)."""
    declared = phase_fields.PhaseConfig
    return tuple((name, role_of(declared, name)) for name in compared_phase_fields(declared) if name not in accepted)


def recipe_start(saved: list[dict] | None, launch: list[dict], step: int, listed: bool = True,
                 accepted: tuple[str, ...] = ()) -> RecipeStart:
    """The phase rows of the comparison, for a start at ``step`` from a checkpoint whose run record keeps the
    phases ``saved`` (None: a record that predates them, not compared): one ResumeError line naming the phase and
    field that differ (``recipe_run.phase_differences``: every row refuses inside the phases a start continues),
    else what the phases' layout allows (``recipe_run.phase_layout``: lengths, first samples, a branch at a phase
    boundary)."""
    if saved is None:
        return RecipeStart([])
    rows = phase_rows(accepted)
    names = tuple(name for name, _ in rows)
    old, new = as_phase_dicts(saved, launch, names)
    differences = sorted(phase_differences(old, new, step, rows), key=lambda d: _ROLE_ORDER.index(d.role))
    if differences:  # the first by role, as settings_differences orders them (shape, stream, masking, ...)
        raise ResumeError(f"{differences[0].sentence}: {FIX}")
    return phase_layout(old, new, step, names, listed)

StartKind = Literal["fresh", "init", "continue", "resume", "branch", "override"]
Difference = tuple[str, object, object, str]
"""(how the setting is named, the checkpoint's value, this launch's, its role)."""


@dataclass
class TrainProgress:
    """Where a run is: the last finished step and how many samples of the stream it has consumed."""

    step: int = 0
    consumed_samples: int = 0

    def advance(self, global_batch_size: int) -> None:
        self.step += 1
        self.consumed_samples += global_batch_size

    def state_dict(self) -> dict:
        return {"step": self.step, "consumed_samples": self.consumed_samples}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.consumed_samples = int(state["step"]), int(state["consumed_samples"])


@dataclass(frozen=True)
class LaunchPlan:
    """This launch as a start compares it: its config, its run record (``training/run_record.py``) and the settings
    its steps get (its history segment)."""

    cfg: Config
    record: dict
    segment: Segment

    @classmethod
    def of(cls, cfg: Config, record: dict) -> "LaunchPlan":
        return cls(cfg, record, Segment.of_record(record))


@dataclass
class StartDecision:
    """What this launch does with the saved run it found: how it starts and what it takes from it."""

    kind: StartKind
    history: History
    """The settings of every step this run's model will have been trained with (saved in its checkpoints)."""
    saved: SavedRun | None = None
    lineage: list[dict] = field(default_factory=list)
    """This run record's lineage (``training/lineage.py``)."""
    notes: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path | None:
        return self.saved.path if self.saved else None

    @property
    def restores_state(self) -> bool:
        """Weights, optimizer, RNG, data position and step counter (else weights at most)."""
        return self.kind in ("resume", "branch", "override")

    @property
    def restores_schedules(self) -> bool:
        """The checkpoint's objective and LR schedules are this launch's (else this launch's replace them)."""
        return self.kind == "resume"

    def progress(self) -> TrainProgress:
        """Where the run starts: the checkpoint's step and data position, a parent's data position at step 0
        (``--continue-from``), or the very beginning."""
        progress = TrainProgress()
        if self.restores_state:
            progress.load_state_dict(self.saved.progress)
        elif self.kind == "continue":
            progress.consumed_samples = self.saved.consumed_samples
        return progress


def decide_start(saved: SavedRun | None, launch: LaunchPlan) -> StartDecision:
    """How this launch starts from ``saved`` (None: from scratch); raises ResumeError with the one line."""
    fresh = History([launch.segment])
    if saved is None:
        return StartDecision("fresh", fresh)
    if saved.flag == "--init-from":
        return StartDecision("init", fresh, saved, [lineage_event("init", saved.path, 0, 0, [])])
    if saved.flag == "--continue-from":
        return _continue(saved, launch)
    return _resume(saved, launch)


def history_difference(checkpoint: str | Path, cfg: Config) -> str | None:
    """For scripts (a study planner): where training with ``cfg`` from step 1 would differ from the history of
    ``checkpoint`` (a save folder or an iter_* folder) up to its step; None when ``--load`` continues it as the
    straight run of ``cfg`` (given the same seed, data, split and shape, which ``decide_start`` checks too)."""
    saved = read_saved_run(resolve_checkpoint(checkpoint), "--load")
    _require_training_state(saved, "branch from")
    return History.of_checkpoint(saved.train_state, saved.record).first_difference(Segment.of_config(cfg), saved.step)


def settings_differences(saved: dict, launch: dict, *rules_or_roles: str) -> list[Difference]:
    """Every setting of the given roles or resume rules whose value differs between two run records, by role in
    ``ROLES``' order, then in declaration order (the model section by its resolved shape; ``RECORDED_AS`` by what it
    stands for). A setting a record predates reads as its default."""
    out: list[Difference] = []
    for role, rule, default, measures in _SETTINGS:
        if role not in rules_or_roles and rule not in rules_or_roles:
            continue
        for keys, named in measures:
            missing = default if keys[0] == "config" else None
            old, new = (missing if v is _MISSING else _as_json(v) for v in (_get(saved, keys), _get(launch, keys)))
            if old != new:
                out.append((named, old, new, role))
    if "shape" in rules_or_roles or "refuse" in rules_or_roles:
        out = _shape_differences(saved, launch) + out
    return sorted(out, key=lambda difference: _ROLE_ORDER.index(difference[3]))  # shape, stream, masking, ...


def _as_json(value):
    """A value as its record holds it once written (tuples as lists), so both sides compare alike."""
    return json.loads(json.dumps(value))


def _get(record: dict, keys: tuple[str, ...]):
    for key in keys:
        if not isinstance(record, dict) or key not in record:
            return _MISSING
        record = record[key]
    return record


def _describe(diffs) -> str:
    return "; ".join(f"{flag} is {old!r} in the checkpoint and {new!r} here" for flag, old, new, *_ in diffs)


def _shape_differences(saved: dict, record: dict) -> list[Difference]:
    # A field this checkpoint's version did not record yet compares as its default.
    shape, saved_shape = record["model_args"], shape_record(saved.get("model_args") or {})
    return [(flag_name(MODEL_FLAG_NAMES.get(k, k)), saved_shape.get(k), v, "shape") for k, v in shape.items()
            if saved_shape.get(k) != v]


def _require_training_state(saved: SavedRun, verb: str) -> None:
    """A checkpoint of this megamlm version with a training state; a ResumeError for format 1 or weights only."""
    path = saved.path
    if saved.format < CHECKPOINT_FORMAT:
        raise ResumeError(
            f"cannot {verb} {path}: it was written by megamlm 0.1 (checkpoint format {saved.format}), "
            f"whose sample order this version (format {CHECKPOINT_FORMAT}) does not reproduce; finish the run with "
            f"megamlm 0.1, or start a new run from its weights with --init-from {path}")
    if saved.progress is None:
        raise ResumeError(f"cannot {verb} {path}: it holds weights only (an imported model, or a weights-only "
                          f"checkpoint), no training state; start a new run from its weights with --init-from {path}")


def _resume(saved: SavedRun, launch: LaunchPlan) -> StartDecision:
    _require_training_state(saved, "resume")
    cfg, path, step = launch.cfg, saved.path, saved.step
    differences = settings_differences(saved.record, launch.record, "refuse", "note")
    refused = [d for d in differences if ROLES[d[3]].on_resume == "refuse"]
    notes = _check_stream(cfg, refused, saved.record, launch.record, path)
    notes += _arithmetic_notes(saved.record, launch.record)
    if cfg.training.train_iters < step:
        raise ResumeError(f"cannot resume {path}: it is at step {step}, past --train-iters "
                          f"{cfg.training.train_iters}; raise --train-iters, or branch from an earlier checkpoint")
    compared = History.of_checkpoint(saved.train_state, saved.record).compared_at(step, launch.segment)
    kind = _compare_history(cfg, compared, launch.segment, step, path, notes)
    # The table's phase rows: the recipe's phases, stretch by stretch, by the roles declared beside the phase fields,
    # from the two run records as every other setting; a record that predates them has none.
    recipe = recipe_start(saved.record.get("recipe"), launch.record["recipe"], step, bool(cfg.recipe.phases),
                          accepted=("data_path",) if cfg.checkpoint.override_data else ())
    notes += recipe.notes
    if recipe.branch and kind == "resume":  # the same schedules, other phase settings after a phase boundary
        kind = "branch"
    notes += [_note(d, saved) for d in differences if ROLES[d[3]].on_resume == "note"]
    lineage = list(saved.lineage)
    same_run = cfg.checkpoint.save and path.parent.resolve() == Path(cfg.checkpoint.save).resolve()
    if kind != "resume" or notes or not same_run:
        lineage.append(lineage_event(kind, path, step, saved.consumed_samples, notes))
    return StartDecision(kind, compared.continued, saved, lineage, notes)


def _check_stream(cfg: Config, refused: list[Difference], saved: dict, launch: dict, path: Path) -> list[str]:
    """Refuse a checkpoint of another sample stream, masks or shape; the note when --override-data accepts other
    data."""
    fresh = f"start a new run from its weights with --init-from {path}"
    fixed = [d for d in refused if d[0] != "--data-path"]
    if fixed:
        raise ResumeError(f"cannot resume {path}: {_describe(fixed)}; these fix the samples, the masks or the "
                          f"weights' shape, so relaunch with the checkpoint's values, or {fresh}")
    if len(fixed) == len(refused):
        return []
    what = f"checkpoint {path} was trained on {_other_data(saved, launch)}"
    if not cfg.checkpoint.override_data:
        raise ResumeError(f"{what}; resuming would continue its sample order on different data. Pass the same "
                          f"--data-path, or --override-data to continue on the new data deliberately, or {fresh}")
    return [f"{what}; continuing on the new data because of --override-data"]


def _other_data(saved: dict, launch: dict) -> str:
    return (f"other data (fingerprint {saved.get('data_fingerprint')}, data {saved.get('data_path')}) than this run "
            f"(fingerprint {launch['data_fingerprint']}, data {launch['data_path']})")


def _note(difference: Difference, saved: SavedRun) -> str:
    """The lineage's note of a setting honoured on resume (a ``note`` role)."""
    named, old, new, role = difference
    what = f"{named} is {old} in the checkpoint and {new} here"
    if role == "batch":
        return f"{what}: the same sample stream continues at sample {saved.consumed_samples} with the new batch size"
    return (f"{named} is {old!r} in the checkpoint and {new!r} here: the run continues from the checkpoint's state, "
            f"its steps from {saved.step + 1} computed with this launch's ({ROLES[role].meaning})")


def _arithmetic_notes(saved: dict, record: dict) -> list[str]:
    """The note when a CPU run continues a CPU checkpoint under other arithmetic (``_ARITHMETIC``); none for a
    checkpoint that did not record it."""
    on_cpu = _get(saved, ("arithmetic", "device")) == _get(record, ("arithmetic", "device")) == "cpu"
    differences = [(named, _get(saved, keys), _get(record, keys)) for keys, named in _ARITHMETIC
                   if on_cpu and _MISSING not in (_get(saved, keys), _get(record, keys))
                   and _get(saved, keys) != _get(record, keys)]
    if not differences:
        return []
    return [f"{_describe(differences)}: the run continues exactly, but its numbers can differ in the last bits from "
            "those of a run that never stopped (same torch, processor and thread count reproduce it bitwise)"]


def _compare_history(cfg: Config, compared: Comparison, launch: Segment, step: int, path: Path,
                     notes: list[str]) -> StartKind:
    """resume (the same schedule), branch (another schedule that agrees up to ``step``) or override; a
    ResumeError for a history that disagrees without --override-schedule."""
    last, difference = compared.last, compared.difference
    if difference is None:
        if last.objective_schedule == launch.objective_schedule and last.lr_schedule == launch.lr_schedule:
            return "resume"
        notes.append(f"branching from {path}: its history of steps 1-{step} agrees with this launch's schedule, "
                     f"which differs after step {step} ({compared.changes})")
        return "branch"
    if not cfg.checkpoint.override_schedule:
        raise ResumeError(f"cannot resume {path}: its history disagrees with this launch's schedule: {difference}; "
                          "pass --override-schedule to continue with this launch's values, or relaunch with the "
                          "checkpoint's")
    trained = {**OPTIMIZER_DEFAULTS, **last.optimizer}["optimizer"]
    if trained != cfg.training.optimizer:  # another optimizer's state: nothing to carry it over into
        raise ResumeError(f"cannot resume {path} with --optimizer {cfg.training.optimizer}: its optimizer state is "
                          f"{trained}'s, which --override-schedule cannot carry over (it overrides the schedule, not "
                          f"the state); start from its weights and samples with a fresh optimizer (--continue-from "
                          f"{path}), or relaunch with --optimizer {trained}")
    if cfg.training.train_iters == step:
        raise ResumeError(f"cannot resume {path} at step {step} with --train-iters {step}: nothing would be "
                          "left to train; raise --train-iters")
    notes.append(f"--override-schedule: {difference}; this launch's values win from step {step + 1}")
    return "override"


def _continue(saved: SavedRun, launch: LaunchPlan) -> StartDecision:
    """``--continue-from``: the parent's shape and sample stream must be this run's (its data by content)."""
    _require_training_state(saved, "continue from")
    path, consumed = saved.path, saved.consumed_samples
    where = f"--continue-from {path} continues its sample stream at sample {consumed}"
    refused = settings_differences(saved.record, launch.record, "shape", "stream")
    fixed = [d for d in refused if d[0] != "--data-path"]
    if fixed:
        raise ResumeError(f"{where}, but {_describe(fixed).replace('the checkpoint', 'the parent')}: that position "
                          "means nothing in this run's stream; pass the parent's values, or --init-from "
                          f"{path} to start its weights on this data from sample 0")
    if len(fixed) != len(refused):
        raise ResumeError(f"{where}, but the parent was trained on {_other_data(saved.record, launch.record)}; pass "
                          f"the parent's --data-path, or --init-from {path} to start its weights on this data from "
                          "sample 0")
    lineage = saved.lineage + [lineage_event("continue", path, saved.step, consumed, [])]
    return StartDecision("continue", History([launch.segment]), saved, lineage,
                         [f"{where} with a fresh optimizer and LR schedule, from step 0"])

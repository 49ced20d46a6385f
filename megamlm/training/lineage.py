"""A run's history (the settings each step was trained with) and lineage (the runs it came from).

**History** is saved in every checkpoint (``train_state.json``, under ``state.history``): a list of segments, each
the settings from its ``first_step`` on until the next segment's: objective schedule, LR schedule, optimizer
settings and global batch size. A launch that continues a checkpoint of step k compares the checkpoint's history of
steps 1..k with its own schedule, step by step (``first_difference``): the objective and the exact learning rate of
every step, and the optimizer settings. When they agree, continuing is the straight run of this launch's flags
(a *branch* when its schedule differs after step k, e.g. a CLM run continued into CLM-then-MLM at its switch step,
or a 42k-step WSD run continued into a 12k-step budget from its stable phase). The continued history is the
checkpoint's up to step k plus a segment from k+1 when this launch's settings differ from the last one's.

**Lineage** is a list in the run record (``run_record.json``, each checkpoint's ``config.json``): one event per
start from another run's checkpoint, oldest first, ``{"kind", "parent_run", "checkpoint", "step",
"consumed_samples", "changes"}`` with kind ``branch``, ``continue`` (``--continue-from``), ``init``
(``--init-from``), ``resume`` (from another folder, or with another global batch size) or ``override``
(``--override-schedule``).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from megamlm.config import SECTION_CLASSES, Config, as_tuple, switch_steps, warmup_iters, wsd_decay_iters
from megamlm.config.flags import flag_name
from megamlm.config.phases import Recipe, learning_rate_pieces_of
from megamlm.config.roles import default_of, fields_with
from megamlm.objectives.schedule import objective_at_step, objectives_at_steps, schedule_state
from megamlm.training.optim import LRSchedule

OPTIMIZER_SETTINGS = fields_with(SECTION_CLASSES, "optimizer")
"""(section, field) of the optimizer's settings (role ``optimizer``, config/roles.py): a history segment keeps them."""
OPTIMIZER_FLAGS = {name: flag_name(name) for _, name in OPTIMIZER_SETTINGS}
OPTIMIZER_DEFAULTS = {name: default_of(SECTION_CLASSES[section], name) for section, name in OPTIMIZER_SETTINGS}
LR_FLAGS = {"peak_lr": "--lr", "min_lr": "--min-lr", "style": "--lr-decay-style",
            "warmup_iters": "--lr-warmup-iters/--lr-warmup-fraction",
            "decay_iters": "--lr-wsd-decay-iters/--lr-wsd-decay-fraction", "train_iters": "--train-iters",
            "wsd_decay_style": "--lr-wsd-decay-style"}
OBJECTIVE_FLAGS = {"objective": "--objective", "switch_step": "--switch/--switch-step", "train_iters": "--train-iters"}


def describe_changes(old: dict, new: dict, flags: dict[str, str], where: str = "the checkpoint") -> str:
    """'--lr is 0.003 in the checkpoint and 0.001 here; ...' for every setting that differs."""
    return "; ".join(f"{flag} is {old.get(key)!r} in {where} and {new.get(key)!r} here"
                     for key, flag in flags.items() if old.get(key) != new.get(key))


@dataclass(frozen=True)
class Segment:
    """The settings of the steps from ``first_step`` on."""

    first_step: int
    objective_schedule: dict
    """ObjectiveSchedule.state_dict(): objective, train_iters, switch_step (a list for more than two stages)."""
    lr_schedule: dict
    """LRSchedule.state_dict()."""
    optimizer: dict
    """The optimizer's settings by field name (``OPTIMIZER_SETTINGS``)."""
    global_batch_size: int

    @classmethod
    def of_record(cls, record: dict, first_step: int = 1) -> "Segment":
        """This launch's settings, from its run record (``training/run_record.py``)."""
        training = record["config"]["training"]
        return cls(first_step, dict(record["schedule"]["objective_schedule"]), dict(record["schedule"]["lr_schedule"]),
                   optimizer_settings(record["config"]), int(training["global_batch_size"]))

    @classmethod
    def of_config(cls, cfg: Config, recipe: Recipe | None = None) -> "Segment":
        """The settings a launch with ``cfg`` trains with (what ``of_record`` reads from its run record): the one
        place a config's schedules are derived (switch step, warmup and decay lengths), for the run
        (training/resolved_run.py, which passes its resolved ``recipe``) and the planners alike."""
        t = cfg.training
        optimizer = {name: getattr(getattr(cfg, section), name) for section, name in OPTIMIZER_SETTINGS}
        pieces = learning_rate_pieces_of(cfg, recipe) if cfg.recipe.phases else ((), ())  # phases shape the LR
        lr = LRSchedule(t.lr, t.min_lr, t.lr_decay_style, warmup_iters(t), wsd_decay_iters(t), t.train_iters,
                        t.lr_wsd_decay_style, *pieces).state_dict()
        objective = schedule_state(cfg.objective.objective, t.train_iters, switch_steps(cfg.objective, t.train_iters))
        return cls(1, objective, lr, optimizer, t.global_batch_size)

    def starting_at(self, first_step: int) -> "Segment":
        return Segment(first_step, self.objective_schedule, self.lr_schedule, self.optimizer, self.global_batch_size)

    def same_settings(self, other: "Segment") -> bool:
        return {**asdict(self), "first_step": 0} == {**asdict(other), "first_step": 0}

    def schedule_changes(self, launch: "Segment") -> str:
        """'--lr is 0.003 in the checkpoint and 0.001 here; ...' for every schedule setting ``launch`` changes
        (--train-iters, part of both schedules, once); '' when its schedules are these."""
        changes = [describe_changes(self.objective_schedule, launch.objective_schedule, OBJECTIVE_FLAGS),
                   describe_changes(self.lr_schedule, launch.lr_schedule, LR_FLAGS)]
        return "; ".join(dict.fromkeys(c for part in changes for c in part.split("; ") if c))

    def objective_at(self, step: int) -> str:
        return objective_at_step(self.objective_schedule["objective"], self.objective_schedule["switch_step"], step)

    def objectives(self, first: int, last: int) -> np.ndarray:
        """``objective_at`` of steps ``first``..``last``."""
        return objectives_at_steps(self.objective_schedule["objective"], self.objective_schedule["switch_step"],
                                   np.arange(first, last + 1))

    def learning_rates(self, first: int, last: int) -> np.ndarray:
        """The learning rate (``LRSchedule.lr_at``'s very float) of steps ``first``..``last``."""
        # hashable settings (a recipe's re-warmups are a list of [first step, steps] pairs)
        settings = tuple(sorted((key, tuple(map(tuple, value)) if isinstance(value, list) else value)
                                for key, value in self.lr_schedule.items()))
        return _lr_table(settings, last)[first - 1:]

    def lr_schedule_object(self) -> LRSchedule:
        return LRSchedule(**self.lr_schedule)


@dataclass(frozen=True)
class Comparison:
    """A launch's schedule against a checkpoint's history at the checkpoint's step, everything a resume decides on
    (training/resume.py), compared in one pass (``History.compared_at``)."""

    last: Segment
    """The checkpoint's segment at its step: the schedules and optimizer it was training with."""
    difference: str | None
    """Where training steps 1..step with the launch's settings would differ from the history (``first_difference``),
    or None."""
    changes: str
    """How the launch's schedules differ from ``last``'s ('' when they are the same)."""
    continued: History
    """The history continued with the launch's settings from the next step (``continued_at``)."""


@dataclass
class History:
    """The segments of a run's steps, oldest first (stateful: registered with the checkpoint manager)."""

    segments: list[Segment] = field(default_factory=list)

    def segment_at(self, step: int) -> Segment:
        return [s for s in self.segments if s.first_step <= step][-1]

    def continued_at(self, step: int, launch: Segment) -> "History":
        """This history up to ``step``, then ``launch``'s settings from ``step + 1``."""
        kept = [s for s in self.segments if s.first_step <= step]
        if not kept or not kept[-1].same_settings(launch):
            kept.append(launch.starting_at(step + 1))
        return History(kept)

    def first_difference(self, launch: Segment, upto: int) -> str | None:
        """Where training steps 1..``upto`` with ``launch``'s settings would differ from this history, or None.

        Exact: the objective and the learning rate (the float each LRSchedule returns) of every step, and the
        optimizer settings of every segment.
        """
        for index, segment in enumerate(self.segments):
            if segment.first_step > upto:
                break
            trained, planned = _with_defaults(segment.optimizer), _with_defaults(launch.optimizer)
            if trained != planned:
                return describe_changes(trained, planned, OPTIMIZER_FLAGS)
            next_first = self.segments[index + 1].first_step if index + 1 < len(self.segments) else upto + 1
            first, last = segment.first_step, min(next_first - 1, upto)
            objective_differs = segment.objectives(first, last) != launch.objectives(first, last)
            trained_lr, planned_lr = segment.learning_rates(first, last), launch.learning_rates(first, last)
            differs = np.flatnonzero(objective_differs | (trained_lr != planned_lr))
            if len(differs) == 0:
                continue
            at = int(differs[0])  # the first step that differs; its objective is checked before its learning rate
            if objective_differs[at]:
                return _objective_difference(segment, launch, first + at, upto)
            trained, planned = distinct_numbers(float(trained_lr[at]), float(planned_lr[at]))
            return (f"the learning rate of step {first + at} is {trained} in the checkpoint's history and {planned} "
                    f"here ({describe_changes(segment.lr_schedule, launch.lr_schedule, LR_FLAGS)})")
        return None

    def compared_at(self, step: int, launch: Segment) -> Comparison:
        last = self.segment_at(step)
        return Comparison(last, self.first_difference(launch, step), last.schedule_changes(launch),
                          self.continued_at(step, launch))

    def state_dict(self) -> dict:
        return {"segments": [asdict(s) for s in self.segments]}

    def load_state_dict(self, state: dict) -> None:
        self.segments = [Segment(**s) for s in state["segments"]]

    @classmethod
    def of_checkpoint(cls, train_state: dict, saved_record: dict) -> "History":
        """The history a checkpoint holds; one written before histories existed had one schedule throughout."""
        state = train_state["state"]
        if "history" in state:
            history = cls()
            history.load_state_dict(state["history"])
            return history
        training = saved_record["config"]["training"]
        return cls([Segment(1, state["objective_schedule"], state["lr_schedule"],
                            optimizer_settings(saved_record["config"]), int(training["global_batch_size"]))])


def optimizer_settings(config: dict) -> dict:
    """The optimizer settings of a config (as a dict, or a run record's), by field name; a record written before a
    setting existed lacks it, and a comparison reads it as its default (``_with_defaults``)."""
    return {name: config[section][name] for section, name in OPTIMIZER_SETTINGS if name in config[section]}


def _with_defaults(optimizer: dict) -> dict:
    return {**OPTIMIZER_DEFAULTS, **optimizer}


@functools.lru_cache(maxsize=32)
def _lr_table(lr_schedule: tuple, last: int) -> np.ndarray:
    """``LRSchedule.table`` of a schedule's settings, kept: the runs of a study plan share a few schedules, and
    reading a long run's steps one by one takes a second. Read-only, as it is shared."""
    table = np.asarray(LRSchedule(**dict(lr_schedule)).table(last))
    table.flags.writeable = False
    return table


def _objective_difference(segment: Segment, launch: Segment, step: int, upto: int) -> str:
    trained, planned = segment.objective_at(step), launch.objective_at(step)
    what = f"step {step} trained {trained} in the checkpoint's history and trains {planned} here"
    switch = next((s for s in as_tuple(launch.objective_schedule["switch_step"]) if step == s + 1), None)
    if switch is not None and trained == launch.objective_at(switch):
        return (f"the checkpoint (step {upto}) is past this launch's switch step {switch}: {what}; branch from a "
                f"checkpoint at or before step {switch} (--save-at {switch} in the parent run)")
    return f"{what} ({describe_changes(segment.objective_schedule, launch.objective_schedule, OBJECTIVE_FLAGS)})"


def lineage_event(kind: str, checkpoint: Path, step: int, consumed_samples: int, changes: list[str]) -> dict:
    """One entry of a run record's lineage."""
    return {"kind": kind, "parent_run": str(Path(checkpoint).parent), "checkpoint": str(checkpoint), "step": step,
            "consumed_samples": consumed_samples, "changes": list(changes)}


def distinct_numbers(a: float, b: float) -> tuple[str, str]:
    """Two different numbers printed with the fewest significant digits that still tell them apart."""
    for digits in range(6, 18):
        shown = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if shown[0] != shown[1]:
            return shown
    return repr(a), repr(b)

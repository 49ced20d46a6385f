"""The role of every setting: what a difference in it means when one run's steps are compared with another's.

Each field of ``config/sections.py`` declares its role beside its declaration (``setting(default, "stream")``;
the model section's fields are all ``shape``). This module says what each role means, once, for the three
readers that ask "are these the same steps?": starting a launch from a checkpoint (``training/resume.py``), the
history a checkpoint carries (``training/lineage.py``), and the study planner's prefix sharing
(``study/planning/prefixes.py``). None of them keeps a list of fields of its own: each asks ``fields_with``.

On a resume a difference in a setting is, by its role:

- ``refuse``: the checkpoint cannot be continued by this launch (another sample stream, mask, or meaning of the
  weights); one line names the stored value, the given one, and the fix;
- ``history``: compared step by step with the checkpoint's history (the objective and learning rate of every step
  so far, the optimizer settings): equal up to the checkpoint's step continues (a branch when they differ later),
  anything else is refused unless ``--override-schedule``;
- ``note``: honoured, and noted in the run's lineage (the run continues exactly, but is no longer the straight run
  of one command);
- ``ignore``: where the run goes, how it is laid out, logged or validated: never changes a step.

For prefix sharing the same role decides: two runs share steps only when every ``refuse``, ``history`` and ``note``
setting agrees, the roles compared ``per_step`` step by step (a run's objective and learning rate per step) and the
others as values; ``ignore`` settings never matter. So a setting that a resume refuses or notes is a setting on which
the planner will not share a prefix, and one the resume ignores the planner ignores too
(tests/unit/training/test_start_by_role.py checks every field against both readers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, get_args

Role = Literal["shape", "stream", "masking", "objective", "schedule", "optimizer", "batch", "numerics", "start",
               "layout", "output", "evaluation"]
OnResume = Literal["refuse", "history", "note", "ignore"]


@dataclass(frozen=True)
class RoleRule:
    meaning: str
    on_resume: OnResume
    per_step: bool = False
    """Compared through what it makes of every step (a ``history`` role: the objective or learning rate of each
    step), not as a value: a difference after the checkpoint's step is a branch."""


ROLES: dict[Role, RoleRule] = {
    "shape": RoleRule("the model's shape and initialisation: what the weights mean", "refuse"),
    "stream": RoleRule("which samples the run reads, in which order: seed, data, split, tokenizer", "refuse"),
    "masking": RoleRule("which tokens of a sample are masked and how", "refuse"),
    "objective": RoleRule("the objective of each step (the phases and their switch steps)", "history", True),
    "schedule": RoleRule("the learning rate of each step (and the run's length, which places its phases)", "history",
                         True),
    "optimizer": RoleRule("the optimizer's settings", "history"),
    "batch": RoleRule("samples per step: a change continues the same stream at the consumed-sample count", "note"),
    "numerics": RoleRule("the arithmetic the steps are computed in", "note"),
    "start": RoleRule("where a launch starts from (a checkpoint, weights) and what it may override", "ignore"),
    "layout": RoleRule("how the steps are laid out on processes and devices: never their result", "ignore"),
    "output": RoleRule("what the run writes and when it stops: checkpoints, logs", "ignore"),
    "evaluation": RoleRule("what the run validates on, and how often", "ignore"),
}
assert set(ROLES) == set(get_args(Role)), "every role has its rule"


def setting(default=dataclasses.MISSING, role: Role | None = None, *, factory=dataclasses.MISSING,
            **metadata) -> dataclasses.Field:
    """A config field with its role: ``lr: float = setting(3e-3, "schedule")``."""
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
    return dataclasses.field(default=default, default_factory=factory, metadata={"role": role, **metadata})


def section_class(name: str, entries: list, docs: dict[str, str], module: str, doc: str) -> type:
    """A frozen config section made from a table (``entries``: (field, type, ``setting(...)``)), with the docstring
    of each field (``docs``) where the help and the docs read them."""
    cls = dataclasses.make_dataclass(name, entries, frozen=True, namespace={"__field_docs__": docs})
    cls.__module__ = module
    cls.__doc__ = doc
    return cls


def role_of(section: type, name: str) -> Role:
    """The declared role of one field of a config section."""
    return {f.name: f.metadata.get("role") for f in dataclasses.fields(section)}[name]


def default_of(section: type, name: str):
    """The declared default of one field of a config section (what a run record written before it existed means)."""
    f = {f.name: f for f in dataclasses.fields(section)}[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def compared_as_values(sections: dict[str, type]) -> tuple[tuple[str, str], ...]:
    """(section, field) of every setting two runs must share as a value for their steps to be the same steps: every
    role but the ignored ones and those compared step by step (``per_step``)."""
    return tuple((name, f.name) for name, cls in sections.items() for f in dataclasses.fields(cls)
                 if ROLES[f.metadata["role"]].on_resume != "ignore" and not ROLES[f.metadata["role"]].per_step)


def fields_with(sections: dict[str, type], *rules_or_roles: str) -> tuple[tuple[str, str], ...]:
    """(section, field) of every field whose role, or whose role's resume rule, is one of those given, in
    declaration order: ``fields_with(SECTION_CLASSES, "refuse")`` or ``fields_with(SECTION_CLASSES, "optimizer")``."""
    wanted = set(rules_or_roles)
    return tuple((name, f.name) for name, cls in sections.items() for f in dataclasses.fields(cls)
                 if f.metadata.get("role") in wanted or ROLES[f.metadata["role"]].on_resume in wanted)

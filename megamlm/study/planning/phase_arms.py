"""Arms that differ in their recipe phases (``phase_arms`` in a study file): each arm is the phases of the study's
``pretrain.config`` with the changes it lists, one mapping per phase (``{}`` keeps a phase as written).

A WSD-branching ablation is one stable phase and a decay phase, its arms changing the decay's mask rate, data or
objective; the planner (``prefixes.py``) then trains the stable phase once and branches every decay at its first
step, since the arms' steps agree up to there (the trainer's resume accepts exactly those branches). Each run of
such an arm is launched with its whole config in one file (``plan.Plan.config_file``: pretrain.py --config; a
recipe's ``phases:`` list can only be given in a file), written before the run by ``running/commands.py``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import yaml

from megamlm.study.planning.naming import steps_label
from megamlm.study.planning.schema import PhaseArms, Study, StudyError

LABEL_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
STEP_KEYS = ("steps", "lr_warmup_iters")
"""Phase settings counted in steps (``--scale`` multiplies them)."""


class PhaseArmSpec(NamedTuple):
    """One arm of a ``phase_arms`` group at one budget."""

    label: str
    train_iters: int
    phases: list[dict]
    """The arm's whole ``phases:`` list (each phase's given keys only)."""
    reproduces_paper: bool
    seeds: list[int]


def base_phases(settings: dict[str, dict]) -> list[dict]:
    """The study's recipe phases (``pretrain.config``'s ``phases:``, or ``pretrain.recipe.phases``), each with its
    given keys only; [] for a study without phases."""
    phases = (settings.get("recipe") or {}).get("phases") or []
    return [{key: value for key, value in _as_dict(phase).items() if value is not None} for phase in phases]


def _as_dict(phase) -> dict:
    return dataclasses.asdict(phase) if dataclasses.is_dataclass(phase) else dict(phase)


def arm_phases(base: list[dict], changes: list) -> list[dict]:
    """``base`` with each phase's changes (a PhaseConfig: its set fields) applied, in order."""
    merged = [dict(phase) for phase in base]
    for phase, change in zip(merged, changes):
        phase.update({key: value for key, value in _as_dict(change).items() if value is not None})
    return merged


def phase_arm_specs(study: Study, settings: dict[str, dict]) -> list[PhaseArmSpec]:
    """Every arm of every ``phase_arms`` group at every budget, its phases merged over ``settings``' (the study's
    pretrain settings)."""
    base = base_phases(settings)
    specs = []
    for group in study.phase_arms:
        for budget in group.budgets:
            for arm in group.arms:
                label = arm.label if len(group.budgets) == 1 else f"{arm.label}-{steps_label(budget)}"
                specs.append(PhaseArmSpec(label, budget, arm_phases(base, arm.phases), group.reproduces_paper,
                                          group.seeds or study.seeds))
    return specs


def check_phase_arms(study: Study, settings: dict[str, dict]) -> None:
    """The phase arms on their own, each a StudyError naming the key and the fix (each run's phases are checked by
    pretrain.py's own checks when planned): phases to change, arms named once, changes that fit the phases."""
    base = base_phases(settings)
    if base and (study.grids or study.schedules):
        raise StudyError("pretrain.config has phases (a recipe), but the study also has grids or schedules, which "
                         "set --objective for the whole run; declare the arms under phase_arms (each changing the "
                         "phases it needs, e.g. objective: clm in one phase)")
    if study.phase_arms and not base:
        raise StudyError("phase_arms change the phases of pretrain.config, but it has none; give pretrain.config a "
                         "pretrain.py YAML file with a phases: list (e.g. examples/studies/wsd_trunk.yaml)")
    labels: set[str] = set()
    for i, group in enumerate(study.phase_arms):
        _check_group(group, f"phase_arms[{i}]", len(base), labels)


def _check_group(group: PhaseArms, where: str, phases: int, labels: set[str]) -> None:
    if not group.arms:
        raise StudyError(f"{where}.arms is empty; list at least one arm (a label, and the phases it changes)")
    if not group.budgets or len(set(group.budgets)) != len(group.budgets) or min(group.budgets) <= 0:
        raise StudyError(f"{where}.budgets must list distinct positive step counts, got {group.budgets}")
    if group.seeds and len(set(group.seeds)) != len(group.seeds):
        raise StudyError(f"{where}.seeds lists a seed twice: {group.seeds}")
    for j, arm in enumerate(group.arms):
        at = f"{where}.arms[{j}]"
        if not arm.label or not set(arm.label) <= LABEL_CHARACTERS:
            raise StudyError(f"{at}.label {arm.label!r} may only use letters, digits and ._- (it names runs and "
                             "files); e.g. decay-m15")
        if arm.label in labels:
            raise StudyError(f"{at}.label {arm.label!r} names two arms; give each arm its own label")
        labels.add(arm.label)
        if len(arm.phases) > phases:
            raise StudyError(f"{at}.phases lists {len(arm.phases)} phases, but pretrain.config has {phases}; give "
                             f"one mapping per phase in order ({{}} keeps a phase), at most {phases}")


def scale_phase_arms(study: Study, settings: dict[str, dict], factor: float, scaled) -> tuple[list, list[dict]]:
    """``--scale``: the phase arms with their budgets and the step counts their changes give multiplied by
    ``factor`` (``scaled``: how one step count scales), and the base phases likewise."""
    groups = [dataclasses.replace(group, budgets=[scaled(b, factor) for b in group.budgets], arms=[
        dataclasses.replace(arm, phases=[_scale_phase(change, factor, scaled) for change in arm.phases])
        for arm in group.arms]) for group in study.phase_arms]
    return groups, [_scale_phase(phase, factor, scaled) for phase in base_phases(settings)]


def _scale_phase(phase, factor: float, scaled):
    values = {key: scaled(_as_dict(phase)[key], factor) for key in STEP_KEYS if _as_dict(phase).get(key)}
    if dataclasses.is_dataclass(phase):
        return dataclasses.replace(phase, **values)
    return {**phase, **values}


def config_text(settings: dict[str, dict], run_name: str) -> str:
    """A phase arm's run's settings (``Run.settings``: the study's, the arm's phases, the preset's recipe) as the
    pretrain.py --config file it is launched with: the sections, and the recipe as a top-level ``phases:`` list."""
    sections = {section: values for section, values in settings.items() if values and section != "recipe"}
    text = yaml.safe_dump(sections, sort_keys=False) + yaml.safe_dump(
        {"phases": base_phases(settings)}, sort_keys=False)
    return (f"# {run_name}: written by the study planner (megamlm/study/planning/phase_arms.py); the planner's\n"
            "# --save, --save-at and --load flags come after it on the command line.\n" + text)

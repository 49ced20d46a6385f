"""A smaller copy of a study (``--scale F``): every step count multiplied by F, as a new frozen Study."""

from __future__ import annotations

import copy
import dataclasses

from megamlm.study.planning.naming import arm_label
from megamlm.study.planning.phase_arms import phase_arm_specs, scale_phase_arms
from megamlm.study.planning.schema import Study, StudyError, study_arms
from megamlm.study.planning.settings import STEP_SETTINGS, pretrain_settings


def scaled(steps: int, factor: float) -> int:
    return max(1, round(steps * factor))


def scale_steps(study: Study, factor: float) -> Study:
    """The study with every step count multiplied by ``factor`` (a smaller copy of the same plan): budgets, switch
    steps (the grids' and the schedules'), the phase arms' budgets and their recipe phases' lengths in steps,
    continuation lengths, evaluated checkpoints, fine-tuning steps, and the pretrain settings counted in steps
    (warmup and decay iterations, validation, save and log intervals), the base config's included. Scaled switch
    steps that collide leave a phase empty: the checks then name the schedule."""
    if not 0 < factor <= 1:
        raise StudyError(f"--scale must be in (0, 1], got {factor}")
    grids = [dataclasses.replace(grid, budgets=[scaled(b, factor) for b in grid.budgets],
                                 switch_steps=[0 if s == 0 else scaled(s, factor) for s in grid.switch_steps])
             for grid in study.grids]
    schedules = [dataclasses.replace(s, budgets=[scaled(b, factor) for b in s.budgets],
                                     switch_steps=[scaled(step, factor) for step in s.switch_steps])
                 for s in study.schedules]
    base = pretrain_settings(study)
    phase_arms, phases = scale_phase_arms(study, base, factor, scaled)
    resized = dataclasses.replace(study, grids=grids, schedules=schedules, phase_arms=phase_arms)
    renamed = dict(zip([arm_label(*arm.spec) for arm in study_arms(study)] + [
        spec.label for spec in phase_arm_specs(study, base)], [arm_label(*arm.spec) for arm in study_arms(resized)] + [
        spec.label for spec in phase_arm_specs(resized, base)]))
    continued = [dataclasses.replace(c, parents=[renamed.get(parent, parent) for parent in c.parents],
                                     steps=[scaled(s, factor) for s in c.steps],
                                     pretrain=_scale_settings(c.pretrain, factor))
                 for c in study.continued_pretraining]
    evaluation = study.evaluation
    if evaluation is not None:
        steps = evaluation.hyperparameters.max_steps
        hyperparameters = (dataclasses.replace(evaluation.hyperparameters, max_steps=scaled(steps, factor))
                           if steps is not None and steps > 0 else evaluation.hyperparameters)
        evaluation = dataclasses.replace(evaluation, hyperparameters=hyperparameters,
                                         checkpoint_steps=[scaled(s, factor) for s in evaluation.checkpoint_steps])
    scaled_base = _scale_settings(base, factor)
    pretrain = copy.deepcopy(study.pretrain)
    if phases:  # the recipe's phase lengths in steps, scaled like the budgets they fill
        pretrain["recipe"] = {"phases": phases}
    for section, values in scaled_base.items():
        for key, value in values.items():
            if value != base[section].get(key):
                pretrain.setdefault(section, {})[key] = value
    return dataclasses.replace(resized, continued_pretraining=continued, evaluation=evaluation,
                               pretrain=pretrain, scale=factor)


def _scale_settings(settings: dict, factor: float) -> dict:
    """A copy of ``settings`` (pretrain.py sections) with the settings counted in steps scaled."""
    out = copy.deepcopy(settings)
    for section, key in STEP_SETTINGS:
        value = (out.get(section) or {}).get(key)
        if isinstance(value, int) and value > 0:
            out[section][key] = scaled(value, factor)
    return out

"""The pretrain.py settings of a study: those the planner sets for each run, those counted in steps, and the
study's own settings merged over its ``pretrain.config`` file."""

from __future__ import annotations

from megamlm.config import ALTERNATIVES, SECTION_CLASSES, ConfigError, load_yaml
from megamlm.study.planning.schema import Study, StudyError

# pretrain.py settings the planner sets for each run from the grid: (section, key) -> the study key that sets it.
PLANNER_SETTINGS = {
    ("model", "model"): "sizes", ("objective", "objective"): "grids[].clm_fractions / schedules[].phases",
    ("objective", "switch"): "grids[].clm_fractions / schedules[].switches",
    ("objective", "switch_step"): "grids[].switch_steps / schedules[].switch_steps",
    ("objective", "mask_ratio"): "grids[].mask_ratios / schedules[].mask_ratios",
    ("training", "train_iters"): "grids[].budgets / schedules[].budgets", ("training", "seed"): "seeds",
    ("checkpoint", "save"): "--root", ("checkpoint", "load"): "the plan (branches)",
    ("checkpoint", "continue_from"): "continued_pretraining", ("checkpoint", "init_from"): "the plan",
    ("checkpoint", "save_at"): "the plan (branch points) and evaluation.checkpoint_steps",
    ("training", "exit_interval"): "the SLURM scripts (TARGET_STEP)",
}
# pretrain.py settings counted in steps, multiplied by --scale.
STEP_SETTINGS = (("training", "lr_warmup_iters"), ("training", "lr_wsd_decay_iters"), ("validation", "eval_interval"),
                 ("checkpoint", "save_interval"), ("logging", "log_interval"))


def pretrain_settings(study: Study) -> dict[str, dict]:
    """The study's pretrain.py settings as config sections: its ``config`` file, then its own sections."""
    settings = {section: {} for section in SECTION_CLASSES}
    config = study.pretrain.get("config")
    if config is not None:
        path = study.resolve(str(config))
        try:
            base = load_yaml(str(path))
        except ConfigError as err:
            raise StudyError(f"pretrain.config: {err}") from None
        defaults = type(base)().to_dict()
        for section, values in base.to_dict().items():
            settings[section].update({k: v for k, v in values.items() if v != defaults[section][k]})
    return merge_settings(settings, {k: v for k, v in study.pretrain.items() if k != "config"})


def merge_settings(base: dict[str, dict], override: dict) -> dict[str, dict]:
    """``override``'s sections on top of ``base``'s; a setting given one way (--lr-warmup-fraction) replaces its
    alternative (--lr-warmup-iters) from ``base``."""
    merged = {section: dict(values) for section, values in base.items()}
    for section, values in (override or {}).items():
        for key, value in (values or {}).items():
            merged.setdefault(section, {})[key] = value
            for pair_section, *pair in ALTERNATIVES:
                if pair_section == section and key in pair:
                    merged[section].pop(pair[1] if key == pair[0] else pair[0], None)
    return merged

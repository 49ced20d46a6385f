"""Reading a study file: YAML, ``--set KEY=VALUE`` overrides, the config loader's converter into a frozen Study,
``--scale``, then every check, before any plan is made.

Keys set with ``--set KEY=VALUE`` (YAML values, e.g. ``--set seeds=[1] --set evaluation.lrs=[1e-3]``) replace
the file's before the checks; ``--scale F`` multiplies every step count (``study.scaling.scale_steps``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from megamlm.config import ConfigError
from megamlm.config.loader import typed_dataclass, yaml_file
from megamlm.study.planning.checks import check_evaluation_keys, validate_study
from megamlm.study.planning.scaling import scale_steps
from megamlm.study.planning.schema import Study, StudyError


def load_study(path: str | Path, overrides: list[str] = (), scale: float | None = None) -> Study:
    """Read, override (``--set KEY=VALUE``), scale and check a study file; raises StudyError."""
    path = Path(path)
    try:
        data = yaml_file(path, "study file", "pass the path of a study YAML (see examples/studies/)")
    except ConfigError as err:  # the same one line, as the study's error
        raise StudyError(str(err)) from None
    if not isinstance(data, dict):
        raise StudyError(f"{path} must hold a mapping of study keys (name, sizes, grids, ...)")
    own_report = data.get("report")
    for override in overrides:
        apply_override(data, override)
    check_evaluation_keys(data)
    try:
        study = typed_dataclass("", Study, data)
    except ConfigError as err:  # the same one line, as the study's error
        raise StudyError(str(err)) from None
    study = dataclasses.replace(study, source=path.resolve(),
                                own_report=own_report if isinstance(own_report, str) else None)
    if scale is not None:
        study = scale_steps(study, scale)
    validate_study(study)
    return study


def apply_override(data: dict, override: str) -> None:
    """``KEY=VALUE`` with a dotted key (``evaluation.lrs``) and a YAML value (``[1e-3]``)."""
    key, sep, text = override.partition("=")
    if not sep or not key:
        raise StudyError(f"--set {override!r}: write KEY=VALUE, e.g. --set seeds=[1] or --set evaluation.lrs=[1e-3]")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        raise StudyError(f"--set {override!r}: {text!r} is not a YAML value") from None
    target = data
    parts = key.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise StudyError(f"--set {override!r}: {part} is not a mapping in the study file")
    target[parts[-1]] = value

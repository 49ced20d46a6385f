"""Settings from YAML files and mappings into a Config, each value checked against its field's type.

A ``--config run.yaml`` file holds sections (``{model: {...}, training: {...}}``); ``settings_of`` reads one into
plain mappings, ``config_from_settings`` builds the frozen Config from them (also for study files and records).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import get_args, get_origin, get_type_hints

import yaml

from megamlm.config.docs import scalar_type
from megamlm.config.sections import SECTION_CLASSES, Config
from megamlm.errors import ConfigError

ALTERNATIVES = (("objective", "switch", "switch_step"), ("training", "lr_warmup_iters", "lr_warmup_fraction"),
                ("training", "lr_wsd_decay_iters", "lr_wsd_decay_fraction"))
"""Settings that can be given two ways: at most one of each pair; on the command line, one replaces the other
given in --config."""
FORMER_SWITCHES = {"compile": {True: "blocks", False: "none"}}
"""Choice flags that were on/off switches before: the bare flag, --no-FLAG and YAML booleans keep their old meaning."""


def config_from_settings(data: dict) -> Config:
    """``{section: {key: value}}`` (YAML, a record, merged flags) -> a Config; unknown keys and wrong types are
    refused naming them. Sections and keys left out keep their defaults."""
    sections = {}
    for section_name, values in data.items():
        if section_name not in SECTION_CLASSES:
            raise ConfigError(f"unknown config section {section_name!r}; known: {', '.join(SECTION_CLASSES)}")
        if values is not None and not isinstance(values, dict):
            raise ConfigError(f"section {section_name} must be a mapping of keys to values, got {values!r}")
        cls = SECTION_CLASSES[section_name]
        known = {f.name for f in dataclasses.fields(cls)}
        hints = get_type_hints(cls)
        typed = {}
        for key, value in (values or {}).items():
            if key not in known:
                raise ConfigError(f"unknown key {section_name}.{key}; known: {', '.join(sorted(known))}")
            if key in FORMER_SWITCHES and isinstance(value, bool):
                value = FORMER_SWITCHES[key][value]
            typed[key] = _typed(f"{section_name}.{key}", hints[key], value)
        sections[section_name] = cls(**typed)
    return Config(**sections)


def _typed(name: str, annotation, value):
    """A value read from YAML, checked against (and for lists and whole floats, converted to) the field's type."""
    if value is None:
        if type(None) in get_args(annotation):
            return None
        raise ConfigError(f"{name} needs a value, got nothing (null)")
    if get_origin(annotation) is list:
        return _typed_list(name, annotation, value)
    listed = [arg for arg in get_args(annotation) if get_origin(arg) is list]
    if listed and isinstance(value, list):  # a setting given as one value or a list (--switch 0.6,0.9)
        return [_typed(name, get_args(listed[0])[0], item) for item in value] if len(value) != 1 else \
            _typed(name, get_args(listed[0])[0], value[0])
    expected = scalar_type(annotation)
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is float:
        if isinstance(value, str):  # PyYAML reads 5e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        if isinstance(value, dict):  # a JSON-valued setting (--rope-scaling) written as a YAML mapping
            value = json.dumps(value)
        ok = isinstance(value, str)
    if not ok:
        kind = {bool: "true or false", float: "a number", int: "a whole number", str: "a string"}[expected]
        raise ConfigError(f"{name} must be {kind}, got {value!r}")
    return value


def _typed_list(name: str, annotation, value) -> list:
    items = value if isinstance(value, list) else [value]
    if get_args(annotation) == (int,):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            raise ConfigError(f"{name} must be a list of whole numbers (e.g. [10000, 21000]), got {value!r}")
        return list(items)
    if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in items):
        raise ConfigError(f"{name} must be a list of strings, got {value!r}")
    return [str(v) for v in items]


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that gives a key twice (PyYAML keeps the last one silently): a
    section or a setting written twice is one of them lost. Used for --config files and study files alike."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first_line.get(key)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                if earlier is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} given twice (first at line {earlier})", key_node.start_mark)
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def yaml_problem(err: yaml.YAMLError) -> str:
    """``at line L, column C: PROBLEM`` of a PyYAML error, in one line."""
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{where}: {problem}"


def read_yaml(text: str):
    """YAML text as Python values (safe types only), refusing duplicate keys; raises yaml.YAMLError."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def settings_of(path: str) -> dict:
    """The sections of a YAML config file as mappings (not yet typed); one line naming the problem otherwise."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path} not found; pass an existing YAML file to --config")
    try:
        data = read_yaml(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {err.start}); pass a YAML file") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML{yaml_problem(err)}; fix that line") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold sections ({', '.join(SECTION_CLASSES)}) as a mapping, "
                          f"not a {type(data).__name__}")
    return data or {}


def load_yaml(path: str) -> Config:
    """A YAML config file as a Config (not validated: that is ``resolve``'s)."""
    data = settings_of(path)
    try:
        return config_from_settings(data)
    except ConfigError as err:
        raise ConfigError(f"config file {path}: {err}") from None

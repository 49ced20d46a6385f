"""Settings from YAML files and mappings into a Config, each value checked against its field's type.

A ``--config run.yaml`` file holds sections (``{model: {...}, training: {...}}``); ``settings_of`` reads one into
plain mappings (with ``yaml_file``, which reads the study files too), ``config_from_settings`` builds the frozen
Config from them (also for study files and records).
``typed_dataclass`` is the one YAML-to-dataclass converter: the config's sections and the study file's keys alike.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import get_args, get_origin, get_type_hints

import yaml

from megamlm.config.docs import field_docs, scalar_type
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
    if isinstance(data.get("phases"), list) or "phases" in data and data["phases"] is None:
        # A recipe's ``phases:`` list at the top of a file is the recipe section's one key (config/phase_fields.py).
        data = {**{k: v for k, v in data.items() if k != "phases"}, "recipe": {"phases": data["phases"] or []}}
    for section_name, values in data.items():
        if section_name not in SECTION_CLASSES:
            raise ConfigError(f"unknown config section {section_name!r}; known: {', '.join(SECTION_CLASSES)}")
        if values is not None and not isinstance(values, dict):
            raise ConfigError(f"section {section_name} must be a mapping of keys to values, got {values!r}")
        values = {key: FORMER_SWITCHES[key][value] if key in FORMER_SWITCHES and isinstance(value, bool) else value
                  for key, value in (values or {}).items()}
        sections[section_name] = typed_dataclass(section_name, SECTION_CLASSES[section_name], values)
    return Config(**sections)


def keys_of(cls) -> list[str]:
    """The keys a file may give for the dataclass ``cls``: its fields but those marked ``{"internal": True}``."""
    return [f.name for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _join(where: str, key) -> str:
    if where == "recipe" and key == "phases":  # its items are named phase 1, phase 2, ...
        return "phases"
    return f"{where}.{key}" if where else str(key)


def typed_dataclass(name: str, cls, values):
    """A mapping read from YAML -> the dataclass ``cls`` (config sections, study files), each value typed by its
    field; unknown keys and missing required ones refused naming them. ``name`` is where the mapping sits."""
    known = keys_of(cls)
    if not isinstance(values, dict):
        raise ConfigError(f"{name or 'the file'} must be a mapping of keys ({', '.join(known)}), got {values!r}")
    hints = get_type_hints(cls)
    typed = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"unknown key {_join(name, key)}; known: {', '.join(sorted(known))}")
        typed[key] = _typed(_join(name, key), hints[key], value)
    for f in dataclasses.fields(cls):
        if f.name in known and f.name not in typed and f.default is f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{_join(name, f.name)} is missing: {field_docs(cls).get(f.name, '')}")
    return cls(**typed)


def _typed(name: str, annotation, value):
    """A value read from YAML, checked against (and for lists and whole floats, converted to) the field's type: a
    scalar, a list, a mapping (``dict``) or a nested dataclass (Literal choices are the checks', not checked here)."""
    if value is None:
        if type(None) in get_args(annotation):
            return None
        raise ConfigError(f"{name} needs a value, got nothing (null)")
    inner = scalar_type(annotation) if get_origin(annotation) is not list else annotation
    if dataclasses.is_dataclass(inner):
        return typed_dataclass(name, inner, value)
    if get_origin(inner) is list:
        return _typed_list(name, inner, value)
    listed = [arg for arg in get_args(annotation) if get_origin(arg) is list]
    if listed and isinstance(value, list):  # a setting given as one value or a list (--switch 0.6,0.9)
        return [_typed(name, get_args(listed[0])[0], item) for item in value] if len(value) != 1 else \
            _typed(name, get_args(listed[0])[0], value[0])
    if inner is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name} must be a mapping, got {value!r}")
        return value
    expected = inner
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
        kind = {bool: "true or false", float: "a number", int: "a whole number",
                str: "a string (quote it in YAML)"}[expected]
        raise ConfigError(f"{name} must be {kind}, got {value!r}")
    return value


def _typed_list(name: str, annotation, value) -> list:
    items = value if isinstance(value, list) else [value]
    (item,) = get_args(annotation)
    if item is int:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            raise ConfigError(f"{name} must be a list of whole numbers (e.g. [10000, 21000]), got {value!r}")
        return list(items)
    if item is str:
        if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in items):
            raise ConfigError(f"{name} must be a list of strings, got {value!r}")
        return [str(v) for v in items]
    if not isinstance(value, list):
        raise ConfigError(f"{name} must be a list (YAML [a, b]), got {value!r}")
    # A recipe's phases are numbered from 1, as the log says ("phase 2"); other lists by their index.
    return [_typed(f"phase {i + 1}" if name == "phases" else f"{name}[{i}]", item, v)
            for i, v in enumerate(value)]


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


MAX_FILE_BYTES = 1 << 20
"""The largest YAML file read (config and study files are a few kilobytes)."""
MAX_EXPANDED_NODES = 100_000
"""The most values a YAML document may hold once its aliases are expanded: an alias repeats its anchor's whole value,
so a few lines of nested aliases stand for billions of values (the "billion laughs")."""


class AliasExpansionError(yaml.YAMLError):
    """A document whose aliases expand past ``MAX_EXPANDED_NODES`` values."""


def expanded_size(node: yaml.Node, sizes: dict | None = None) -> int:
    """How many values ``node`` holds with every alias expanded, counted without expanding any (each node once)."""
    sizes = {} if sizes is None else sizes
    if id(node) not in sizes:
        sizes[id(node)] = 0  # a recursive alias (PyYAML allows them) counts once, not forever
        children = node.value if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)) else []
        pairs = children if isinstance(node, yaml.MappingNode) else [(child,) for child in children]
        sizes[id(node)] = 1 + sum(expanded_size(child, sizes) for pair in pairs for child in pair)
    return sizes[id(node)]


def read_yaml(text: str):
    """YAML text as Python values (safe types only), refusing duplicate keys and aliases that expand past
    ``MAX_EXPANDED_NODES`` values; raises yaml.YAMLError."""
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and (size := expanded_size(node)) > MAX_EXPANDED_NODES:
            raise AliasExpansionError(f"its aliases expand to {size:,} values, more than the {MAX_EXPANDED_NODES:,} a "
                                 "config may hold; write the values out or use fewer nested aliases")
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def yaml_file(path: str | Path, what: str, fix: str):
    """The YAML document in the file ``path`` (``read_yaml``: no key twice); a ConfigError naming the ``what``
    (``config file``, ``study file``) and the problem otherwise, ``fix`` saying what to pass when it is missing."""
    if not Path(path).is_file():
        raise ConfigError(f"{what} {path} not found; {fix}")
    if (size := Path(path).stat().st_size) > MAX_FILE_BYTES:
        raise ConfigError(f"{what} {path} is {size:,} bytes, more than the {MAX_FILE_BYTES:,} a {what} may be; "
                          "pass the YAML file of the settings (not a data file)")
    try:
        return read_yaml(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {err.start}); pass a YAML file") from None
    except AliasExpansionError as err:
        raise ConfigError(f"{what} {path}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {path} is not valid YAML{yaml_problem(err)}; fix that line") from None


def settings_of(path: str) -> dict:
    """The sections of a YAML config file as mappings (not yet typed); one line naming the problem otherwise."""
    data = yaml_file(path, "config file", "pass an existing YAML file to --config")
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

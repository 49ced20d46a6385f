"""The command line: one flag per field of every section (its docstring is the help), over an optional YAML file."""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Any, get_args, get_origin, get_type_hints

from megamlm.config.derived import objective_stages
from megamlm.config.docs import choices_of, field_docs, scalar_type
from megamlm.config.loader import ALTERNATIVES, FORMER_SWITCHES, config_from_settings, load_yaml
from megamlm.config.recipes import BATCH_KEYS, RECIPE_DEFAULTS
from megamlm.config.sections import OBJECTIVE_STAGES, PHASE_OBJECTIVES, SECTION_CLASSES, Config
from megamlm.env_args import command_line
from megamlm.errors import ConfigError, UserError, exit_line

FLAG_ALIASES = {"tensor_model_parallel_size": ["--tp"], "pipeline_model_parallel_size": ["--pp"]}


def flag_name(field: str) -> str:
    """The command-line flag of a config field: ``adam_beta2`` -> ``--adam-beta2`` (the one naming rule)."""
    return "--" + field.replace("_", "-")


def _objective(value: str) -> str:
    """--objective: a named objective, or stages joined by commas (``mlm,clm,mlm``); adjacent repeats and the
    switches are checked with the rest of the config."""
    if value in OBJECTIVE_STAGES or value and not set(objective_stages(value)) - set(PHASE_OBJECTIVES):
        return value
    raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {', '.join(OBJECTIVE_STAGES)}, or "
                                     f"stages of {', '.join(PHASE_OBJECTIVES)} joined by commas, e.g. mlm,clm,mlm)")


FLAG_TYPES = {"objective": (_objective, "{" + ",".join(OBJECTIVE_STAGES) + "} or a sequence of stages "
                                        "(" + ",".join(PHASE_OBJECTIVES) + ") joined by commas")}
"""Flags whose values a function checks (type, metavar): a str field with more values than a Literal can list."""
FLAG_VALUE_NAMES = {"rampup_batch_size": ("START", "INCREMENT", "SAMPLES"), "profile_steps": ("FIRST", "LAST")}
"""List flags of a fixed number of values, each named in --help (Megatron's names)."""


class _OneOrMany(argparse.Action):
    """One number or several (comma-separated or separate): ``--switch 0.25`` stays a number, ``--switch 0.6,0.9``
    is a list."""

    def __call__(self, parser, namespace, values, option_string=None):
        kind = self.type_of_items
        try:
            items = [kind(v) for value in values for v in str(value).split(",") if v.strip()]
        except ValueError:
            example = "0.6,0.9" if kind is float else "6000,9000"
            raise ConfigError(f"{option_string} takes {'numbers' if kind is float else 'integers'} (e.g. {example}), "
                              f"got {' '.join(values)}") from None
        if not items:
            raise ConfigError(f"{option_string} needs a value; see pretrain.py --help")
        setattr(namespace, self.dest, items[0] if len(items) == 1 else items)


class _IntList(argparse.Action):
    """A list of integers given as separate or comma-separated values: ``--save-at 10000,21000`` or ``10000 21000``."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            items = [int(v) for value in values for v in str(value).split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"{option_string} takes integers (e.g. 10000,21000), got {' '.join(values)}") from None
        setattr(namespace, self.dest, items)


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are ConfigErrors: the entry point prints them as one line and exits 2."""

    def error(self, message: str):
        raise ConfigError(f"{message}; see pretrain.py --help")


def help_text(f: dataclasses.Field, doc: str, section: str = "") -> str:
    """The field's doc with its default named once: a doc that explains its default (every field whose default is
    unset or empty does) is printed as written, any other gets "(default: VALUE)"; a value the paper presets'
    recipe sets instead is named with where it comes from."""
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    # the batch sizes' and the sequence length's own docs already say what the presets use
    by_preset = {} if f.name in BATCH_KEYS or section == "model" else RECIPE_DEFAULTS.get((section, f.name), {})
    if "default" not in doc and default not in (None, []):
        doc = f"{doc} (default: {default}{'; ' + _recipe_note(by_preset) if by_preset else ''})"
    elif by_preset:
        doc = f"{doc} ({_recipe_note(by_preset)})"
    return doc.replace("%", "%%")


def _recipe_note(by_preset: dict) -> str:
    values = sorted({str(v) for v in by_preset.values()})
    presets = ", ".join(by_preset)
    shown = values[0] if len(values) == 1 else "/".join(str(by_preset[p]) for p in by_preset)
    return f"--model {presets.replace(', ', '/')}: {shown}, their recipe in examples/configs/paper_*.yaml"


def _add_flag(group, section: str, f: dataclasses.Field, hint, doc: str) -> None:
    flags = [flag_name(f.name), *FLAG_ALIASES.get(f.name, [])]
    kwargs: dict[str, Any] = dict(dest=f"{section}.{f.name}", help=help_text(f, doc, section),
                                  default=argparse.SUPPRESS)
    listed = [arg for arg in get_args(hint) if get_origin(arg) is list]
    if get_origin(hint) is list:
        kwargs["nargs"], kwargs["metavar"] = "+", f.name.upper()
        if get_args(hint) == (int,):
            kwargs["action"] = _IntList
        elif choices_of(hint) is not None:  # a list of choices (--report-to): each value is checked
            kwargs["choices"], kwargs["metavar"] = choices_of(hint), None
    elif listed:  # one value or a list of them
        kwargs.update(nargs="+", metavar=f.name.upper(),
                      action=type("_Items", (_OneOrMany,), {"type_of_items": get_args(listed[0])[0]}))
        if f.name in FLAG_VALUE_NAMES:
            kwargs["nargs"], kwargs["metavar"] = len(FLAG_VALUE_NAMES[f.name]), FLAG_VALUE_NAMES[f.name]
    elif f.name in FLAG_TYPES:
        kwargs["type"], kwargs["metavar"] = FLAG_TYPES[f.name]
    elif hint is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs["type"] = scalar_type(hint)
        if choices_of(hint) is not None:
            kwargs["choices"] = choices_of(hint)
        else:
            kwargs["metavar"] = f.name.upper()
        if f.name in FORMER_SWITCHES:
            kwargs.update(nargs="?", const=FORMER_SWITCHES[f.name][True])
            group.add_argument("--no-" + f.name.replace("_", "-"), dest=kwargs["dest"], action="store_const",
                               const=FORMER_SWITCHES[f.name][False], default=argparse.SUPPRESS,
                               help=f"the same as --{f.name.replace('_', '-')} {FORMER_SWITCHES[f.name][False]}")
    group.add_argument(*flags, **kwargs)


# Built once per process (parsing does not change it): a study plan parses the flags of every one of its runs.
@functools.cache
def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False: a misspelt flag (--train-iter) is an error, not silently the flag it prefixes
    parser = _Parser(prog="pretrain.py", usage="%(prog)s [--config run.yaml] [flags]  (flags override --config)",
                     description="Pretrain a text encoder with MLM, CLM or a CLM-then-MLM schedule.",
                     allow_abbrev=False)
    parser.add_argument("--config", help="YAML file with config sections; flags override it.")
    for section, cls in SECTION_CLASSES.items():
        group = parser.add_argument_group(section)
        docs, hints = field_docs(cls), get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.metadata.get("yaml_only"):  # a recipe's phases: a list of mappings, only a file can give it
                _add_flag(group, section, f, hints[f.name], docs.get(f.name, ""))
    return parser


def answer_flags_first() -> None:
    """pretrain.py's command line parsed before anything heavy is imported: ``--help`` prints and exits 0, a flag
    error prints its one line and exits 2, in a moment (torch and transformers take seconds to import); flags that
    parse return, and training parses them again with the rest of its checks."""
    try:
        given_settings(command_line("pretrain", say=lambda _line: None))  # the full parse says what the env adds
    except (UserError, OSError) as err:
        raise SystemExit(exit_line(err)) from None


def parse_flags(argv: list[str] | None = None) -> Config:
    """Flags over an optional ``--config`` YAML file -> a Config as given (frozen, typed, not yet validated)."""
    return config_from_settings(given_settings(argv))


def given_settings(argv: list[str] | None = None) -> dict:
    """Flags over an optional ``--config`` YAML file -> {section: {key: value}} of what was given, nothing else."""
    ns = vars(build_parser().parse_args(argv))
    config_file = ns.pop("config", None)
    settings = load_yaml(config_file).to_dict() if config_file else {}
    for dest, value in ns.items():
        section, name = dest.split(".", 1)
        settings.setdefault(section, {})[name] = value
        for pair_section, *pair in ALTERNATIVES:
            if section == pair_section and name in pair and f"{section}.{_other(pair, name)}" not in ns:
                settings[section][_other(pair, name)] = None  # the command line replaces the YAML's
    objective = ns.get("objective.objective")
    if objective is not None and not {"objective.switch", "objective.switch_step"} & set(ns) and \
            len(objective_stages(objective)) == 1:
        # A one-objective --objective on the command line replaces the YAML's schedule, its switch included (a CLM
        # parent run launched from a CLM-then-MLM config); a switch given on the command line is still refused.
        settings.setdefault("objective", {}).update(switch=None, switch_step=None)
    _check_run_length(settings, ns)
    return settings


def _check_run_length(settings: dict, ns: dict) -> None:
    """The run's length is given once: --train-iters or --train-tokens (the one on the command line replaces the
    other given in --config), and --train-tokens is positive; checked here, before the recipe turns tokens into
    steps, so that the refusal names the flag."""
    training = settings.get("training", {})
    iters, tokens = training.get("train_iters"), training.get("train_tokens")
    if iters is not None and tokens is not None:
        given = {name for name in ("train_iters", "train_tokens") if f"training.{name}" in ns}
        if not given and iters == SECTION_CLASSES["training"]().train_iters:  # a --config file's Config holds every
            given = {"train_tokens"}                                           # default: its train_iters is one
        if len(given) != 1:
            raise ConfigError(f"--train-iters {iters} and --train-tokens {tokens} give the run's length two ways; "
                              "pass one of them")
        del training["train_tokens" if "train_iters" in given else "train_iters"]
    if training.get("train_tokens") is not None and training["train_tokens"] <= 0:
        raise ConfigError(f"--train-tokens must be positive, got {training['train_tokens']}")


def _other(pair: list[str], name: str) -> str:
    return pair[1] if name == pair[0] else pair[0]

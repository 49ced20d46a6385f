"""The optional packages megamlm can use, declared once: their import name, the distributions that carry them,
the ``megamlm[extra]`` that installs them (pyproject.toml's ``optional-dependencies``), and how to ask whether one
is there. transformers and matplotlib are core dependencies (conversion, evaluation and figures are main jobs of
the tool), so they are not in this table.

``require(name, purpose)`` imports a package for code about to use it, or raises ``MissingExtra`` (a
``UserError``: every entry point prints it as one line and exits 2) naming ``pip install "megamlm[extra]"``.

``installed(name)`` only looks the package up (``importlib.util.find_spec``, which imports nothing): checks that
run while parsing flags use it. ``usable(name)`` imports it once (and the submodules its entry lists), so a broken
install counts as absent: code about to run the package uses it. ``version(name)`` reads the installed
distribution's version without importing the package.

This module is on the lowest floor: it imports only ``megamlm.errors``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass

from megamlm.errors import UserError


@dataclass(frozen=True)
class Extra:
    """One optional package."""

    module: str
    """The import name (``flash_attn``); also the key of ``EXTRAS``."""
    distributions: tuple[str, ...]
    """Distribution names to read the version from, first found wins (``flash-attn``)."""
    extra: str | None
    """The pyproject extra that brings it (``flash`` for ``pip install "megamlm[flash]"``); None when it has no
    wheel an extra can name (apex builds from its repository): then ``pip`` says how."""
    pip: str | None = None
    """The install command when ``extra`` is None."""
    submodules: tuple[str, ...] = ()
    """Further modules ``usable`` imports (``triton.language``): the package counts as usable when all import."""

    @property
    def distribution(self) -> str:
        """The distribution's name as messages give it (``flash-attn``)."""
        return self.distributions[0]

    @property
    def install(self) -> str:
        """The command that installs it: ``pip install "megamlm[flash]"``."""
        return f'pip install "megamlm[{self.extra}]"' if self.extra else str(self.pip)


EXTRAS: dict[str, Extra] = {extra.module: extra for extra in (
    Extra("flash_attn", ("flash-attn", "flash_attn"), "flash"),
    Extra("transformer_engine", ("transformer-engine", "transformer_engine", "transformer-engine-cu12"), "te"),
    Extra("apex", ("apex",), None, pip="pip install git+https://github.com/NVIDIA/apex (apex has no wheel)"),
    Extra("torchao", ("torchao",), "fp8"),
    Extra("triton", ("triton", "pytorch-triton-rocm", "pytorch-triton"), "kernels", submodules=("triton.language",)),
    Extra("mpi4py", ("mpi4py",), "mpi"),
    Extra("gguf", ("gguf",), "gguf"),
    # transformers' GGUF loader refuses to start without accelerate; the gguf extra brings both
    Extra("accelerate", ("accelerate",), "gguf"),
    Extra("pyarrow", ("pyarrow",), "data", submodules=("pyarrow.parquet",)),
    Extra("zstandard", ("zstandard",), "data"),
    Extra("sentencepiece", ("sentencepiece",), "data"),
    Extra("tiktoken", ("tiktoken",), "data"),
    Extra("datasets", ("datasets",), "eval"),
    Extra("sklearn", ("scikit-learn",), "eval", submodules=("sklearn.linear_model",)),
    Extra("optimi", ("torch-optimi",), "optimi"),
    # the experiment trackers of --report-to (training/trackers.py), one extra each
    Extra("trackio", ("trackio",), "trackio"),
    Extra("wandb", ("wandb",), "wandb"),
    Extra("mlflow", ("mlflow-skinny", "mlflow"), "mlflow"),
    # tools/evaluate.py --mteb: the export loaded as a sentence-transformers model, scored by mteb
    Extra("mteb", ("mteb",), "mteb"),
    Extra("sentence_transformers", ("sentence-transformers",), "mteb"),
)}

ACCELERATORS = ("flash_attn", "transformer_engine", "apex", "torchao", "triton")
"""The extras that make training faster, in the order a run's start reports them (``detect_optional_extras``)."""

_usable: dict[str, bool] = {}


def extra(name: str) -> Extra:
    """The table entry of ``name`` (an import name of ``EXTRAS``); KeyError naming the known ones otherwise."""
    try:
        return EXTRAS[name]
    except KeyError:
        raise KeyError(f"unknown optional package {name!r}; known: {', '.join(EXTRAS)}") from None


def installed(name: str) -> bool:
    """True when the package ``name`` can be found; nothing is imported."""
    try:
        return importlib.util.find_spec(extra(name).module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def usable(name: str) -> bool:
    """True when the package ``name`` (and the submodules its entry lists) imports; checked once per process,
    and a package that fails to import, whatever the reason, counts as absent."""
    if name not in _usable:
        entry = extra(name)
        try:
            for module in (entry.module, *entry.submodules):
                importlib.import_module(module)
            _usable[name] = True
        except Exception:  # missing, or an install that fails to import: both count as absent
            _usable[name] = False
    return _usable[name]


def version(name: str) -> str | None:
    """The installed version of ``name``, ``"unknown version"`` when it is installed without distribution
    metadata, None when it is not installed; nothing is imported."""
    if not installed(name):
        return None
    for distribution in extra(name).distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown version"


def install_command(name: str) -> str:
    """The command that installs ``name`` (``pip install "megamlm[flash]"``)."""
    return extra(name).install


class MissingExtra(UserError, ImportError):
    """An optional package a command needs is not installed; the message is the one line naming its install."""


def missing_message(name: str, purpose: str) -> str:
    """The one line for ``purpose`` (``reading a GGUF file``) without ``name``: what is missing and its install."""
    entry = extra(name)
    return f"{purpose} needs the {entry.distribution} package, which is not installed; {entry.install}"


def require(name: str, purpose: str):
    """Import and return the package ``name`` (and the submodules its entry lists) for ``purpose``, or raise
    ``MissingExtra`` with ``missing_message``; a package that fails to import counts as missing."""
    entry = extra(name)
    try:
        for module in entry.submodules:
            importlib.import_module(module)
        return importlib.import_module(entry.module)
    except ImportError:
        raise MissingExtra(missing_message(name, purpose)) from None


def detect_optional_extras() -> dict[str, str | None]:
    """{flash_attn, transformer_engine, apex, torchao, triton: installed version or None}, importing none of them."""
    return {name: version(name) for name in ACCELERATORS}

"""The optional packages megamlm can use, declared once: their import name, the distributions that carry them
and the command that installs them, and how to ask whether one is there.

``installed(name)`` only looks the package up (``importlib.util.find_spec``, which imports nothing): checks that
run while parsing flags use it. ``usable(name)`` imports it once (and the submodules its entry lists), so a broken
install counts as absent: code about to run the package uses it. ``version(name)`` reads the installed
distribution's version without importing the package.

This module is on the lowest floor: it imports nothing from megamlm.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    """One optional package."""

    module: str
    """The import name (``flash_attn``); also the key of ``EXTRAS``."""
    distributions: tuple[str, ...]
    """Distribution names to read the version from, first found wins (``flash-attn``)."""
    pip: str
    """The command that installs it (``pip install flash-attn``)."""
    submodules: tuple[str, ...] = ()
    """Further modules ``usable`` imports (``triton.language``): the package counts as usable when all import."""

    @property
    def distribution(self) -> str:
        """The distribution's name as messages give it (``flash-attn``)."""
        return self.distributions[0]


EXTRAS: dict[str, Extra] = {extra.module: extra for extra in (
    Extra("flash_attn", ("flash-attn", "flash_attn"), "pip install flash-attn"),
    Extra("transformer_engine", ("transformer-engine", "transformer_engine", "transformer-engine-cu12"),
          "pip install transformer-engine[pytorch]"),
    Extra("apex", ("apex",), "pip install git+https://github.com/NVIDIA/apex"),
    Extra("torchao", ("torchao",), "pip install torchao"),
    Extra("triton", ("triton", "pytorch-triton-rocm", "pytorch-triton"), "pip install triton",
          submodules=("triton.language",)),
    Extra("mpi4py", ("mpi4py",), "pip install mpi4py"),
    Extra("matplotlib", ("matplotlib",), "pip install matplotlib"),
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
    """The command that installs ``name`` (``pip install flash-attn``)."""
    return extra(name).pip


def detect_optional_extras() -> dict[str, str | None]:
    """{flash_attn, transformer_engine, apex, torchao, triton: installed version or None}, importing none of them."""
    return {name: version(name) for name in ACCELERATORS}

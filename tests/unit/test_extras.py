"""The optional-package table (megamlm.extras), the launcher's environment (megamlm.launcher_env) and the shared
figure set-up (megamlm.figures)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from megamlm import extras, figures
from megamlm.errors import UserError
from megamlm.launcher_env import detect_launcher, local_rank_from_env, rank_from_env, world_size_from_env


def test_installed_and_version_only_look_packages_up(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    assert not extras.installed("torchao") and extras.version("torchao") is None
    assert extras.detect_optional_extras()["torchao"] is None
    assert set(extras.detect_optional_extras()) == set(extras.ACCELERATORS) <= set(extras.EXTRAS)


def test_each_extra_names_the_command_that_installs_it():
    assert extras.install_command("flash_attn") == 'pip install "megamlm[flash]"'
    assert extras.install_command("torchao") == 'pip install "megamlm[fp8]"'
    assert extras.install_command("apex").startswith("pip install git+https://github.com/NVIDIA/apex")
    assert extras.extra("flash_attn").distribution == "flash-attn"
    with pytest.raises(KeyError, match="unknown optional package 'nope'"):
        extras.installed("nope")


def test_usable_counts_a_package_that_fails_to_import_as_absent(monkeypatch):
    monkeypatch.setitem(extras.EXTRAS, "broken", extras.Extra("megamlm_no_such_module", ("x",), "x"))
    monkeypatch.setattr(extras, "_usable", {})
    assert not extras.usable("broken") and not extras.installed("broken")


def test_every_extra_named_is_one_of_pyproject_and_brings_its_package():
    """The table's extras are pyproject.toml's: `pip install "megamlm[X]"` installs the package the line is about,
    and transformers and matplotlib, which conversion, evaluation and figures need, are core dependencies."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    core = {re.split(r"[<>=\[ ]", d)[0] for d in project["dependencies"]}
    assert {"transformers", "matplotlib"} <= core and not {"transformers", "matplotlib"} & set(extras.EXTRAS)
    for entry in extras.EXTRAS.values():
        if entry.extra is None:
            assert entry.pip  # apex: no wheel, its own command
            continue
        named = {re.split(r"[<>=\[ ]", d)[0].replace("_", "-") for d in optional[entry.extra]}
        assert entry.distribution.replace("_", "-") in named, (entry.module, entry.extra)


def test_the_test_extra_installs_what_a_cpu_machine_runs_and_ci_adds_the_gpu_packages():
    """Issue 31, item 7: the README's `pip install -e ".[test]"` brings no GPU package (torchao makes every
    `import transformers` log its unloadable CUDA kernels); CI adds [kernels] and [fp8] itself, whose tests also
    run on a CPU (the Triton interpreter, torch's emulated float8) and skip without them."""
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[2]
    optional = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    gpu = {"triton", "torchao", "flash-attn", "transformer-engine"}
    assert not {re.split(r"[<>=\[ ]", d)[0] for d in optional["test"]} & gpu
    assert {re.split(r"[<>=\[ ]", d)[0] for e in ("kernels", "fp8") for d in optional[e]} == {"triton", "torchao"}
    assert 'pip install -e ".[test]"' in (root / "README.md").read_text()
    assert '-e ".[test,kernels,fp8,optimi]"' in (root / ".ci" / "run").read_text()


def test_require_raises_one_user_error_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(extras.EXTRAS, "gone", extras.Extra("megamlm_no_such_module", ("gone-dist",), "gguf"))
    with pytest.raises(extras.MissingExtra) as caught:
        extras.require("gone", "reading m.gguf")
    assert isinstance(caught.value, UserError)
    assert str(caught.value) == ('reading m.gguf needs the gone-dist package, which is not installed; '
                                 'pip install "megamlm[gguf]"')


def test_launcher_environment_is_read_without_torch():
    env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    assert detect_launcher(env) == "openmpi"
    assert (rank_from_env(env), world_size_from_env(env), local_rank_from_env(env)) == (5, 8, 1)
    assert (rank_from_env({}), world_size_from_env({}), local_rank_from_env({})) == (0, 1, 0)
    assert local_rank_from_env({"RANK": "3", "WORLD_SIZE": "4"}) == 0  # a launcher that sets no local rank


def test_figures_are_saved_atomically_and_closed(tmp_path):
    pytest.importorskip("matplotlib")
    open_before = figures.pyplot().get_fignums()
    fig, ax = figures.figure(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    path = figures.save(fig, tmp_path / "sub" / "line.png")
    assert path.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in path.parent.iterdir()) == ["line.png"]  # no temporary file left
    assert figures.pyplot().get_fignums() == open_before

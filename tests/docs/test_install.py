"""Issue 42: the README's test command passes on a fresh clone made by the README's commands, also after the README's
own recipes ran in it.

- ``pip install -e ".[test]"`` brings every program the documented commands run that is not the interpreter's, the
  system's or the repository's own (the docs test runs README's ``ruff check .``), pinned as ``.ci/run`` pins it;
- README's extras table lists every extra of pyproject.toml with the packages it brings;
- every output folder a documented command names in the clone (``ckpt/``, ``hf/``, ``evals/``, ...) is ignored by
  git, and the docs test's copies of the repository hold its tracked files only, never what a user keeps in the
  clone (tests/docs/test_commands.py: ``repository_files``, ``sandbox``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
NOT_INSTALLED_BY_PIP = {"python", "python3", "pip", "bash", "sh", "sbatch", "srun", "mpirun", "scancel"}
"""The interpreter the README's commands install into, and what the system or the cluster provides (the docs test
runs sbatch, srun and mpirun only where CI's HPC stage installed them)."""
OUTPUT_FLAGS = {"--save", "--load", "--output", "--output-prefix", "--workdir", "--report"}


def _docs_test():
    spec = importlib.util.spec_from_file_location("docs_test_commands", REPO / "tests/docs/test_commands.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


DOCS_TEST = _docs_test()


def _project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _command_words() -> list[list[str]]:
    """Every documented command, one list of words per ``&&`` part, environment assignments left out."""
    parts = []
    for doc in DOCS_TEST.DOCS:
        for command in DOCS_TEST.commands_in(doc):
            words = shlex.split(command.text, comments=True)
            while "&&" in words:
                cut = words.index("&&")
                parts.append(words[:cut])
                words = words[cut + 1:]
            parts.append(words)
    return [DOCS_TEST.split_env(words)[1] for words in parts if words]


def _provider(program: str) -> str | None:
    """The installed distribution that puts ``program`` on the PATH: a console script, or a file in its bin/."""
    for distribution in importlib.metadata.distributions():
        scripts = {e.name for e in distribution.entry_points if e.group == "console_scripts"}
        files = {Path(str(f)).name for f in distribution.files or [] if "bin" in Path(str(f)).parts}
        if program in scripts | files:
            return canonicalize_name(distribution.metadata["Name"])
    return None


def test_the_test_extra_brings_every_program_the_documented_commands_run():
    """A fresh environment has what `pip install -e ".[test]"` installs: the core dependencies and the [test] extra.
    Each program the docs test runs (every documented command's first word) must come from one of them, or be the
    interpreter's, the system's or the repository's own."""
    project = _project()
    installed_by_test = {canonicalize_name(Requirement(r).name)
                         for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]}
    programs = {words[0] for words in _command_words()}
    assert "ruff" in programs  # README: `pip install ruff==0.17.6 && ruff check .`
    for program in sorted(programs - NOT_INSTALLED_BY_PIP):
        if (REPO / program).is_file():
            continue  # the repository's own scripts (examples/run_local.sh)
        provider = _provider(program)
        assert provider is not None, f"{program}: no installed distribution provides it"
        assert provider in installed_by_test, (
            f"the documented commands run {program}, from {provider}, which pip install -e \".[test]\" does not "
            "install: add it to pyproject.toml's [test] extra")


def test_the_test_extra_pins_what_ci_and_the_readme_pin():
    """.ci/run installs ruff itself before the README's test command, and README's Tests section names the same pin:
    [test] holds the same pin, so a user's environment lints with CI's rules."""
    project = _project()
    test_extra = {canonicalize_name(Requirement(r).name): str(Requirement(r).specifier)
                  for r in project["optional-dependencies"]["test"]}
    core = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}  # torch: the README's own line
    pinned = re.findall(r"pip install (?:--quiet )?([A-Za-z0-9_.-]+)(==[\w.]+)", (REPO / ".ci/run").read_text())
    pinned += [(words[2], "==" + words[2].split("==")[1]) for words in _command_words()
               if words[:2] == ["pip", "install"] and len(words) == 3 and "==" in words[2]]
    pinned = [(name.split("==")[0], pin) for name, pin in pinned if canonicalize_name(name.split("==")[0]) not in core]
    assert pinned
    for name, pin in pinned:
        assert test_extra.get(canonicalize_name(name)) == pin, (name, pin, test_extra.get(canonicalize_name(name)))


def test_the_readme_extras_table_lists_every_extra_with_what_it_brings():
    """Every extra but [test] is a row of README's table, and the row names exactly the extra's packages
    (transformers' GGUF loader needs accelerate: [gguf] brings it)."""
    readme = (REPO / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`megamlm["):
            for name in re.findall(r"`megamlm\[(\w+)\]`", cells[0]):
                rows[name] = cells[1]
    optional = _project()["optional-dependencies"]
    assert set(rows) == set(optional) - {"test"}
    brought = {"flash-attn": "flash-attn", "transformer-engine": "Transformer Engine"}
    for name, requirements in optional.items():
        if name == "test":
            continue
        named = {brought.get(Requirement(r).name, Requirement(r).name) for r in requirements}
        if len(rows[name].split(", ")) == len(requirements):
            assert set(rows[name].split(", ")) == named, (name, rows[name], named)
        else:  # one row for several extras: their packages in order
            assert all(package in rows[name] for package in named), (name, rows[name], named)
    assert "accelerate" in rows["gguf"]


def _output_folders() -> set[str]:
    """The top-level folders of the clone that documented commands write (relative paths after an output flag,
    and the folder ``plan_study.py --emit KIND FOLDER`` writes)."""
    folders = set()
    for words in _command_words():
        for i, word in enumerate(words[:-1]):
            if word == "--emit":  # --emit KIND [FOLDER]
                value = words[i + 2] if i + 2 < len(words) else "-"
            else:
                value = words[i + 1] if word in OUTPUT_FLAGS else "-"
            if not value.startswith(("/", "-", "$")) and not value.isupper():  # DIR, CKPT: placeholders
                folders.add(Path(value).parts[0])
    return folders


def test_every_output_folder_the_documents_name_is_ignored_by_git():
    """What the README's recipes write in the clone (checkpoints, exports, evaluations) never shows as a change,
    and a folder that holds tracked files (examples/, megamlm/) is where the documents keep their outputs."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = set(subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                                 check=True).stdout.split())
    tracked_top = {Path(name).parts[0] for name in tracked}
    folders = _output_folders()
    assert {"ckpt", "hf", "evals"} <= folders
    for folder in sorted(folders - tracked_top):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", f"{folder}/x"], cwd=REPO)
        assert ignored.returncode == 0, f"{folder}/: documented commands write it, and .gitignore does not list it"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_the_docs_sandbox_copies_tracked_files_only(tmp_path):
    """A clone after the README's recipes ran in it: large untracked ckpt/ and hf/ (not ignored here, as in a
    clone of an older .gitignore), a file of the user's own and a large output inside a source folder. The docs
    test's copy holds the tracked files, the source files being written (not yet added) and the reader's files:
    nothing of the user's is copied, and the reader's hf/ lands without a clash."""
    repo = tmp_path / "clone"
    (repo / "megamlm").mkdir(parents=True)
    (repo / "megamlm/__init__.py").write_text("")
    (repo / "README.md").write_text("# x\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "megamlm/__init__.py", "README.md")
    _git(repo, "commit", "-q", "-m", "x")
    for folder in ("ckpt/recipes/clm-then-mlm/iter_0000300", "hf/smollm2-merged"):
        (repo / folder).mkdir(parents=True)
        with open(repo / folder / "model.safetensors", "wb") as f:
            f.truncate(1 << 30)  # 1 GiB, sparse: copying it would write a real GiB
    (repo / "notes.txt").write_text("mine")
    (repo / "staged.py").write_text("")
    _git(repo, "add", "staged.py")  # staged, not committed: a file the next commit adds
    (repo / "megamlm/new_module.py").write_text("")  # being written, not added yet: part of the change under test
    (repo / "examples/run").mkdir(parents=True)
    with open(repo / "examples/run/model.safetensors", "wb") as f:  # a user's output inside a source folder
        f.truncate(1 << 30)
    reader = tmp_path / "reader"
    (reader / "hf/mlm").mkdir(parents=True)
    (reader / "hf/mlm/config.json").write_text("{}")

    expected = ["README.md", "megamlm/__init__.py", "megamlm/new_module.py", "staged.py"]
    assert sorted(map(str, DOCS_TEST.repository_files(repo))) == expected
    root = DOCS_TEST.sandbox(tmp_path / "sandbox", reader, repo=repo)
    copied = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert copied == sorted([*expected, "hf/mlm/config.json"])
    assert not (root / "ckpt").exists() and not (root / "examples").exists()

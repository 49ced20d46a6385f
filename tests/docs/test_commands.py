"""Every command in the documentation runs as written: README.md, examples/**/*.md and megamlm/**/README.md.

What is a command
  - every line of a fenced code block labelled ``bash``, ``sh``, ``shell`` or ``console`` (a trailing ``\\``
    continues the line, ``#`` starts a comment, ``&&`` chains commands that are checked in turn); blocks with
    another label (``text``, ``yaml``, ...) are not commands, and an unlabelled block, or a command indented as
    a Markdown code block, fails this test: label it;
  - an inline code span that runs a program with arguments: ``pip install X``, or python / torchrun / bash /
    sbatch / srun / mpirun followed by a script (``*.py``, ``*.sh``, ``*.sbatch``) or ``-m MODULE`` and at least
    one more argument, or such a script run directly with arguments. Names of launchers or scripts without
    arguments (``srun torchrun``, ``python pretrain.py``) are prose, not commands.

How each is checked (the first rule that applies)
  1. ``pip install ...``: pip's own offline dry run (``--dry-run --no-index --no-build-isolation``): pip parses
     the line, the local project's metadata builds, every extra named exists and every requirement resolves
     against the installed packages. Nothing is installed. A named package that is not installed here (an
     optional one, in an environment made by the README's commands) must be one the project declares (an
     extra's requirement, or a pin of .ci/run) and is left out of the dry run.
  2. ``python -m pytest ...``: the suite cannot run inside itself; pytest starts as written with
     ``PYTEST_ADDOPTS="--collect-only -q <one test file>"``: its options, the ``-m`` expression and the markers
     work and select tests there.
  3. ``sbatch [options] SCRIPT ARGS`` (needs SLURM and GPU nodes): the script is valid bash, prints its launch
     command with ``PRINT_CMD=1`` (its documented switch) under the environment sbatch would give it (nodes, GPUs
     and CPUs per node from the command's options, else the script's #SBATCH lines), and the printed
     ``pretrain.py`` flags plan a valid layout with ``--dry-run --world-size NODES x RANKS``. The README's SLURM
     and mpirun commands also run as written on a real one-node SLURM in CI's HPC stage (tests/hpc/).
  4. More processes than CI runs (torchrun, run_local.sh or run_mpirun.sh with more than 4 processes, hosts
     of an MPI job), or any MPI command (Open MPI may be missing here; CI's HPC stage runs the README's as
     written, see rule 3): the script prints its command with
     ``PRINT_CMD=1`` where it has one, and the ``pretrain.py`` flags plan a valid layout with
     ``--dry-run --world-size N``.
  5. Files only the reader has (absolute paths such as /data/... or /models/...: their corpus, a Hugging Face
     model), a GPU (``--device cuda`` where torch sees none) or the network (``tools/fetch_eval_datasets.py``):
     the arguments are parsed (and validated) by the program's own parser.
  6. Commands whose local evaluation tasks read ``../shared/data`` (``tools/evaluate.py``) run where that folder
     exists and are parsed (rule 5) where it does not.
  6b. A study run (``tools/plan_study.py ... --run``: every run of a study, an hour or more) is planned: the same
     command without ``--run`` runs and must exit 0 (the study file loads and expands into a plan); the slow test
     ``tests/e2e/test_study_miniature.py`` runs the miniature. A ``submit.sh`` written by ``--emit slurm`` (needs
     SLURM) must be valid bash (``bash -n``). A study report (``tools/study_report.py STUDY``) reports the runs
     of that study run, which the copy does not have: it runs with ``--output`` in a scratch folder (written
     where the study file says, it would refuse to replace the committed report with an empty one).
  6c. The miniature's pilot (``tools/pilot_miniature.py``: tens of minutes of pretraining and fine-tuning per
     candidate) is parsed by its own parser; ``tests/unit/study/test_pilot.py`` runs it end to end at a tiny scale.
  7. Everything else runs as written, in a copy of the repository, and must exit 0 (a pretrain.py command's
     flags are also parsed as documented, since the scaling below overrides a few of them). A ``...`` in a
     command stands for "your other flags": the words before it are checked, by the rule that applies to them.

Scaled down, never edited
  Commands run with the environment variables the README's "Tests" section documents, which every run of these
  programs honours: ``MEGAMLM_PRETRAIN_ARGS`` (every pretrain.py launch, torchrun's ranks included),
  and ``MEGAMLM_EVALUATE_ARGS``; their flags come after the command's own. A recipe in phases (``--config`` with
  ``phases:``) keeps its phases' sequence lengths: its ``MEGAMLM_PRETRAIN_ARGS`` is ``RECIPE_SCALE``, the run's
  length alone, which its phases' fractions scale with.

The reader's files
  Commands of one document run in order in one copy of the repository (so README's ``ckpt/tiny`` feeds its
  ``convert_to_hf.py`` commands). The copy is what a fresh clone holds, git's tracked files (and new source files
  not yet added: ``SOURCE_FOLDERS``), never what a user keeps in the clone (the README's recipes write ``ckpt/``,
  ``hf/``, ``evals/``: tests/docs/test_install.py).
  Beside them it holds what a reader is assumed to have: ``corpus.jsonl`` (300 Austen paragraphs) and
  ``tokenizer.json`` (the bundled tokenizer) for the preprocessing example, ``hf/mlm`` and ``hf/clm`` (exports of a
  tiny random model) for the evaluation example, and ``../shared`` when the project's shared assets exist.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from forked_python import run_python

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
DOCS = sorted({REPO / "README.md", *REPO.glob("examples/**/*.md"), *REPO.glob("megamlm/**/README.md")})
COMMAND_LABELS = {"bash", "sh", "shell", "console"}
PROGRAMS = {"python", "python3", "torchrun", "bash", "sbatch", "srun", "mpirun"}
SCRIPT = re.compile(r"\.(py|sh|sbatch)$")
MAX_CI_PROCESSES = 4
SCALE = {
    "MEGAMLM_PRETRAIN_ARGS": "--train-iters 4 --seq-length 32 --log-interval 1",
    "MEGAMLM_EVALUATE_ARGS": "--lrs 1e-4 --seeds 0 --max-steps 2 --batch-size 4 --max-train-examples 16 "
                             "--max-eval-examples 8",
}
RECIPE_SCALE = "--train-iters 4 --log-interval 1"
"""A recipe in phases (a ``--config`` file with ``phases:``) fixes its phases' sequence lengths (beyond 32) and
gives their lengths as fractions of the run: it is scaled by the run's length alone."""
NEEDS_SHARED_DATA = ("tools/evaluate.py",)
NEEDS_NETWORK = ("tools/fetch_eval_datasets.py",)


@dataclass
class Command:
    doc: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}: {self.text}"


# ---- finding the commands ------------------------------------------------------------------------------------


def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(label, line number of the first content line, lines) of every fenced code block."""
    blocks, inside, label, start, lines = [], False, "", 0, []
    for number, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^\s*```(.*)$", line)
        if fence and not inside:
            inside, label, start, lines = True, fence.group(1).strip(), number + 1, []
        elif fence and inside:
            blocks.append((label, start, lines))
            inside = False
        elif inside:
            lines.append(line)
    return blocks


def logical_lines(lines: list[str], first: int) -> list[tuple[int, str]]:
    out, pending, start = [], "", first
    for offset, line in enumerate(lines):
        if not pending:
            start = first + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return [(n, t) for n, t in out if shlex.split(t, comments=True)]


def is_inline_command(span: str) -> bool:
    try:
        words = shlex.split(span)
    except ValueError:
        return False
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    if len(words) >= 3 and words[0] == "pip" and words[1] == "install":
        return True
    if words and words[0] in PROGRAMS:
        rest = words[1:]
        for i, word in enumerate(rest):
            if SCRIPT.search(word) or (word == "-m" and i + 1 < len(rest)):
                after = rest[i + (2 if word == "-m" else 1):]
                return len(after) >= 1
            if not word.startswith("-"):
                return False
        return False
    return bool(words) and bool(SCRIPT.search(words[0])) and "/" in words[0] and len(words) >= 2


def commands_in(doc: Path) -> list[Command]:
    text = doc.read_text()
    found = []
    fenced_lines = set()
    for label, start, lines in fenced_blocks(text):
        fenced_lines.update(range(start - 1, start + len(lines) + 1))
        if label in COMMAND_LABELS:
            found += [Command(doc, n, t) for n, t in logical_lines(lines, start)]
    for number, line in enumerate(text.splitlines(), 1):
        if number in fenced_lines:
            continue
        for span in re.findall(r"`([^`]+)`", line):
            if is_inline_command(span):
                found.append(Command(doc, number, span))
    return sorted(found, key=lambda c: c.line)


def test_every_code_block_is_labelled_and_no_command_hides_in_an_indented_block():
    problems = []
    for doc in DOCS:
        text = doc.read_text()
        blocks = fenced_blocks(text)
        problems += [f"{doc.relative_to(REPO)}:{start - 1}: unlabelled code block (label it bash, text, yaml...)"
                     for label, start, _ in blocks if not label]
        fenced = {n for _, start, lines in blocks for n in range(start - 1, start + len(lines) + 1)}
        for number, line in enumerate(text.splitlines(), 1):
            if number not in fenced and re.match(r"^ {4,}(python3?|torchrun|pip|bash|sbatch|srun|mpirun|examples/)\b",
                                                 line):
                problems.append(f"{doc.relative_to(REPO)}:{number}: a command in an indented block: fence it")
    assert problems == []


def test_the_readme_documents_the_variables_this_test_scales_with():
    readme = (REPO / "README.md").read_text()
    for variable in SCALE:
        assert f"`{variable}`" in readme
    assert f"`{SCALE['MEGAMLM_PRETRAIN_ARGS']}`" in readme
    assert f"`{RECIPE_SCALE}`" in readme


def test_the_rules_find_the_commands_they_should():
    assert is_inline_command("pip install torch==2.13.0")
    assert is_inline_command('python -m pytest -m "not slow" -q')
    assert is_inline_command("PRINT_CMD=1 bash examples/slurm/pretrain_nvidia.sbatch ...")
    assert is_inline_command("examples/run_local.sh --model tiny")
    for prose in ("srun torchrun", "torchrun --standalone", "python pretrain.py", "examples/run_local.sh",
                  "--dry-run --world-size 64", "pretrain.py", "scontrol requeue $SLURM_JOB_ID"):
        assert not is_inline_command(prose), prose
    readme = {c.text.split("#")[0].strip() for c in commands_in(REPO / "README.md")}
    assert "python pretrain.py --dry-run --world-size 64 --tp 2 --pp 4 --model 610m" in readme
    assert "pip install -e . && python pretrain.py --objective clm_then_mlm --switch 0.25" in readme


def test_a_command_that_fails_as_written_fails_the_check(tmp_path, cache_dir):
    env = environment(cache_dir)
    for text in ("python pretrain.py --train-iters 0", "python pretrain.py --objective bert",
                 "pip install -e '.[no-such-extra]'", "python tools/plan_study.py examples/studies/no_such_study.yaml",
                 "sbatch --nodes 2 examples/slurm/pretrain_nvidia.sbatch --model 610m --tp 4 --num-attention-heads 18"):
        with pytest.raises(AssertionError):
            check(Command(REPO / "README.md", 1, text), REPO, env)


# ---- the copy of the repository the commands run in -----------------------------------------------------------


SOURCE_FOLDERS = ("megamlm", "tools", "tests", "examples", "csrc", "benchmarks")
SOURCE_SUFFIXES = {".py", ".sh", ".sbatch", ".md", ".yaml", ".yml", ".toml", ".cpp", ".h", ".cu"}
"""Besides git's tracked files, the copy takes the untracked (not ignored) files of these kinds in these folders:
code and documents being written that git does not know yet, part of the change under test. Nothing else a user
keeps in the clone is copied (checkpoints, exports, evaluations, anything at the top level or of another kind)."""


def repository_files(repo: Path = REPO) -> list[Path]:
    """The files a fresh clone of ``repo`` has: git's tracked files (staged ones included) and the new source files
    of ``SOURCE_FOLDERS``, never what a user keeps beside them in the clone (checkpoints, exports, evaluations), plus
    the built C++ helper. Outside a git checkout (an unpacked source archive), every file but the ones
    ``.gitignore`` names."""
    try:
        def listed(*options: str) -> list[Path]:
            names = subprocess.run(["git", "ls-files", "-z", *options], cwd=repo, capture_output=True,
                                   check=True).stdout.decode().split("\0")
            return [Path(name) for name in names if name and (repo / name).is_file()]

        new_sources = [path for path in listed("--others", "--exclude-standard", "--", *SOURCE_FOLDERS)
                       if path.suffix in SOURCE_SUFFIXES]
        files = listed("--cached") + new_sources
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked source archive)
        skip = {".git", "__pycache__", "build", ".pytest_cache", *ignored_root_folders(repo)}
        files = [p.relative_to(repo) for p in repo.rglob("*")
                 if p.is_file() and not skip & set(p.relative_to(repo).parts)]
    return files + [p.relative_to(repo) for p in (repo / "megamlm").rglob("*.so")]  # the built C++ helper


def ignored_root_folders(repo: Path) -> set[str]:
    """The top-level folders ``.gitignore`` names (``/ckpt/``, ``runs/``): the documented commands' outputs."""
    gitignore = repo / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.is_file() else []
    return {line.strip("/") for line in lines if re.fullmatch(r"/?[\w.-]+/", line.strip())}


@pytest.fixture(scope="session")
def reader_files(tmp_path_factory):
    """The files a reader of the docs is assumed to have, built once: a corpus, a tokenizer, two HF models."""
    from megamlm.data.embedded import CORPUS_FILE, TOKENIZER_FILE

    folder = tmp_path_factory.mktemp("reader-files")
    with gzip.open(CORPUS_FILE, "rt", encoding="utf-8") as f:
        (folder / "corpus.jsonl").write_text("".join(line for _, line in zip(range(300), f)))
    shutil.copy(TOKENIZER_FILE, folder / "tokenizer.json")
    if _has("transformers"):
        _tiny_hf_models(folder / "hf")
    return folder


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _tiny_hf_models(folder: Path) -> None:
    import torch
    from helpers import tiny_args

    from megamlm.checkpoint import save_checkpoint
    from megamlm.config import Config
    from megamlm.data.embedded import TOKENIZER_FILE
    from megamlm.hf.export import export_checkpoint
    from megamlm.model.transformer import Transformer

    args = tiny_args(vocab_size=8192, num_layers=1, num_attention_heads=2, max_seq_length=128)
    for name in ("mlm", "clm"):
        torch.manual_seed(len(name))
        model = Transformer(args)
        record = {"config": Config().to_dict(), "model_args": args.to_dict(), "switch_step": None,
                  "seq_length": 128, "tokenizer": {"path": str(TOKENIZER_FILE), "vocab_size": 8192, "bos_id": 0,
                                                    "eos_id": 1, "pad_id": 2, "mask_id": 3}}
        save_checkpoint(folder / f"{name}-ckpt", 1, model, torch.optim.AdamW(model.parameters()), {}, record)
        export_checkpoint(folder / f"{name}-ckpt", folder / name, log=lambda *_: None)


def sandbox(tmp_path: Path, reader_files: Path, repo: Path = REPO) -> Path:
    """A copy of ``repo`` as a fresh clone has it (``repository_files``), with the reader's files beside it."""
    root = tmp_path / "repo"
    for relative in repository_files(repo):
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / relative, target)
    for item in reader_files.iterdir():
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, root / item.name)
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED.resolve())
    return root


# ---- checking one command ---------------------------------------------------------------------------------


def environment(cache: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI_", "SLURM_", "MEGAMLM_", "PYTEST_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")}
    return {**env, **SCALE, "MEGAMLM_CACHE": cache, "OMP_NUM_THREADS": "1",
            "PATH": os.pathsep.join([python_shims(Path(cache) / "bin"), str(Path(sys.executable).parent),
                                     env.get("PATH", "")])}


def python_shims(folder: Path) -> str:
    """A folder where ``python`` and ``python3`` are the interpreter running the tests: the documents say ``python``,
    which outside an activated virtual environment may be another interpreter, or none."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):  # a script, not a symlink: a venv's interpreter finds its venv by its path
        (folder / name).write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
        (folder / name).chmod(0o755)
    return str(folder)


def split_env(words: list[str]) -> tuple[dict, list[str]]:
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, value = words[0].split("=", 1)
        env[key] = value
        words = words[1:]
    return env, words


def option(words: list[str], *names: str) -> str | None:
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def script_and_args(words: list[str]) -> tuple[str | None, list[str]]:
    """The script (or ``-m module``) a command runs, and the arguments after it."""
    for i, word in enumerate(words):
        if SCRIPT.search(word) and "=" not in word:
            return word, words[i + 1:]
    return None, []


def run(words: list[str], root: Path, env: dict, extra_env: dict | None = None, timeout: int = 900):
    if not extra_env and len(words) >= 2 and words[0] in ("python", "python3") and words[1].endswith(".py"):
        # most of the documented commands: forked from a process that imported torch and megamlm once
        return run_python(words[1:], root, env, timeout)
    return subprocess.run(["bash", "-c", shlex.join(words)], cwd=root, env={**env, **(extra_env or {})},
                          capture_output=True, text=True, timeout=timeout)


def check_ok(result, what: str) -> None:
    assert result.returncode == 0, (f"{what} exited {result.returncode}\n{result.stdout[-3000:]}\n"
                                    f"{result.stderr[-3000:]}")


def plan_layout(flags: list[str], world: int, what: str) -> None:
    """The layout of a command too large to run here, planned by --dry-run. ``--init-from PATH`` is left out: the
    README's commands name the user's own checkpoint (which --init-from reads for its shape, and which is not here),
    and they spell the shape out in flags, which the dry run plans."""
    from megamlm.cli import main

    if "--init-from" in flags:
        at = flags.index("--init-from")
        flags = flags[:at] + flags[at + 2:]
    assert main([*flags, "--dry-run", "--world-size", str(world)]) == 0, f"{what}: the layout does not plan"


def parse_only(script: str, args: list[str], what: str) -> None:
    """The program's own parser takes the arguments (and pretrain.py's validation passes)."""
    try:
        _parse(script, args)
    except SystemExit as err:  # argparse exits: 0 after --help, 2 on a bad argument
        if err.code not in (0, None):
            raise AssertionError(f"{what}: the arguments do not parse (exit {err.code})") from None
    except Exception as err:  # megamlm raises ConfigError
        raise AssertionError(f"{what}: the arguments do not parse ({type(err).__name__}: {err})") from None


def _parse(script: str, args: list[str]) -> None:
    from helpers import load_tool

    if script.endswith("pretrain.py"):
        from megamlm.config import parse_args

        parse_args(args)
        return
    module = load_tool(Path(script).stem, folder=str(Path(script).parent))
    if hasattr(module, "build_parser"):
        module.build_parser().parse_args(args)
    else:
        module.parse_args(args)


def printed_command(words: list[str], root: Path, env: dict, extra_env: dict, what: str) -> list[str]:
    result = run(words, root, env, {**extra_env, "PRINT_CMD": "1"}, timeout=120)
    check_ok(result, f"{what} (PRINT_CMD=1)")
    return shlex.split(result.stdout)


def check(command: Command, root: Path, env: dict) -> str:
    """Check one logical line; returns how it was checked (for the test's report)."""
    words = shlex.split(command.text, comments=True)
    parts, part = [], []
    for word in words:
        if word == "&&":
            parts.append(part)
            part = []
        else:
            part.append(word)
    parts.append(part)
    return "; ".join(check_dry_once(part, command, root, env) for part in parts)


# pip's dry runs and pytest's collections change nothing and depend only on the repository (the same in every
# copy): one that several documents (or one twice) show is checked once per session.
_DRY_CHECKED: dict[tuple[str, ...], str] = {}


def check_dry_once(words: list[str], command: Command, root: Path, env: dict) -> str:
    _, program_words = split_env(words)
    dry = program_words[:1] == ["pip"] or program_words[1:3] == ["-m", "pytest"]
    if not dry:
        return check_part(words, command, root, env)
    key = tuple(words)
    if key not in _DRY_CHECKED:
        _DRY_CHECKED[key] = check_part(words, command, root, env)
    else:
        return _DRY_CHECKED[key] + " (checked above)"
    return _DRY_CHECKED[key]


PIP_OPTIONS_WITH_VALUES = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c", "--constraint"}


def split_pip_requirements(args: list[str], root: Path) -> tuple[list[str], list[str]]:
    """(the arguments pip's offline dry run can resolve here, the named packages it cannot because they are not
    installed). A fresh environment made by the README's commands has none of the optional packages (torchao,
    gguf, ...): each such name must be one the project declares (a requirement of an extra of the installed
    megamlm, or a pin of .ci/run), and is left out of the dry run instead of failing it."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    declared = {canonicalize_name(Requirement(r).name) for r in metadata.requires("megamlm") or []}
    declared |= {canonicalize_name(n) for n in re.findall(r"pip install [^\n]*?([A-Za-z0-9_.-]+)==", (
        root / ".ci" / "run").read_text())}
    kept, missing, value_of_option = [], [], False
    for arg in args:
        if value_of_option or arg.startswith(("-", ".", "/")) or "[" in arg:
            kept.append(arg)
            value_of_option = arg in PIP_OPTIONS_WITH_VALUES
            continue
        requirement = Requirement(arg)
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed is not None and requirement.specifier.contains(installed, prereleases=True):
            kept.append(arg)
            continue
        assert canonicalize_name(requirement.name) in declared, (
            f"pip install {arg}: a package the project does not declare (no extra requires it, .ci/run pins it not)")
        missing.append(arg)
    return kept, missing


def check_part(words: list[str], command: Command, root: Path, env: dict) -> str:
    what = str(command)
    if "..." in words:
        words = words[:words.index("...")]
    extra_env, words = split_env(words)
    program = words[0]
    script, args = script_and_args(words)

    if program == "pip":  # rule 1
        kept, declared = split_pip_requirements(words[2:], root)
        if not any(not w.startswith("-") for w in kept):
            return f"declared optional package ({', '.join(declared)}; not installed here)"
        result = run(["pip", words[1], "--dry-run", "--no-index", "--no-build-isolation", *kept], root, env)
        check_ok(result, what)
        assert "does not provide the extra" not in result.stdout + result.stderr, what
        return "pip dry run" + (f" (declared, not installed here: {', '.join(declared)})" if declared else "")
    if words[1:3] == ["-m", "pytest"]:  # rule 2
        addopts = "--collect-only -q tests/distributed/test_launch_scripts.py"
        result = run(words, root, env, {**extra_env, "PYTEST_ADDOPTS": addopts})
        check_ok(result, what)  # exit code 5 would mean the -m expression selected nothing
        return "pytest collection"
    if program == "sbatch":  # rule 3
        script_path = root / script
        check_ok(run(["bash", "-n", str(script_path)], root, env), f"{what} (bash -n)")
        options = words[:words.index(script)]
        nodes = sbatch_value(options, script_path, "--nodes", "-N") or "1"
        allocation = {"SLURM_NNODES": nodes, "SLURM_JOB_ID": "1", "SLURM_SUBMIT_DIR": str(root)}
        gpus = sbatch_value(options, script_path, "--gpus-per-node")
        if gpus and gpus != "0":
            allocation["SLURM_GPUS_ON_NODE"] = gpus
        cpus = sbatch_value(options, script_path, "--cpus-per-task", "-c")
        if cpus:
            allocation["SLURM_CPUS_ON_NODE"] = cpus
        printed = printed_command(["bash", script, *args], root, env, {**extra_env, **allocation}, what)
        world = int(option(printed, "--nnodes")) * int(option(printed, "--nproc-per-node"))
        plan_layout(pretrain_flags(printed), world, what)
        return f"PRINT_CMD + dry run at world {world}"
    processes = launch_processes(words, extra_env)
    mpi = program == "mpirun" or (script or "").endswith("run_mpirun.sh")
    if processes > MAX_CI_PROCESSES or extra_env.get("HOSTS") or mpi:  # rule 4
        if script and script.endswith(".sh"):
            printed = printed_command(words, root, env, extra_env, what)
            plan_layout(pretrain_flags(printed), processes, what)
        else:
            plan_layout(args, processes, what)
        return f"dry run at world {processes}"
    paths = [piece.split("=", 1)[-1] for a in args for piece in a.split(",")]  # NAME=PATH lists too
    user_files = any(p.startswith("/") and not p.startswith(("/tmp/", str(root))) for p in paths)
    if script == "tools/plan_study.py" and "--run" in args:  # rule 6b
        result = run([*words[:words.index(script) + 1], *(a for a in args if a != "--run")], root, env)
        check_ok(result, f"{what} (planned, without --run)")
        return "planned"
    if script == "tools/study_report.py" and "--output" not in args:  # rule 6b
        result = run([*words, "--output", str(root / "scratch" / "study_report" / "REPORT.md")], root, env)
        check_ok(result, f"{what} (--output in a scratch folder)")
        return "ran with --output elsewhere"
    if script == "tools/pilot_miniature.py":  # rule 6c
        parse_only(script, args, what)
        return "parsed (a pilot trains for tens of minutes)"
    if words[0] == "bash" and script and script.endswith("submit.sh"):
        check_ok(run(["bash", "-n", script], root, env), f"{what} (bash -n)")
        return "bash -n"
    needs_shared = script in NEEDS_SHARED_DATA and not (root.parent / "shared" / "data").is_dir()
    needs_gpu = option(args, "--device") == "cuda" and not torch.cuda.is_available()
    if user_files or needs_shared or needs_gpu or script in NEEDS_NETWORK:  # rules 5 and 6
        parse_only(script, args, what)
        return "parsed"
    if script and script.endswith(("pretrain.py", "run_local.sh")):  # the documented values of the scaled flags
        with contextlib.chdir(root):  # where the command runs: a recipe's phases name their data relative to it
            parse_only("pretrain.py", args, what)
    if script == "pretrain.py" and is_phases_recipe(root, option(args, "--config")):
        env = {**env, "MEGAMLM_PRETRAIN_ARGS": RECIPE_SCALE}
    result = run([*(f"{k}={v}" for k, v in extra_env.items()), *words], root, env)  # rule 7
    check_ok(result, what)
    return "ran"


def is_phases_recipe(root: Path, config: str | None) -> bool:
    """Whether a --config file is a recipe in phases (``RECIPE_SCALE`` scales it)."""
    if config is None or not (root / config).is_file():
        return False
    import yaml

    return bool((yaml.safe_load((root / config).read_text()) or {}).get("phases"))


def sbatch_value(options: list[str], script: Path, *names: str) -> str | None:
    """An sbatch option as the job sees it: given on the command line, else on the script's #SBATCH line."""
    given = option(options, *names)
    if given is not None:
        return given
    directives = [line.split(None, 1)[1] for line in script.read_text().splitlines() if line.startswith("#SBATCH ")]
    return option([word for d in directives for word in d.split()], *names)


def launch_processes(words: list[str], extra_env: dict) -> int:
    if words[0] == "torchrun":
        return int(option(words, "--nproc-per-node", "--nproc_per_node") or 1) * int(option(words, "--nnodes") or 1)
    if words[0].endswith("run_local.sh"):
        return int(extra_env.get("NPROC", 2))
    if words[0].endswith("run_mpirun.sh") or (words[0] == "bash" and words[1:2] and words[1].endswith("run_mpirun.sh")):
        return int(extra_env.get("NP", 2))
    return 1


def pretrain_flags(cmd: list[str]) -> list[str]:
    return cmd[next(i for i, a in enumerate(cmd) if a.endswith("pretrain.py")) + 1:]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_of_the_document_works_as_written(doc, tmp_path, reader_files, cache_dir):
    commands = commands_in(doc)
    if not commands:
        return
    root = sandbox(tmp_path, reader_files)
    env = environment(cache_dir)
    for command in commands:
        start = time.perf_counter()
        how = check(command, root, env)
        print(f"{command} -> {how} ({time.perf_counter() - start:.0f} s)")
    if doc.name == "README.md" and doc.parent.name == "austen":  # the document says training is deterministic
        assert (root / "megamlm/assets/austen/tokenizer.json").read_bytes() == \
            (REPO / "megamlm/assets/austen/tokenizer.json").read_bytes()

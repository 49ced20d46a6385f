"""Issue 23's acceptance: after the Quickstart's `pip install -e .` (no extras), a short `pretrain.py --save` run,
`tools/convert_to_hf.py` on it and `tools/evaluate.py` on the export with a local task all exit 0.

Building a truly fresh virtual environment needs an index to install torch and the core dependencies from, and
tests never reach the network. So this test proves the same property another way: a fresh venv made with
`--system-site-packages` (the core dependencies come from this machine's site-packages), megamlm installed into it
with `pip install --no-index --no-build-isolation -e .` from a copy of the repository (pip checks that every core
dependency is satisfied, and fails without an index if one is not), and every optional package of
megamlm/extras.py hidden in each command by tests/hide_extras.py, as if no extra had ever been installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _copy_repository(target: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


@pytest.mark.slow
def test_quickstart_install_trains_exports_and_evaluates_without_any_extra(tmp_path):
    repo, venv, work = tmp_path / "repo", tmp_path / "venv", tmp_path / "work"
    _copy_repository(repo)
    work.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MEGAMLM_PRETRAIN_ARGS",
                                                            "MEGAMLM_EVALUATE_ARGS")}
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", "-e",
                              str(repo)], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run([python, "-c", "import megamlm; print(megamlm.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(repo), where

    def hidden(*argv, timeout=900):
        done = subprocess.run([python, str(repo / "tests" / "hide_extras.py"), "all", *map(str, argv)], cwd=work,
                              env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-3000:])
        return done

    hidden(repo / "pretrain.py", "--train-iters", "4", "--seq-length", "32", "--log-interval", "1",
           "--save", "ckpt")
    hidden(repo / "tools" / "convert_to_hf.py", "--input", "ckpt", "--output", "hf")
    task = work / "reviews"
    task.mkdir()
    rows = "\n".join(json.dumps({"text": t, "label": label}) for t, label in
                     [("she said it was good", "pos"), ("he was not good", "neg")] * 2)
    for split in ("train", "validation", "test"):
        (task / f"{split}.jsonl").write_text(rows + "\n")
    hidden(repo / "tools" / "evaluate.py", "--model", "tiny=hf", "--tasks", f"sequence_classification:{task}",
           "--output", "eval", "--lrs", "1e-3", "--seeds", "0", "--max-steps", "1", "--batch-size", "2")
    assert list((work / "eval" / "runs").rglob("*.json"))

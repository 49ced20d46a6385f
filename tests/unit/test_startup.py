"""Issue 31, item 10: ``pretrain.py --help`` and a flag error answer without importing torch or transformers (they
take seconds), and a misspelt flag is an error on every command line (no argparse prefix matching)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "numpy")


def _pretrain(*flags: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run pretrain.py with ``-X importtime``: the result and every module the process imported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MEGAMLM_PRETRAIN_ARGS", None)
    done = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "pretrain.py"), *flags], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    modules = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, modules


@pytest.mark.parametrize("flags, code", [(["--help"], 0), (["--bogus"], 2), (["--train-iters", "x"], 2)])
def test_help_and_a_flag_error_import_neither_torch_nor_transformers(flags, code):
    done, modules = _pretrain(*flags)
    assert done.returncode == code, done.stderr[-2000:]
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == [], heavy[:10]
    assert "megamlm.config.flags" in modules  # the parser did run
    if code == 2:
        errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
        assert len(errors) == 1 and errors[0].startswith("error: ") and "see pretrain.py --help" in errors[0], errors
    else:
        assert "--train-iters" in done.stdout


def test_a_prefix_of_a_flag_is_an_error_not_that_flag():
    from megamlm.config import ConfigError, parse_flags

    with pytest.raises(ConfigError, match="unrecognized arguments: --train-iter 5"):
        parse_flags(["--train-iter", "5"])


PARSERS = ("ArgumentParser", "_Parser", "add_parser")
"""The calls that make a command-line parser (pretrain.py's ``_Parser`` is an ArgumentParser)."""


def _parser_calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in PARSERS:
                yield node


def test_no_command_line_takes_a_prefix_of_a_flag():
    files = [p for folder in ("megamlm", "tools", "benchmarks", "examples") for p in (ROOT / folder).rglob("*.py")]
    calls = [(path, call) for path in files for call in _parser_calls(path)]
    assert len(calls) > 15
    takes_prefixes = [f"{path.relative_to(ROOT)}:{call.lineno}" for path, call in calls
                      if not any(k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant)
                                 and k.value.value is False for k in call.keywords)]
    assert takes_prefixes == []

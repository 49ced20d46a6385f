"""Rules of the code base that a reader should not have to re-check by hand, read from megamlm/'s syntax trees:

- every user error about a run's settings (ConfigError) is raised by the configuration's checks (megamlm/config/)
  or by the start-up check phase (megamlm/training/startup.py), so that all of them come before any work;
- no function takes more than 8 parameters (a parameter object says more than a long list).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "megamlm"
MAX_PARAMETERS = 8
CONFIG_ERROR_HOMES = ("config/", "training/startup.py")
"""Where ConfigError may be raised, relative to megamlm/."""
ENTRY_POINTS: frozenset[str] = frozenset()
"""``module:function`` of entry points whose keyword-only options do not count (none needs it yet)."""
# The receiver of a method, and autograd's context of a torch.autograd.Function, are not arguments a caller passes.
_RECEIVERS = ("self", "cls", "ctx")


def _is_triton_kernel(node: ast.FunctionDef) -> bool:
    # A @triton.jit kernel's parameters are its launch ABI (pointers, strides, block sizes), not an interface.
    return any(ast.unparse(d).split("(")[0] in ("triton.jit", "jit") for d in node.decorator_list)


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef, entry_point: bool = False) -> int:
    a = node.args
    positional = [p.arg for p in a.posonlyargs + a.args]
    if positional[:1] and positional[0] in _RECEIVERS:
        positional = positional[1:]
    keyword = 0 if entry_point else len(a.kwonlyargs)
    return len(positional) + keyword + (a.vararg is not None) + (a.kwarg is not None)


def long_signatures(tree: ast.AST, module: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_triton_kernel(node):
            count = parameter_count(node, f"{module}:{node.name}" in ENTRY_POINTS)
            if count > MAX_PARAMETERS:
                found.append(f"{module}:{node.lineno} {node.name} takes {count} parameters")
    return found


def config_error_raises(tree: ast.AST, module: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = raised.attr if isinstance(raised, ast.Attribute) else getattr(raised, "id", None)
            if name == "ConfigError":
                found.append(f"{module}:{node.lineno}")
    return found


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        yield module, ast.parse(path.read_text(), filename=str(path))


def test_config_errors_are_raised_by_the_checks_only():
    outside = [where for module, tree in _modules() if not module.startswith(CONFIG_ERROR_HOMES)
               for where in config_error_raises(tree, module)]
    assert not outside, ("ConfigError raised outside the configuration's checks and the start-up check phase "
                         f"(move the check to megamlm/config/ or megamlm/training/startup.py): {outside}")


def test_no_function_takes_more_than_eight_parameters():
    found = [line for module, tree in _modules() for line in long_signatures(tree, module)]
    assert not found, f"pass a parameter object instead of a long list: {found}"


@pytest.mark.parametrize("source,flagged", [
    ("def f(a, b, c, d, e, f, g, h): pass", False),
    ("def f(a, b, c, d, e, f, g, h, i): pass", True),
    ("def f(a, b, c, d, e, f, g, h, *, i): pass", True),
    ("class A:\n    def f(self, a, b, c, d, e, f, g, h): pass", False),
    ("@triton.jit\ndef k(a, b, c, d, e, f, g, h, i): pass", False),
])
def test_the_parameter_rule_counts_what_a_caller_passes(source, flagged):
    assert bool(long_signatures(ast.parse(source), "m")) == flagged


def test_the_config_error_rule_finds_each_way_of_raising_it():
    source = "raise ConfigError('x')\nraise config.ConfigError('y')\nraise ConfigError\nraise ValueError('z')"
    assert config_error_raises(ast.parse(source), "m") == ["m:1", "m:2", "m:3"]

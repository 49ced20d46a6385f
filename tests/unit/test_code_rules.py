"""Rules of the code base that a reader should not have to re-check by hand, read from megamlm/'s syntax trees:

- every user error about a run's settings (ConfigError, LayoutError) is raised by the configuration's checks
  (megamlm/config/) or by the start-up check phase (megamlm/training/startup.py), so that all of them come before
  any work;
- no function takes more than 8 parameters (a parameter object says more than a long list);
- no compatibility re-exports: a module imports from megamlm only what it uses (a package's ``__init__.py``, its
  face, aside), so every name is imported from the module that defines it;
- few long functions and long files (issue 55): at most ``MAX_LONG_FUNCTIONS`` functions over ``LONG_FUNCTION``
  lines and ``MAX_LONG_FILES`` files over ``LONG_FILE`` lines; a new one means splitting another into named steps.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "megamlm"
MAX_PARAMETERS = 8
CONFIG_ERROR_HOMES = ("config/", "training/startup.py")
"""Where the ``SETTINGS_ERRORS`` may be raised, relative to megamlm/."""
SETTINGS_ERRORS = ("ConfigError", "LayoutError")
"""The errors about a run's settings (megamlm/errors.py)."""
LONG_FUNCTION, MAX_LONG_FUNCTIONS = 60, 4
"""A function longer than this many lines (``def`` to its last line), and how many such megamlm/ may have."""
LONG_FILE, MAX_LONG_FILES = 400, 2
"""A file longer than this many lines, and how many such megamlm/ may have."""
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


def long_functions(tree: ast.AST, module: str) -> list[str]:
    return [f"{module}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > LONG_FUNCTION]


def config_error_raises(tree: ast.AST, module: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = raised.attr if isinstance(raised, ast.Attribute) else getattr(raised, "id", None)
            if name in SETTINGS_ERRORS:
                found.append(f"{module}:{node.lineno}")
    return found


def reexports(source: str, module: str) -> list[str]:
    """Imports from megamlm that a module keeps although it does not use them (``# noqa: F401``, which silences
    ruff's unused-import check): a name offered from somewhere other than where it is defined."""
    if module.endswith("__init__.py"):
        return []
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("megamlm")):
            text = "\n".join(lines[node.lineno - 1:node.end_lineno])
            if "noqa" in text and "F401" in text:
                found.append(f"{module}:{node.lineno}")
    return found


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        yield module, ast.parse(path.read_text(), filename=str(path))


def test_config_errors_are_raised_by_the_checks_only():
    outside = [where for module, tree in _modules() if not module.startswith(CONFIG_ERROR_HOMES)
               for where in config_error_raises(tree, module)]
    assert not outside, (f"{' or '.join(SETTINGS_ERRORS)} raised outside the configuration's checks and the "
                         "start-up check phase (move the check to megamlm/config/ or megamlm/training/startup.py): "
                         f"{outside}")


def test_no_module_re_exports_names_from_another():
    found = [where for path in sorted(PACKAGE.rglob("*.py"))
             for where in reexports(path.read_text(), path.relative_to(PACKAGE).as_posix())]
    assert not found, f"import these names from the module that defines them, and drop the re-export: {found}"


def test_the_re_export_rule_finds_kept_unused_imports():
    source = ("from megamlm.a import (  # noqa: F401 (re-exported)\n    x,\n)\nfrom megamlm.b import y\n"
              "import matplotlib  # noqa: F401\nfrom .c import z  # noqa: F401\n")
    assert reexports(source, "m.py") == ["m.py:1", "m.py:6"]
    assert reexports(source, "pkg/__init__.py") == []


def test_no_function_takes_more_than_eight_parameters():
    found = [line for module, tree in _modules() for line in long_signatures(tree, module)]
    assert not found, f"pass a parameter object instead of a long list: {found}"


def test_few_functions_are_long():
    found = [line for module, tree in _modules() for line in long_functions(tree, module)]
    assert len(found) <= MAX_LONG_FUNCTIONS, (f"{len(found)} functions over {LONG_FUNCTION} lines (at most "
                                              f"{MAX_LONG_FUNCTIONS}): split one into named steps: {found}")


def test_few_files_are_long():
    found = [f"{path.relative_to(PACKAGE).as_posix()} ({n} lines)" for path in sorted(PACKAGE.rglob("*.py"))
             if (n := len(path.read_text().splitlines())) > LONG_FILE]
    assert len(found) <= MAX_LONG_FILES, (f"{len(found)} files over {LONG_FILE} lines (at most {MAX_LONG_FILES}): "
                                          f"move a cohesive piece of one into its own module: {found}")


def test_the_long_function_rule_counts_from_def_to_last_line():
    body = "".join(f"    x{i} = {i}\n" for i in range(LONG_FUNCTION - 1))
    assert long_functions(ast.parse(f"def f():\n{body}"), "m") == []
    assert long_functions(ast.parse(f"def f():\n{body}    y = 0\n"), "m") == [f"m:1 f ({LONG_FUNCTION + 1} lines)"]


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


def test_the_config_error_rule_covers_layout_errors():
    source = "raise LayoutError('x')\nraise errors.LayoutError('y')\nraise UserError('z')"
    assert config_error_raises(ast.parse(source), "m") == ["m:1", "m:2"]

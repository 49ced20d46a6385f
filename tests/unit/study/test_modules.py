"""The study package keeps one idea per module, and megamlm draws its figures in one module (issue 30): every
module of megamlm/study/ stays under 350 lines, and only megamlm/figures.py imports matplotlib."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_study_module_is_under_350_lines():
    long = {p.name: n for p in sorted((ROOT / "megamlm" / "study").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) >= 350}
    assert not long, f"split these study modules by idea: {long}"


def test_only_the_figure_module_imports_matplotlib():
    drawing = []
    for source in ("megamlm", "tools", "benchmarks"):
        for path in sorted((ROOT / source).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(name.split(".")[0] == "matplotlib" for name in names):
                    drawing.append(str(path.relative_to(ROOT)))
    assert set(drawing) == {"megamlm/figures.py"}, f"draw in megamlm/figures.py, not in {sorted(set(drawing))}"


PARTS = ("planning", "running", "evidence", "reporting")
"""The study package's parts, in order: each imports only the parts before it."""


def test_each_part_of_the_study_package_names_its_modules_and_imports_only_earlier_parts():
    import importlib

    study = ROOT / "megamlm" / "study"
    assert sorted(p.name for p in study.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(PARTS)
    assert sorted(p.name for p in study.glob("*.py")) == ["__init__.py"], "every study module lives in a part"
    for index, part in enumerate(PARTS):
        doc = importlib.import_module(f"megamlm.study.{part}").__doc__
        for module in sorted((study / part).glob("*.py")):
            if module.stem != "__init__":
                assert f"``{module.stem}``" in doc, f"megamlm/study/{part}/__init__.py's docstring: name {module.stem}"
            for node in ast.walk(ast.parse(module.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("megamlm.study."):
                    other = node.module.split(".")[2]
                    assert PARTS.index(other) <= index, f"{module.relative_to(ROOT)} imports the later part {other}"

"""The study package keeps one idea per module, and megamlm draws its figures in one module (issue 30): every
module of megamlm/study/ stays under 350 lines, and only megamlm/figures.py imports matplotlib."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_study_module_is_under_350_lines():
    long = {p.name: n for p in sorted((ROOT / "megamlm" / "study").glob("*.py"))
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

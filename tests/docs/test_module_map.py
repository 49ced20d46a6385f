"""README's "Where things live" is a map a newcomer can follow (issue 55, item 7): one table row per package, every
module of megamlm/ listed under its package by its idea, a "read in this order" path, and no module it names that
does not exist. A module added without its line in the map fails here."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "megamlm"


def section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("\n## Where things live")
    return text[start:text.index("\n## ", start + 1)]


def listed_modules() -> dict[str, set[str]]:
    """{package folder as the README names it (``megamlm/config/``): the module files listed under it}."""
    blocks = re.findall(r"<summary><code>(megamlm/[\w/]*)</code>.*?</summary>(.*?)</details>", section(), re.S)
    return {package: set(re.findall(r"^- `([\w.]+\.py)`: \S", body, re.M)) for package, body in blocks}


def packages() -> dict[str, set[str]]:
    """{package folder: its modules} of megamlm/, ``__init__.py`` left out (the package's row speaks for it)."""
    found = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent
        modules = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
        found[f"{folder.relative_to(REPO).as_posix()}/"] = modules
    return found


def test_every_module_is_listed_under_its_package():
    listed = listed_modules()
    missing = [f"{package}{name}" for package, names in packages().items()
               for name in sorted(names - listed.get(package, set()))]
    assert not missing, f"modules missing from README's 'Where things live' (add a line by its idea): {missing}"


def test_the_map_names_no_module_that_does_not_exist():
    actual = packages()
    stale = [f"{package}{name}" for package, names in listed_modules().items()
             for name in sorted(names - actual.get(package, set()))]
    assert not stale, f"README's map lists modules that are not there: {stale}"


def test_one_table_row_per_package_and_no_overlong_cell():
    rows = [line for line in section().splitlines() if line.startswith("| ")]
    for package in packages():
        if package != "megamlm/":
            assert any(line.startswith(f"| `{package}` |") for line in rows), f"no row for {package}"
    for line in rows:
        assert all(len(cell) <= 400 for cell in line.split("|")), f"split this row: {line[:80]}..."


def test_a_read_in_this_order_path_covers_the_first_hour():
    text = section()
    path = text[text.index("**Read in this order**"):text.index("| path | what |")]
    for part in ("*The step*", "*The recipe*", "*The start of a run*", "*The study*"):
        assert part in path
    for module in re.findall(r"`((?:megamlm/)?[\w/]+\.py)`", path):
        assert (PACKAGE / module.removeprefix("megamlm/")).is_file(), module

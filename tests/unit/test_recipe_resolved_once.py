"""The recipe is resolved once, at start-up, and handed on (issue 55 items 1-2): no module past the start resolves
it again from the config, and nothing changes the ObjectiveSchedule after it is built from it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "megamlm"
RESOLVERS = {"recipe_of", "apply_recipe", "phase_items"}
"""What resolves a recipe from a config (config/phases.py, config/recipe_settings.py)."""
START_UP = {
    "config/phases.py": "defines the resolution",
    "config/recipe_settings.py": "resolving the config writes the recipe's lengths and objectives into it",
    "config/resolve.py": "resolving the config (apply_recipe)",
    "training/resolved_run.py": "the run's one resolution, held by the ResolvedRun and handed on",
    "training/run_record.py": "the record of a plan made by hand without a recipe (a planner's, a test's)",
    "parallel/dry_run.py": "a dry run's start, which builds no resolved run",
}
PLANNER = "study/planning/"
"""The study planner resolves each run it plans (it starts none of them)."""


def _uses(path: Path, names: set[str]) -> list[str]:
    """Where ``path`` imports or calls one of ``names``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and any(alias.name in names for alias in node.names):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports it")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in names:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} calls {name}")
    return found


def test_no_module_past_the_start_resolves_the_recipe_again():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in START_UP or relative.startswith(PLANNER):
            continue
        offenders += _uses(path, RESOLVERS)
    assert not offenders, ("the recipe is resolved once at start-up (ResolvedRun.recipe) and passed in; "
                           f"read it there instead: {offenders}")


def test_the_learning_rate_pieces_come_from_the_resolved_recipe_in_the_run():
    """``Segment.of_config`` resolves the recipe itself only for planners and scripts; the run passes its own."""
    source = (PACKAGE / "training" / "resolved_run.py").read_text()
    assert "Segment.of_config(cfg, recipe)" in source


def test_the_objective_schedule_is_not_changed_after_it_is_built():
    setters = {"set_phase_maskings", "set_masking"}
    offenders = [use for path in sorted(PACKAGE.rglob("*.py")) for use in _uses(path, setters)]
    assert not offenders
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    assert not (isinstance(target, ast.Attribute) and target.attr == "maskings"
                                and path.name != "schedule.py"), f"{path}:{node.lineno} changes a schedule's maskings"


def test_the_rule_finds_a_resolution_past_the_start(tmp_path):
    sample = tmp_path / "trainer.py"
    sample.write_text("from megamlm.config.phases import recipe_of\n\ndef f(cfg):\n    return recipe_of(cfg)\n")
    found = [line.split(":", 1)[1] for line in _uses_outside(sample)]
    assert found == ["1 imports it", "4 calls recipe_of"]


def _uses_outside(path: Path) -> list[str]:
    global PACKAGE
    saved, PACKAGE = PACKAGE, path.parent
    try:
        return _uses(path, RESOLVERS)
    finally:
        PACKAGE = saved

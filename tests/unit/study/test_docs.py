"""examples/studies/README.md prints the plan of paper_610m.yaml and the study keys; both are regenerated here and
compared, so the document cannot drift from the code."""

import contextlib
import io
import re
import runpy
from pathlib import Path

from megamlm.study.planning.load import load_study
from megamlm.study.planning.plan import build_plan
from megamlm.study.planning.schema import key_reference
from megamlm.study.running.commands import all_evaluated_models

REPO = Path(__file__).resolve().parents[3]
README = REPO / "examples" / "studies" / "README.md"
STUDY = REPO / "examples" / "studies" / "cpu_miniature.yaml"
REGENERATE = "rerun the command named above the block and paste its output between the markers"


def block(name: str) -> str:
    match = re.search(rf"<!-- BEGIN {re.escape(name)} -->\n(.*?)\n<!-- END {re.escape(name)} -->", README.read_text(),
                      re.S)
    assert match, f"no {name} block in {README}"
    return match.group(1)


def test_the_printed_plan_is_the_planners_output(monkeypatch):
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module = runpy.run_path(str(REPO / "tools" / "plan_study.py"), run_name="plan_study")
        assert module["main"](["examples/studies/paper_610m.yaml"]) == 0
    assert block("plan_study paper_610m") == out.getvalue().rstrip(), REGENERATE
    assert "| saved | 174,000 | 410.5B | 1,201.2 (30%) |" in out.getvalue()


def test_the_key_reference_is_the_schemas():
    assert block("study keys") == key_reference().rstrip(), REGENERATE


def planned(study: str, monkeypatch) -> str:
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module = runpy.run_path(str(REPO / "tools" / "plan_study.py"), run_name="plan_study")
        assert module["main"]([f"examples/studies/{study}.yaml"]) == 0
    return out.getvalue()


def test_the_paper_study_files_mark_which_runs_are_the_papers(monkeypatch):
    """210m and 1b: the paper trained CLM and MLM at four mask ratios (42k steps), the rest extends it; 610m: all."""
    for size in ("210m", "1b"):
        table = planned(f"paper_{size}", monkeypatch)
        assert "5 of the 24 runs reproduce models the paper trained" in table and "19 extend it" in table
        papers = re.findall(rf"^\| ({size}-\S+) \| yes \|", table, re.M)
        assert sorted(papers) == sorted(f"{size}-{label}" for label in (
            "clm42k-m40", "mlm42k-m20", "mlm42k-m30", "mlm42k-m40", "mlm42k-m50"))
        header = (REPO / "examples" / "studies" / f"paper_{size}.yaml").read_text().split("\nname:")[0]
        assert "5 are models the paper trained" in header and "the paper's grid" not in header
    assert "All 24 runs reproduce models the paper trained" in planned("paper_610m", monkeypatch)
    assert "the paper's grid" not in README.read_text()


def test_the_printed_recipes_plan_is_the_planners_output(monkeypatch):
    """The recipes study's plan in the README: its detour and MNTP arms with their phases and branch points."""
    printed = planned("recipes_2026", monkeypatch)
    assert block("plan_study recipes_2026") == printed.rstrip(), REGENERATE
    detour = "| tiny-mlm300-clm150-mlm50-m40 | tiny-mlm500-m40 @ 300 | mlm 1-300 -> clm 301-450 -> mlm 451-500 |"
    assert detour in printed


def test_the_miniatures_figures_in_its_readme_are_the_planners():
    """examples/studies/README.md's figures for the committed miniature (issue 45's design): its runs, steps, LRs
    and fine-tuning runs are what the planner makes of the study file, and the first miniature's design (three
    splits at 3 seeds, early checkpoints, 2 LRs) is what it says that one was."""
    def fine_tuning_runs(plan):
        e = plan.study.evaluation
        return len(e.tasks) * len(e.lrs) * (len(all_evaluated_models(plan)) * len(e.seeds)
                                            + len(e.random_init_seeds or e.seeds))

    text = README.read_text()
    plan = build_plan(load_study(STUDY))
    steps = sum(run.steps_trained for run in plan.runs)
    assert (len(plan.runs), steps, fine_tuning_runs(plan), plan.study.evaluation.lrs) == (
        25, 22_050, 336, [1.0e-3, 3.0e-3, 1.0e-2])
    assert "25 runs, 22,050 steps." in text and "(336 fine-tuning runs with the random-init model's)" in text
    first = ["grids=[{budgets: [1400], clm_fractions: [0, 1], mask_ratios: [0.4]}, {budgets: [1400], "
             "clm_fractions: [0.25, 0.5, 0.75], mask_ratios: [0.4], seeds: [1, 2, 3]}]",
             "evaluation.lrs=[1.0e-3, 3.0e-3]", "evaluation.checkpoint_steps=[280]"]
    before = build_plan(load_study(STUDY, first))
    assert (len(before.runs), sum(run.steps_trained for run in before.runs)) == (29, 23_100)
    assert "(issue 32's: 29 runs, 23,100 steps, 81.7 minutes)" in text

"""The committed CPU-miniature report (examples/paper_recipe/RESULTS.md, with its figures) is the real run of the
committed study file (examples/studies/cpu_miniature.yaml): not a rehearsal, every run finished, the plan the
study file makes today, the evaluation grid it asks for, the paper's figures, a verdict on each claim (a)-(e) and
a measured time within the 90 minutes the miniature promises. A study file changed without rerunning the study,
or a rehearsal's report committed in its place, fails here."""

import re
from pathlib import Path

from megamlm.study.claims import CONTRADICTED, NO_BASELINE, NO_TASK, SUPPORTED, UNDECIDED
from megamlm.study.commands import all_evaluated_models
from megamlm.study.cost import throughput_for
from megamlm.study.load import load_study
from megamlm.study.plan import build_plan
from megamlm.study.table import plan_table

REPO = Path(__file__).resolve().parents[3]
STUDY = REPO / "examples" / "studies" / "cpu_miniature.yaml"
RESULTS = REPO / "examples" / "paper_recipe" / "RESULTS.md"
VERDICTS = (SUPPORTED, CONTRADICTED, UNDECIDED, NO_BASELINE, NO_TASK)


def test_the_committed_report_is_the_real_run_of_the_committed_study():
    study = load_study(STUDY)
    plan = build_plan(study)
    report = RESULTS.read_text()
    assert report.startswith("# Study `cpu_miniature`: report\n"), "a rehearsal's report, or another study's"
    assert f"{len(plan.runs)} of {len(plan.runs)} runs have finished." in report
    assert plan_table(plan, throughput_for(study)) in report, (
        "the study file plans other runs than the report's: rerun the study (examples/studies/README.md)")

    e = study.evaluation
    assert len(e.lrs) >= 3 and len(e.seeds) >= 2 and len(study.seeds) >= 3 and len(e.tasks) == 4
    grid = len(e.lrs) * len(e.seeds)
    per_model = report.split("### Per model, one table per task family")[1].split("\n## ")[0]
    rows = [line for line in per_model.splitlines() if line.startswith("| tiny-")]
    assert len(rows) == len(e.tasks) * len(all_evaluated_models(plan))
    assert all(line.endswith(f"| {grid}/{grid} |") for line in rows)  # every LR x seed
    for family in ("sequence classification", "token classification", "question answering",
                   "information retrieval"):
        assert f"#### {family}" in report

    figures = re.findall(r"\]\(figures/([\w.]+\.png)\)", report)
    assert {"validation.png", "lr_sensitivity.png", "lr_stability.png", "continuation_gain.png",
            "score_vs_steps.png", "score_vs_clm_fraction.png"} <= set(figures)
    assert all((RESULTS.parent / "figures" / name).is_file() for name in figures)

    claims = report.split("## The paper's claims")[1].split("\n## ")[0]
    for key in "abcde":
        found = re.search(rf"^- \*\*\({key}\) [^*]+\*\*: (.+)\.$", claims, re.M)
        assert found, key
        verdict = found.group(1)
        assert verdict in VERDICTS or re.fullmatch(r"not testable with \d+ seeds?", verdict), (key, verdict)
    total = re.search(r"^\| total \| ([\d.]+) \|$", report, re.M)
    assert total and float(total.group(1)) <= 90.0

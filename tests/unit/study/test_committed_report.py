"""The committed CPU-miniature report (examples/paper_recipe/RESULTS.md, with its figures) is the real run of the
committed study file (examples/studies/cpu_miniature.yaml) under issue 45's rules: not a rehearsal, every run
finished, the plan the study file makes today, every arm at five pretraining seeds, a grid of three or more LRs with
every model's score at each printed, tasks marked informative on validation, the paper's figures, a verdict on each
claim (a)-(e) that carries its scale (tokens, size, seeds) and a measured time within the 90 minutes the miniature
promises. A study file changed without rerunning the study, or a rehearsal's report committed in its place, fails
here."""

import re
from pathlib import Path

from megamlm.eval.registry import task_display_name
from megamlm.study.evidence.claims import CONTRADICTED, NO_TASK, SUPPORTED, UNDECIDED
from megamlm.study.planning.cost import throughput_for
from megamlm.study.planning.load import load_study
from megamlm.study.planning.pilot import TARGET_GAP
from megamlm.study.planning.plan import build_plan
from megamlm.study.planning.schema import study_arms
from megamlm.study.planning.table import plan_table
from megamlm.study.running.commands import all_evaluated_models

REPO = Path(__file__).resolve().parents[3]
STUDY = REPO / "examples" / "studies" / "cpu_miniature.yaml"
RESULTS = REPO / "examples" / "paper_recipe" / "RESULTS.md"
VERDICTS = (SUPPORTED, CONTRADICTED, UNDECIDED, NO_TASK)


def test_the_committed_report_is_the_real_run_of_the_committed_study():
    study = load_study(STUDY)
    plan = build_plan(study)
    report = RESULTS.read_text()
    assert report.startswith("# Study `cpu_miniature`: report\n"), "a rehearsal's report, or another study's"
    assert f"{len(plan.runs)} of {len(plan.runs)} runs have finished." in report
    assert plan_table(plan, throughput_for(study)) in report, (
        "the study file plans other runs than the report's: rerun the study (examples/studies/README.md)")

    e = study.evaluation
    # Issue 45: five pretraining seeds for every arm (the claims' unit), a grid of 3 LRs or more (the stability
    # claim), the four families; every model's score at every LR printed.
    assert min(len(arm.seeds) for arm in study_arms(study)) >= 5 and len(e.lrs) >= 3 and len(e.tasks) == 4
    per_lr = report.split("### Scores per learning rate")[1].split("\n### ")[0].split("\n## ")[0]
    assert len([line for line in per_lr.splitlines() if line.startswith("| tiny-")]) == \
        len(e.tasks) * len(all_evaluated_models(plan))
    grid = len(e.lrs) * len(e.seeds)
    per_model = report.split("### Per model, one table per task family")[1].split("\n## ")[0].split("\n### ")[0]
    rows = [line for line in per_model.splitlines() if line.startswith("| tiny-")]
    assert len(rows) == len(e.tasks) * len(all_evaluated_models(plan))
    assert all(line.endswith(f"| {grid}/{grid} |") for line in rows)  # every LR x seed
    for family in ("sequence classification", "token classification", "question answering",
                   "information retrieval"):
        assert f"#### {family}" in report

    # Baselines beside the arms for every task: the random-init model (its own fine-tuning seeds) and at least one
    # trivial baseline computed without training.
    tasks = [task_display_name(t) for t in e.tasks]
    random_grid = len(e.lrs) * len(e.random_init_seeds or e.seeds)
    for task in tasks:
        row = rf"^\| random-init-tiny \| [a-z ]+ \| {re.escape(task)} \| .*\| {random_grid}/{random_grid} \|$"
        assert re.search(row, per_model, re.M), task
        assert re.search(rf"^\| baseline:[\w-]+ \| [a-z ]+ \| {re.escape(task)} \|", per_model, re.M), task
    # Every task marked informative or uninformative by the stated test, the uninformative ones left out of claims.
    marks = report.split("### Informative tasks")[1].split("\n## ")[0]
    found = dict(re.findall(r"^- \*\*([\w-]+)\*\*: (informative|uninformative):", marks, re.M))
    assert sorted(found) == sorted(tasks), marks
    assert all(line.split(": ", 2)[2].startswith("on validation") for line in marks.splitlines()
               if line.startswith("- **")), marks  # decided on validation, not on test
    left_out = [task for task, mark in found.items() if mark == "uninformative"]
    if left_out:
        assert f"left out of the claims: {', '.join(left_out)}." in marks
    # The MLM-only arm's final validation MLM loss at least 0.5 nats under the validation tokens' unigram entropy.
    plateau = re.search(r"unigram entropy of (\d+\.\d+) nats.*?^- `tiny-mlm[\w.]+-m40`: final validation MLM loss "
                        r"(\d+\.\d+) \(mean of \d+ seeds\), \+(\d+\.\d+) nats under the entropy: off the plateau",
                        report, re.M | re.S)
    assert plateau and float(plateau.group(3)) >= TARGET_GAP, "the MLM-only arm is on the unigram plateau"

    figures = re.findall(r"\]\(figures/([\w.]+\.png)\)", report)
    early = {"score_vs_steps.png"} if e.checkpoint_steps else set()  # claim (b)'s, where early checkpoints are asked
    assert {"validation.png", "lr_sensitivity.png", "lr_stability.png", "continuation_gain.png",
            "score_vs_clm_fraction.png", *early} <= set(figures)
    assert all((RESULTS.parent / "figures" / name).is_file() for name in figures)

    claims = report.split("## The paper's claims")[1].split("\n## ")[0]
    for key in "abcde":  # each verdict with its scale, but a claim the study does not ask
        found = re.search(rf"^- \*\*\({key}\) [^*]+\*\*: (?:(at [^:]+ tokens, [^:]+ seeds?): )?(.+)\.$", claims,
                          re.M)
        assert found, key
        scale, verdict = found.groups()
        assert scale or verdict.startswith("not asked by this study"), (key, verdict)
        assert (verdict in VERDICTS or re.fullmatch(r"not testable with \d+ seeds?", verdict)
                or verdict.startswith(("not asked by this study", "not testable (best LR at the grid's edge"))), (
            key, verdict)
    total = re.search(r"^\| total \| ([\d.]+) \|$", report, re.M)
    assert total and float(total.group(1)) <= 90.0

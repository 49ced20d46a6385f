"""The committed CPU-miniature report (examples/paper_recipe/RESULTS.md, with its figures) is the real run of the
committed study file it names (examples/studies/cpu_miniature.yaml, or the confirmatory run of
confirmatory_miniature.yaml, which also names the commit of its study file, its seeds and its verdicts under every
tie rule: issue 56) under issue 45's rules: not a rehearsal, every run
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
STUDIES = REPO / "examples" / "studies"
RESULTS = REPO / "examples" / "paper_recipe" / "RESULTS.md"
VERDICTS = (SUPPORTED, CONTRADICTED, UNDECIDED, NO_TASK)
CONFIRMATORY = "confirmatory_miniature"
"""The study whose report is a confirmatory run (issue 56): its study file, tasks, rules and tie rule committed
before it, with pretraining seeds no study file had used."""
MINUTES = {"cpu_miniature": 90.0, CONFIRMATORY: 150.0}
"""The wall time each study's README promises on 2 cores."""


def _study_name(report: str) -> str:
    found = re.match(r"# Study `(\w+)`: report\n", report)
    assert found and found.group(1) in MINUTES, "a rehearsal's report, or another study's"
    return found.group(1)


def test_the_committed_report_is_the_real_run_of_the_committed_study():
    report = RESULTS.read_text()
    name = _study_name(report)
    study = load_study(STUDIES / f"{name}.yaml")
    plan = build_plan(study)
    assert f"{len(plan.runs)} of {len(plan.runs)} runs have finished." in report
    assert plan_table(plan, throughput_for(study)) in report, (
        "the study file plans other runs than the report's: rerun the study (examples/studies/README.md)")

    e = study.evaluation
    # Issue 45: five pretraining seeds for every arm (the claims' unit), a grid of 3 LRs or more (the stability
    # claim), the four families; every model's score at every LR printed.
    assert min(len(arm.seeds) for arm in study_arms(study)) >= 5 and len(e.lrs) >= 3
    assert len(e.tasks) == 4 or name == CONFIRMATORY
    per_lr = report.split("### Scores per learning rate")[1].split("\n### ")[0].split("\n## ")[0]
    assert len([line for line in per_lr.splitlines() if line.startswith("| tiny-")]) == \
        len(e.tasks) * len(all_evaluated_models(plan))
    grid = len(e.lrs) * len(e.seeds)
    per_model = report.split("### Per model, one table per task family")[1].split("\n## ")[0].split("\n### ")[0]
    rows = [line for line in per_model.splitlines() if line.startswith("| tiny-")]
    assert len(rows) == len(e.tasks) * len(all_evaluated_models(plan))
    assert all(line.endswith(f"| {grid}/{grid} |") for line in rows)  # every LR x seed
    families = {"sequence classification"} if name == CONFIRMATORY else {
        "sequence classification", "token classification", "question answering", "information retrieval"}
    for family in families:
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
    assert all((RESULTS.parent / "figures" / figure).is_file() for figure in figures)

    claims = report.split("## The paper's claims")[1].split("\n## ")[0]
    for key in "abcde":  # each verdict with its scale, but a claim the study does not ask
        found = re.search(rf"^- \*\*\({key}\) [^*]+\*\*: (?:(at [^:]+ tokens, [^:]+ seeds?): )?(.+)\.$", claims,
                          re.M)
        assert found, key
        scale, verdict = found.groups()
        assert scale or verdict.startswith("not asked by this study"), (key, verdict)
        assert (verdict in VERDICTS or re.fullmatch(r"not testable with \d+ seeds?", verdict)
                or verdict.startswith(("not asked by this study", "not testable (best LR at the grid's edge",
                                       "**fragile**: its verdict changes with the tie rule"))), (
            key, verdict)
    total = re.search(r"^\| total \| ([\d.]+) \|$", report, re.M)
    assert total and float(total.group(1)) <= MINUTES[name]
    if name == CONFIRMATORY:
        _fixed_before_the_run(report, study)


def _fixed_before_the_run(report: str, study) -> None:
    """Issue 56: the report names the commit of its study file, which is still the file's last commit (the study
    file unchanged since the run), its seeds, and every claim's verdict under each tie rule."""
    from megamlm.eval.aggregate import TIE_RULES
    from megamlm.study.reporting.registration import file_commit

    fixed = report.split("## What was fixed before the run")[1].split("\n## ")[0]
    commit = file_commit(STUDIES / f"{CONFIRMATORY}.yaml")
    assert commit.startswith("commit ") and "uncommitted" not in commit
    assert f"Study file `{CONFIRMATORY}.yaml`: {commit}." in fixed, "the study file changed after its run"
    rules = file_commit(study.resolve(study.claims))  # the claims table: the claims, their margins and settings
    assert rules.startswith("commit ") and "uncommitted" not in rules
    assert f"Claims table `{Path(study.claims).name}`: {rules}." in fixed, "the claims table changed after the run"
    assert "Pretraining seeds: 11, 12, 13, 14, 15." in fixed and f"`{study.evaluation.tie_rule}`" in fixed
    # new seeds: no other study file beside it pretrains at any of them (the same seed, the same initial weights)
    others = [f for f in STUDIES.glob("*.yaml") if f.stem != CONFIRMATORY and "\nname:" in f.read_text()]
    assert len(others) >= 5  # the paper's, the first miniature, the pilot, ... (a recipe, wsd_trunk.yaml, is not one)
    for other in others:
        assert not {s for arm in study_arms(load_study(other)) for s in arm.seeds} & {11, 12, 13, 14, 15}, other.name
    table = report.split("Tie-rule sensitivity")[1]
    assert "| claim | " + " | ".join(TIE_RULES) + " | verdict |" in table
    for key in "acde":
        assert re.search(rf"^\| \({key}\) \|.*\| (holds|fragile) \|$", table, re.M), key

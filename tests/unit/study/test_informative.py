"""Baselines in a study: the evaluation of one run per size adds that size's random-init model, the report prints it
and the trivial baselines beside the arms, and a task no arm beats the random-init model on is marked uninformative
(one-sided Welch against the random-init model's fine-tuning seeds, Holm over the arms) and named."""

import runpy
from pathlib import Path

import pytest
from scipy import stats
from test_evidence import PAPER, STUDY, _results, write_results, write_score

from megamlm.eval.baseline_store import write_baselines
from megamlm.eval.examples import TaskData, TextExample
from megamlm.study.evidence.informative import _one_sided, claim_evidence, informative_tasks, task_evidence
from megamlm.study.reporting.report import write_report
from megamlm.study.running.commands import evaluate_command, random_init_models

REPO = Path(__file__).resolve().parents[3]


def test_one_run_per_size_evaluates_the_random_init_model(small_plan):
    plan = small_plan({**STUDY, "sizes": ["tiny", "210m"]})
    chosen = random_init_models(plan)
    assert sorted(chosen.values()) == ["random-init-210m", "random-init-tiny"]
    parser = runpy.run_path(str(REPO / "tools" / "evaluate.py"), run_name="evaluate")["build_parser"]()
    flagged = {}
    for run in plan.runs:
        args = parser.parse_args(evaluate_command(plan, run)[2:])
        if args.random_init_baseline:
            flagged[run.name] = args.random_init_baseline
    assert flagged == chosen
    assert {plan.run(name).size for name in flagged} == {"tiny", "210m"}


def test_the_one_sided_p_value_is_scipys():
    a, b = [71.0, 73.5, 72.0], [69.0, 70.5, 70.0, 72.0]
    for x, y in ((a, b), (b, a)):
        assert _one_sided(x, y) == pytest.approx(stats.ttest_ind(x, y, equal_var=False, alternative="greater").pvalue)


def _random_init(plan, task, score):
    for lr in (1e-3, 3e-3):
        for ft_seed, noise in ((0, -0.5), (1, 0.5)):
            write_score(plan, "random-init-tiny", task, lr, ft_seed, score + noise - (lr > 2e-3), score + noise)


def test_a_task_no_arm_beats_the_random_init_model_on_is_uninformative_and_named(small_plan, tmp_path):
    plan = small_plan(STUDY)
    write_results(plan, **PAPER)  # final arms score 70-85 (+- 0.5 over pretraining seeds) on both tasks
    _random_init(plan, "brown-pos", 60.0)
    _random_init(plan, "rt-sentiment", 90.0)
    evidence = task_evidence(plan, _results(plan))
    assert evidence["brown-pos"].informative and evidence["brown-pos"].reason.startswith("beats random init (")
    assert not evidence["rt-sentiment"].informative and evidence["rt-sentiment"].tested
    assert informative_tasks(plan, _results(plan)) == {"brown-pos"}

    train = [TextExample("a", "positive"), TextExample("b", "positive"), TextExample("c", "negative")]
    data = TaskData("rt-sentiment", "sequence_classification", {"train": train, "validation": train, "test": train})
    write_baselines(Path(plan.root) / "eval", "rt-sentiment", data, {"task": "rt-sentiment"})
    text = write_report(plan, tmp_path / "R.md", figures=False).read_text()
    assert "| random-init-tiny | rt-sentiment | 2 fine-tuning | 90.00 ± 6.35 | 89.50, 90.50 |" in text  # per arm
    assert "| baseline:majority | rt-sentiment | – | 66.67 (no training) | – |" in text
    per_model = text.split("### Per model, one table per task family")[1]
    assert "| random-init-tiny | sequence classification | rt-sentiment | accuracy | 0.001 |" in per_model
    assert "| baseline:majority | sequence classification | rt-sentiment | accuracy | – | 66.67 |" in per_model
    informative = text.split("### Informative tasks")[1]
    assert "- **brown-pos**: informative: beats random init (" in informative
    assert "- **rt-sentiment**: uninformative: no arm beats random init at adjusted p < 0.05" in informative
    assert "left out of the claims: rt-sentiment." in informative
    # ... and the claims are made without it: the report hands the same marks and the random-init scores to them.
    evidence = claim_evidence(plan, _results(plan))
    assert list(evidence.excluded) == ["rt-sentiment"]
    assert evidence.random_init == {"brown-pos": pytest.approx(60.0), "rt-sentiment": pytest.approx(90.0)}
    assert "Left out of every claim test: rt-sentiment (no arm beats random init at adjusted p < 0.05" in text


def test_without_a_random_init_model_no_task_is_shown_informative(small_plan, tmp_path):
    plan = small_plan(STUDY)
    write_results(plan, **PAPER)
    assert informative_tasks(plan, _results(plan)) == set()
    assert not any(e.tested for e in task_evidence(plan, _results(plan)).values())
    text = write_report(plan, tmp_path / "R.md", figures=False).read_text()
    assert "- **brown-pos**: not tested: no random-init model" in text

"""Baselines in a study: the evaluation of one run per size adds that size's random-init model, the report prints it
and the trivial baselines beside the arms, and which tasks the claims use is decided on validation scores, before
any test score is read: a task where no arm beats both the random-init model and the task's best trivial baseline
by the study file's margin (evaluation.informative_margin) is marked uninformative, named and left out."""

import json
import runpy
from dataclasses import replace
from pathlib import Path

import pytest
from test_evidence import PAPER, STUDY, _results, write_results, write_score

from megamlm.eval.baseline_store import baseline_path, read_baselines
from megamlm.study.evidence.informative import claim_evidence, informative_tasks, task_evidence
from megamlm.study.planning.schema import StudyError
from megamlm.study.reporting.report import write_report
from megamlm.study.running.commands import evaluate_command, random_init_models

REPO = Path(__file__).resolve().parents[3]
FAMILY = {"brown-pos": ("token classification", "accuracy"), "rt-sentiment": ("sequence classification", "accuracy")}


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


def _random_init(plan, task, score):
    for lr in (1e-3, 3e-3):
        for ft_seed, noise in ((0, -0.5), (1, 0.5)):
            write_score(plan, "random-init-tiny", task, lr, ft_seed, score + noise - (lr > 2e-3), score + noise)


def _baselines(plan, task, **validation):
    """Store ``task``'s trivial baselines (name -> validation score; test 50) as the evaluation stores them."""
    family, metric = FAMILY[task]
    path = baseline_path(Path(plan.root) / "eval", task)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": task, "family": family, "metric": metric, "baselines": [
        {"name": name, "description": name, "validation": {"score": v}, "test": {"score": 50.0}}
        for name, v in validation.items()]}))
    return read_baselines(Path(plan.root) / "eval", list(FAMILY))


class Unreadable:
    """A test score the informative rule must not read: any use of it fails the test."""

    def _read(self, *_):
        raise AssertionError("a test score was read to decide which tasks are informative")
    __getitem__ = __float__ = __format__ = __lt__ = __gt__ = __le__ = __ge__ = __add__ = __radd__ = __sub__ = _read
    __rsub__ = __truediv__ = __iter__ = _read


def test_a_task_no_arm_beats_its_best_trivial_baseline_by_the_margin_on_validation_is_excluded(small_plan):
    """brown-pos: every arm far above random init (60), but the best arm (85.1 on validation) only 0.6 above the
    per-word tag baseline (84.5, the better of the task's two): uninformative at the default 1-point margin,
    informative at 0.5. rt-sentiment: the random-init model (90) above every arm. Decided with every test score
    (the models' and the baselines') replaced by a value that fails the test when read."""
    plan = small_plan(STUDY)
    write_results(plan, **PAPER)  # final arms score 70-85 on validation and test (+- 1 over pretraining seeds)
    _random_init(plan, "brown-pos", 60.0)
    _random_init(plan, "rt-sentiment", 90.0)
    _baselines(plan, "brown-pos", **{"majority": 20.0, "per-word-tag": 84.5})
    baselines = _baselines(plan, "rt-sentiment", majority=66.67)
    hidden = [{**r, "test": Unreadable()} for r in _results(plan)]
    hidden_baselines = [replace(b, test=Unreadable()) for b in baselines]
    evidence = task_evidence(plan, hidden, hidden_baselines)
    assert not evidence["brown-pos"].informative and evidence["brown-pos"].tested
    assert evidence["brown-pos"].reason == (
        "on validation, tiny-clm50-mlm50-m40 85.10 against random-init-tiny 60.00 and the best trivial baseline "
        "baseline:per-word-tag 84.50: the best arm is +0.60 points from the better of the two, not above the "
        "margin of 1")
    assert not evidence["rt-sentiment"].informative and "random-init-tiny 90.00" in evidence["rt-sentiment"].reason
    assert claim_evidence(plan, hidden, hidden_baselines).excluded.keys() == {"brown-pos", "rt-sentiment"}
    lenient = small_plan(STUDY, overrides=["evaluation.informative_margin=0.5"])
    assert task_evidence(lenient, hidden, hidden_baselines)["brown-pos"].informative
    assert informative_tasks(lenient, hidden, hidden_baselines) == {"brown-pos"}
    # without the per-word tag baseline, random init alone is the floor: informative by 25 points
    assert task_evidence(plan, hidden, [b for b in hidden_baselines if b.model != "baseline:per-word-tag"]
                         )["brown-pos"].informative


def test_the_informative_margin_is_checked(small_plan):
    with pytest.raises(StudyError, match="evaluation.informative_margin must be a finite number of score points"):
        small_plan(STUDY, overrides=["evaluation.informative_margin=-1"])


def test_the_report_prints_the_baselines_marks_and_left_out_tasks(small_plan, tmp_path):
    plan = small_plan(STUDY)
    write_results(plan, **PAPER)
    _random_init(plan, "brown-pos", 60.0)
    _random_init(plan, "rt-sentiment", 90.0)
    _baselines(plan, "brown-pos", **{"per-word-tag": 50.0})
    _baselines(plan, "rt-sentiment", majority=66.67)
    text = write_report(plan, tmp_path / "R.md", figures=False).read_text()
    assert "| random-init-tiny | rt-sentiment | 2 fine-tuning | 90.00 ± 6.35 | 89.50, 90.50 |" in text  # per arm
    assert "| baseline:majority | rt-sentiment | – | 50.00 (no training) | – |" in text
    informative = text.split("### Informative tasks")[1]
    assert "on validation scores and before any test score is read" in informative
    assert "- **brown-pos**: informative: on validation, tiny-clm50-mlm50-m40 85.10 against random-init-tiny" in text
    assert "- **rt-sentiment**: uninformative: on validation, " in informative
    assert "left out of the claims: rt-sentiment." in informative
    assert "Left out of every claim test: rt-sentiment (on validation," in text
    grid = text.split("### Scores per learning rate")[1]
    # MLM, seed 1: 80 - 1 + (0 + 0.2) / 2 at the best LR, 20 + 0.3 x seed lower at the others: its loss 20.3
    assert ("| tiny-mlm100-m40-s1 | brown-pos | 58.80 (58.80) | 79.10 (79.10) | 58.80 (58.80) | 0.003, 2 of 3 "
            "| 20.30 |") in grid
    assert "| random-init-tiny | brown-pos | 60.00 (60.00) | 60.00 (59.00) | – | 0.001, 1 of 3 (edge) | 0.00 |" in grid


def test_without_a_random_init_model_no_task_is_shown_informative(small_plan, tmp_path):
    plan = small_plan(STUDY)
    write_results(plan, **PAPER)
    baselines = _baselines(plan, "brown-pos", majority=10.0)
    assert informative_tasks(plan, _results(plan), baselines) == set()
    evidence = task_evidence(plan, _results(plan), baselines)
    assert not any(e.tested for e in evidence.values())
    assert evidence["rt-sentiment"].reason.startswith("no trivial baseline was computed for it")
    text = write_report(plan, tmp_path / "R.md", figures=False).read_text()
    assert "- **brown-pos**: not tested: no random-init model" in text

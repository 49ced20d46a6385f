"""LRs tied at the best validation mean: the three tie rules (``aggregate.TIE_RULES``) by hand, the study file's key,
and the claims section deciding every claim under each rule, calling a verdict that changes with the rule fragile
in its line and in the tie-rule table."""

import pytest
from small_study import SMALL, write_study
from test_evidence import BASELINE, PAPER, STUDY, write_results, write_score

from megamlm.eval.aggregate import TIE_TOLERANCE, summarize
from megamlm.eval.report import markdown_table
from megamlm.study.evidence.scores import Scores
from megamlm.study.planning.load import load_study
from megamlm.study.planning.schema import StudyError
from megamlm.study.reporting.claims_text import claims_section
from megamlm.study.reporting.report import finetuning_scores
from megamlm.study.running.commands import evaluated_models


def _result(lr, validation, test, seed=0):
    return {"model": "m", "task": "brown-pos", "lr": lr, "seed": seed, "family": "token classification",
            "metric": "accuracy", "validation": {"score": validation}, "test": {"score": test}}


def test_each_tie_rule_by_hand():
    results = [_result(1e-3, 80.0, 70.0), _result(3e-3, 80.0, 90.0), _result(1e-2, 60.0, 40.0)]
    smaller, larger, mean = (Scores.of(results, rule) for rule in ("smaller", "larger", "mean"))
    assert smaller.tied_lrs("m", "brown-pos") == [1e-3, 3e-3]
    assert smaller.task_score("m", "brown-pos") == 70.0 and smaller.best_lr("m", "brown-pos") == 1e-3
    assert larger.task_score("m", "brown-pos") == 90.0 and larger.best_lr("m", "brown-pos") == 3e-3
    assert mean.task_score("m", "brown-pos") == pytest.approx(80.0)
    # the stability loss: the score at the chosen LR(s) minus the mean at the others
    assert smaller.task_stability_loss("m", "brown-pos") == pytest.approx(70.0 - (90.0 + 40.0) / 2)
    assert mean.task_stability_loss("m", "brown-pos") == pytest.approx(80.0 - 40.0)
    assert mean.finetuning_seeds("m", "token classification") == pytest.approx([80.0])
    with pytest.raises(ValueError, match="tie rule"):
        Scores.of(results, "median")


def test_the_report_tables_read_each_model_at_the_lrs_its_claims_read():
    """The per-model table, the per-arm table and the baselines' rows (``summarize``, ``finetuning_scores``) follow the
    tie rule the claims follow: a table at the smaller LR beside a claim at the larger would print one score and
    test another."""
    results = [_result(1e-3, 80.0, 70.0), _result(3e-3, 80.0, 90.0), _result(1e-2, 60.0, 40.0),
               _result(1e-3, 80.0, 72.0, seed=1), _result(3e-3, 80.0, 96.0, seed=1), _result(1e-2, 61.0, 40.0, seed=1)]
    for rule, lrs, per_seed in (("smaller", (1e-3,), [70.0, 72.0]), ("larger", (3e-3,), [90.0, 96.0]),
                                ("mean", (1e-3, 3e-3), [80.0, 84.0])):
        [summary] = summarize(results, [], rule)
        assert summary.chosen_lrs == lrs and summary.best_lr == lrs[0] and summary.seeds == 2, rule
        assert summary.test_mean == pytest.approx(Scores.of(results, rule).task_score("m", "brown-pos")), rule
        assert summary.test_mean == pytest.approx(sum(per_seed) / 2), rule
        assert finetuning_scores(results, [summary])[("m", "brown-pos")] == pytest.approx(per_seed), rule
    assert "| 0.001 and 0.003 |" in markdown_table(summarize(results, [], "mean"))
    assert "| 0.003 |" in markdown_table(summarize(results, [], "larger"))
    # within the tolerance is a tie, as for the claims; beyond it is not
    near = [_result(1e-3, 80.0, 70.0), _result(3e-3, 80.0 - TIE_TOLERANCE / 2, 90.0)]
    assert summarize(near, [], "larger")[0].chosen_lrs == (3e-3,)
    apart = [_result(1e-3, 80.0, 70.0), _result(3e-3, 80.0 - 1e-6, 90.0)]
    assert summarize(apart, [], "larger")[0].chosen_lrs == (1e-3,)


def test_the_study_file_fixes_a_tie_rule(tmp_path):
    study = {**SMALL, **STUDY, "claims": None}
    data = {**study, "evaluation": {**STUDY["evaluation"], "tie_rule": "larger"}}
    assert load_study(write_study(tmp_path, data)).evaluation.tie_rule == "larger"
    assert load_study(write_study(tmp_path, study, "b.yaml")).evaluation.tie_rule == "smaller"
    bad = {**study, "evaluation": {**STUDY["evaluation"], "tie_rule": "median"}}
    with pytest.raises(StudyError, match="tie_rule"):
        load_study(write_study(tmp_path, bad, "c.yaml"))


def test_a_verdict_that_changes_with_the_tie_rule_is_called_fragile(small_plan):
    plan = small_plan(STUDY)
    scores = write_results(plan, **PAPER)
    text = claims_section(plan, scores, evidence=BASELINE)
    assert "Tie-rule sensitivity" in text and "fragile" not in text.split("Tie-rule sensitivity")[1].split("|", 1)[1]
    # every final MLM model ties its best LR (3e-3) with 1e-2 on validation and scores 40 points less on test there
    for run in plan.runs:
        if run.objective == "mlm" and run.continues is None and run.switch_step is None:
            for model in evaluated_models(plan, run):
                if model.step == run.train_iters:
                    for ft_seed in (0, 1):
                        best = PAPER["final"]["mlm"] - 1.0 + 0.5 * (run.seed - 1) + 0.2 * ft_seed
                        write_score(plan, model.name, "brown-pos", 1e-2, ft_seed, best, best - 40.0)
                        write_score(plan, model.name, "rt-sentiment", 1e-2, ft_seed, best, best - 40.0)
    from test_evidence import _results

    text = claims_section(plan, Scores.of(_results(plan)), evidence=BASELINE)
    line = next(line for line in text.splitlines() if line.startswith("- **(a)"))
    assert "**fragile**" in line and "smaller: supported" in line and "larger: contradicted" in line
    row = next(line for line in text.splitlines() if line.startswith("| (a) |"))
    assert row.endswith("| fragile |")


def test_the_report_names_the_commit_of_its_study_file(tmp_path):
    import re
    from pathlib import Path

    from megamlm.study.reporting.registration import file_commit

    committed = Path(__file__).resolve().parents[3] / "examples" / "studies" / "cpu_miniature.yaml"
    assert re.match(r"commit [0-9a-f]{40} \(", file_commit(committed))
    (tmp_path / "study.yaml").write_text("name: x\n")
    assert file_commit(tmp_path / "study.yaml") in ("not in a git checkout", "not committed")

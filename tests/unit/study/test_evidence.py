"""The paper's figures and claims from synthetic fine-tuning results: the stability loss by hand, the LR and
continued-pretraining figures drawn only where the study has their data, and every verdict of the claims
section reachable (supported, contradicted, not distinguishable, not testable), each with its scale; the stability
claim only on a grid of 3 or more LRs whose best is inside it; a rehearsal states none."""

from pathlib import Path

import pytest

from megamlm.eval.results import RunKey, write_json_atomic
from megamlm.study.evidence.claims import CONTRADICTED, SUPPORTED, UNDECIDED, Evidence, claims
from megamlm.study.evidence.scores import Scores, continuation_gains, lr_curves, models_at, stability
from megamlm.study.planning.arms import arms
from megamlm.study.reporting.claims_text import claims_section
from megamlm.study.reporting.report import write_report
from megamlm.study.running.commands import evaluated_models

CLAIMS = Path(__file__).resolve().parents[3] / "examples" / "studies" / "claims" / "clm_mlm_2507.00994.yaml"
STUDY = {"seeds": [1, 2, 3, 4, 5], "claims": str(CLAIMS),
         "grids": [{"budgets": [100], "clm_fractions": [0, 0.5, 1]}],
         "continued_pretraining": [{"parents": ["clm100-m40", "mlm100-m40"], "steps": [40], "objective": "mlm",
                                    "pretrain": {"training": {"lr_warmup_fraction": 0.1,
                                                              "lr_wsd_decay_fraction": 0.2}}}],
         "evaluation": {"tasks": ["brown-pos", "rt-sentiment"], "lrs": [1e-3, 3e-3, 1e-2], "seeds": [0, 1],
                        "checkpoint_steps": [50], "hyperparameters": {"max_steps": 30}}}
FAMILY = {"brown-pos": "token classification", "rt-sentiment": "sequence classification"}
JITTER = {1: -1.0, 2: -0.5, 3: 0.0, 4: 0.5, 5: 1.0, 6: 1.5}  # per pretraining seed: a spread to test over
BASELINE = Evidence()  # every task informative
BEST_LR, OTHER_LRS = 3e-3, (1e-3, 1e-2)  # the best LR inside the grid


def write_score(plan, model, task, lr, seed, validation, test):
    key = RunKey(model, task, lr, seed)
    write_json_atomic(Path(plan.root) / "eval" / key.relative_path(), {
        "status": "finished", "model": model, "task": task, "lr": lr, "seed": seed, "family": FAMILY[task],
        "metric": "accuracy", "validation": {"score": validation}, "test": {"score": test},
        "diverged_at_step": None})


def write_results(plan, final, early=None, loss=None):
    """``final[arm kind or continuation parent]``: the score at the best LR (3e-3) of the arm's final models;
    ``early[kind]``: at the intermediate checkpoint; ``loss[kind]``: how much lower the other LRs (1e-3 and 1e-2,
    where the study has them) score."""
    for arm in arms(plan):
        for run in arm.runs:
            key = arm.kind if arm.kind != "continuation" else "cpt-" + plan.run(run.continues).objective
            for model in evaluated_models(plan, run):
                base = final[key] if model.step == run.train_iters else (early or {}).get(key, 50.0)
                for task in FAMILY:
                    for ft_seed in (0, 1):
                        best = base + JITTER[run.seed] + 0.2 * ft_seed
                        write_score(plan, model.name, task, BEST_LR, ft_seed, best, best)
                        for lr in OTHER_LRS:
                            if lr in plan.study.evaluation.lrs:
                                other = best - (loss or {}).get(key, 5.0) - 0.3 * run.seed
                                write_score(plan, model.name, task, lr, ft_seed, other, other)
    return Scores.of(_results(plan))


def _results(plan):
    from megamlm.study.reporting.report import evaluation_results

    return evaluation_results(plan)


PAPER = dict(final={"mlm": 80.0, "clm": 70.0, "clm_then_mlm": 85.0, "cpt-clm": 85.0, "cpt-mlm": 81.0},
             early={"clm": 60.0, "mlm": 50.0}, loss={"clm": 2.0, "mlm": 20.0})
REVERSED = dict(final={"mlm": 70.0, "clm": 80.0, "clm_then_mlm": 60.0, "cpt-clm": 81.0, "cpt-mlm": 85.0},
                early={"clm": 50.0, "mlm": 60.0}, loss={"clm": 20.0, "mlm": 2.0})


def test_the_stability_loss_is_the_score_at_the_best_lr_minus_the_mean_at_the_others_by_hand():
    results = []
    for lr, score in ((1e-3, 70.0), (3e-3, 80.0), (1e-2, 55.0)):  # best on validation: 3e-3
        for seed, noise in ((0, -1.0), (1, 1.0)):
            results.append({"model": "m", "task": "brown-pos", "lr": lr, "seed": seed, "family": "token classification",
                            "validation": {"score": score + noise}, "test": {"score": score + 2 * noise}})
    scores = Scores.of(results)
    assert scores.best_lr("m", "brown-pos") == 3e-3
    # test means over the two fine-tuning seeds: 70, 80, 55; the loss: 80 - (70 + 55) / 2 = 17.5
    assert scores.stability_loss("m", "token classification") == pytest.approx(17.5)
    assert scores.score("m", "token classification") == pytest.approx(80.0)
    assert scores.finetuning_seeds("m", "token classification") == pytest.approx([78.0, 82.0])
    one_lr = Scores.of([r for r in results if r["lr"] == 1e-3])
    assert one_lr.stability_loss("m", "token classification") is None  # one LR: no loss to measure


def test_lr_curves_stability_and_continuation_gains_per_arm(small_plan):
    plan = small_plan(STUDY)
    scores = write_results(plan, **PAPER)
    curves = lr_curves(plan, scores)
    assert curves["tiny-mlm100-m40"]["token classification"][3e-3] == pytest.approx([79.1, 79.6, 80.1, 80.6, 81.1])
    losses = stability(plan, scores)
    # MLM: 20 + 0.3 x seed below the best at both other LRs
    assert losses["tiny-mlm100-m40"]["sequence classification"] == pytest.approx([20.3, 20.6, 20.9, 21.2, 21.5])
    gains = {c.parent.label: c for c in continuation_gains(plan, scores)}
    assert set(gains) == {"tiny-clm100-m40", "tiny-mlm100-m40"}
    [(step, values)] = gains["tiny-clm100-m40"].gains["token classification"]
    assert step == 40 and values == pytest.approx([15.0] * 5)  # 85 - 70, seed by seed


def test_the_figures_appear_where_the_study_has_their_data(small_plan, tmp_path):
    pytest.importorskip("matplotlib")
    plan = small_plan(STUDY)
    write_results(plan, **PAPER)
    text = write_report(plan, tmp_path / "full" / "REPORT.md").read_text()
    for figure in ("lr_sensitivity.png", "lr_stability.png", "continuation_gain.png", "score_vs_steps.png"):
        assert (tmp_path / "full" / "figures" / figure).stat().st_size > 0
        assert f"(figures/{figure})" in text

    single = small_plan({**STUDY, "continued_pretraining": [],
                         "evaluation": {**STUDY["evaluation"], "lrs": [3e-3]}})
    write_results(single, **PAPER)
    text = write_report(single, tmp_path / "single" / "REPORT.md").read_text()
    for figure in ("lr_sensitivity.png", "lr_stability.png", "continuation_gain.png"):
        assert not (tmp_path / "single" / "figures" / figure).exists() and figure not in text
    assert "score_vs_clm_fraction.png" in text


def verdicts(plan, scores, evidence=BASELINE):
    return {c.key: c.verdict() for c in claims(plan, scores, evidence=evidence)}


def test_each_claim_is_supported_where_the_results_go_the_papers_way(small_plan):
    plan = small_plan(STUDY)
    found = verdicts(plan, write_results(plan, **PAPER))
    # (c): the split 5 points above MLM, shown to be within the 1-point margin of it or above
    assert found == {"a": SUPPORTED, "b": SUPPORTED, "c": SUPPORTED, "d": SUPPORTED, "e": SUPPORTED}


def test_each_claim_is_contradicted_where_the_results_go_the_other_way(small_plan):
    plan = small_plan(STUDY)
    found = verdicts(plan, write_results(plan, **REVERSED))
    assert found == {"a": CONTRADICTED, "b": CONTRADICTED, "c": CONTRADICTED, "d": CONTRADICTED, "e": CONTRADICTED}


def test_a_claim_is_one_test_on_the_papers_average_so_families_that_disagree_cancel(small_plan):
    plan = small_plan(STUDY)
    scores = write_results(plan, **PAPER)
    clm = next(arm for arm in arms(plan) if arm.kind == "clm")
    for _, model in models_at(plan, clm):  # CLM 20 points higher on sequence classification: 10 above MLM there
        by_task = scores.by_lr[model]
        by_task["rt-sentiment"] = {lr: (v + 20, t + 20) for lr, (v, t) in by_task["rt-sentiment"].items()}
    [a] = [c for c in claims(plan, scores, evidence=BASELINE) if c.key == "a"]
    assert a.difference == pytest.approx(0.0) and a.verdict() == UNDECIDED  # (+10 - 10) / 2 families
    assert "token classification: +10.00" in "; ".join(a.described)
    assert "sequence classification: -10.00" in "; ".join(a.described)


def test_the_stability_claim_needs_a_grid_of_three_lrs_with_the_best_inside(small_plan):
    """(e) compares absolute losses from the best LR; with 2 LRs it is not asked, and where an arm's best LR is the
    grid's smallest it is not testable (the loss below it is unmeasured); the report says where each best sits."""
    two = small_plan({**STUDY, "evaluation": {**STUDY["evaluation"], "lrs": [1e-3, 3e-3]}})
    text = claims_section(two, write_results(two, **PAPER))
    assert ("**(e) CLM fine-tunes more stably across learning rates**: not asked by this study (2 fine-tuning "
            "learning rates: the stability claim needs a grid of at least 3 with its best LR inside it)." in text)
    plan = small_plan(STUDY)
    scores = write_results(plan, **PAPER)
    text = claims_section(plan, scores)
    assert "Best LR in the grid (each arm's final models' mean validation score): tiny-clm100-m40 on brown-pos: " \
           "0.003 (2 of 3)" in text
    e = next(c for c in claims(plan, scores) if c.key == "e")
    # CLM loses 2 + 0.3 x seed, MLM 20 + 0.3 x seed: MLM's loss − CLM's = 18 points, on no gain over anything
    assert e.difference == pytest.approx(18.0) and e.verdict() == SUPPORTED
    for model in scores.by_lr:  # every model best at the grid's smallest LR
        for task in scores.by_lr[model]:
            lrs = scores.by_lr[model][task]
            scores.by_lr[model][task] = {lr: (v + 50 * (lr == 1e-3), t) for lr, (v, t) in lrs.items()}
    e = next(c for c in claims(plan, scores) if c.key == "e")
    assert e.verdict().startswith("not testable (best LR at the grid's edge for tiny-clm100-m40 on brown-pos")
    assert "tiny-mlm100-m40 on rt-sentiment: 0.001 (1 of 3, at the edge)" in "; ".join(e.best_lrs)


def test_the_claims_section_gives_the_numbers_and_the_setting_behind_a_departure(small_plan):
    plan = small_plan(STUDY)
    text = claims_section(plan, write_results(plan, **REVERSED), evidence=BASELINE)
    # the verdict carries its scale: 100 steps x 512 tokens, the tiny preset's 4 layers, 5 seeds
    assert "**(a) MLM beats CLM at the end of pretraining**: at 0.05M tokens, 4 layers, 5 seeds: contradicted." in text
    # 5 seeds against 5: the smallest permutation p is 2/252; Holm over the 5 claims: 5 x 0.008 = 0.040
    assert ("Test: tiny-mlm100-m40 − tiny-clm100-m40: -10.00 [-12.00, -8.00] (99.0% interval, its Holm step's "
            "level); permutation p = 0.008, Holm-adjusted p = 0.040 **significant**; seeds 1, 2, 3, 4, 5 against "
            "1, 2, 3, 4, 5, each side's models averaged per seed of their trunk; seed means permuted between the "
            "sides. At the permutation floor: its Holm step's level (0.0100) is reached only by the smallest "
            "p-value its seeds allow (0.0079)") in text
    assert "(d) continuing (MLM) from CLM beats continuing from MLM**: at 0.05M + 0.02M continued tokens" in text
    assert "**(b) CLM is ahead early in pretraining**: at 0.03M tokens, 4 layers, 5 seeds: contradicted." in text
    assert "against the margin: H0 difference = -1.00" in text  # (c)
    assert "Holm's method runs over the 5 testable claims (not over tasks)" in text
    assert "Every task (brown-pos, rt-sentiment) is in the claim tests: none is marked uninformative." in text
    assert "at step 50" in text  # (b): the evaluated intermediate checkpoint
    assert "where the MLM phase after the switch is 50 steps" in text  # (c)
    # the setting, filled from the study: its steps, tokens per step (8 x 64) and model
    assert "This study's 100 steps of 512 tokens (0.05M tokens) with the tiny preset (4 layers, hidden 128)" in text
    assert "here 3 learning rates (0.001, 0.003, 0.01) at 30 steps on " in text
    assert "(fine-tuning seeds per LR: 2)" in text
    supported = claims_section(plan, write_results(plan, **PAPER), evidence=BASELINE)
    assert ("**(a) MLM beats CLM at the end of pretraining**: at 0.05M tokens, 4 layers, 5 seeds: supported."
            in supported)
    assert supported.count("What in this setting could explain it") == 0  # every claim supported


def test_the_setting_of_a_and_c_cites_the_mlm_arms_final_validation(small_plan):
    """How far along its MLM curve each MLM-trained arm ended: the report's final validation, means over seeds."""
    from megamlm.study.evidence.statistics import Sample

    plan = small_plan(STUDY)
    validation = {arm.label: {"mlm_accuracy": Sample([0.06, 0.08]), "mlm_loss": Sample([6.2, 6.4])}
                  for arm in arms(plan)}
    text = claims_section(plan, write_results(plan, **REVERSED), validation=validation)
    facts = "Final validation MLM accuracy (and MLM loss) here, means over pretraining seeds: "
    assert text.count(facts) == 2  # (a) and (c), both departures here
    assert facts + "tiny-mlm100-m40 0.070 (6.30)." in text  # (a): the MLM arm, not the CLM one
    assert facts + "tiny-mlm100-m40 0.070 (6.30); tiny-clm50-mlm50-m40 0.070 (6.30)." in text  # (c)
    assert facts not in claims_section(plan, write_results(plan, **REVERSED))  # no validation measured


def test_claims_without_the_arms_to_answer_them_say_so(small_plan):
    plan = small_plan({**STUDY, "continued_pretraining": [],
                       "evaluation": {**STUDY["evaluation"], "checkpoint_steps": []}})
    text = claims_section(plan, write_results(plan, **PAPER))
    assert "**(b) CLM is ahead early in pretraining**: not asked by this study (no checkpoint" in text
    assert "**(d) continuing (MLM) from CLM beats continuing from MLM**: not asked by this study" in text


def test_a_rehearsals_claims_show_differences_and_no_verdicts(small_plan, tmp_path):
    plan = small_plan(STUDY, scale=0.5)
    write_results(plan, **PAPER)
    text = write_report(plan, figures=False).read_text()
    section = text.split("## The paper's claims")[1]
    assert "answers none of them" in section
    assert "tiny-mlm50-m40 − tiny-clm50-m40, token classification: +10.00" in section
    for word in ("significan", "p = ", "p < ", "supported", "contradicted", "distinguishable"):
        assert word not in text.lower()


def test_a_study_of_another_paper_states_its_own_claims(small_plan, tmp_path):
    """The claims are a table the study names: another paper's single claim is answered, the 2507.00994 ones are
    not; a table asking for a comparison the report cannot make is refused when the study is read."""
    from megamlm.study.planning.schema import StudyError

    table = tmp_path / "other.yaml"
    table.write_text("paper: arXiv 0000.00000\nfacts: {steps: 10}\nclaims:\n"
                     "  - {key: x, statement: CLM beats MLM, compare: final, a: clm, b: mlm,\n"
                     "     setting: 'The other paper trains {paper_steps} steps; this study {steps}.'}\n")
    plan = small_plan({**STUDY, "claims": str(table)})
    text = claims_section(plan, write_results(plan, **REVERSED))
    assert "Each claim of the paper (arXiv 0000.00000)" in text
    assert "**(x) CLM beats MLM**: at 0.05M tokens, 4 layers, 5 seeds: supported." in text
    assert "(a) MLM beats CLM" not in text
    assert "tiny-clm100-m40 − tiny-mlm100-m40, token classification: +10.00" in text
    assert claims_section(small_plan({**STUDY, "claims": None}), write_results(plan, **REVERSED)) == ""
    table.write_text(table.read_text().replace("compare: final", "compare: fancy"))
    with pytest.raises(StudyError, match="claim x's compare is 'fancy'; choose one of final, early"):
        small_plan({**STUDY, "claims": str(table)})

"""The study report from synthetic run folders and fine-tuning results: curves stitched along the lineage, seeds
summarised, differences beyond the seed spread named, a table per task family, the figures."""

import json
import re
import runpy
from pathlib import Path

import pytest
from test_local import make_checkpoint

from megamlm.errors import UserError
from megamlm.eval.results import RunKey, write_json_atomic
from megamlm.study.planning.arms import arms
from megamlm.study.reporting.curves import drawn_curve, final_validation, validation_curve
from megamlm.study.reporting.report import evaluation_keys, write_report
from megamlm.study.running.commands import status_file

REPO = Path(__file__).resolve().parents[3]

STUDY = {"seeds": [1, 2], "continued_pretraining": [],
         "grids": [{"budgets": [100], "clm_fractions": [0, 0.5, 1]}],
         "evaluation": {"tasks": ["brown-pos", "rt-sentiment"], "lrs": [1e-3], "seeds": [0, 1],
                        "checkpoint_steps": [50]}}
# Final validation MLM loss per arm and seed: MLM clearly below CLM; the split overlaps MLM.
MLM_LOSS = {("mlm100", 1): 5.0, ("mlm100", 2): 5.1, ("clm100", 1): 7.0, ("clm100", 2): 7.2,
            ("clm50-mlm50", 1): 5.05, ("clm50-mlm50", 2): 5.2}


def write_run(plan, run, steps):
    folder = Path(plan.save_dir(run))
    folder.mkdir(parents=True, exist_ok=True)
    arm = {"clm50": "clm100", "mlm50": "mlm100", "clm25-mlm25": "clm50-mlm50"}.get(run.label.removesuffix("-m40"),
                                                                                  run.label.removesuffix("-m40"))
    with open(folder / "metrics.jsonl", "w") as f:
        for step in steps:
            final = MLM_LOSS[(arm, run.seed)]
            f.write(json.dumps({"kind": "validation", "step": step, "samples": step * 8, "tokens": step * 512,
                                "mlm_loss": final + (run.train_iters - step) / 100, "mlm_accuracy": 0.1,
                                "clm_loss": 6.0}) + "\n")
    make_checkpoint(folder, run.train_iters)


def write_score(plan, model, task, seed, score):
    family = "token classification" if task == "brown-pos" else "sequence classification"
    key = RunKey(model, task, 1e-3, seed)
    write_json_atomic(Path(plan.root) / "eval" / key.relative_path(), {
        "status": "finished", "model": model, "task": task, "lr": 1e-3, "seed": seed, "family": family,
        "metric": "accuracy", "validation": {"score": score}, "test": {"score": score}, "diverged_at_step": None})


def make_finished(plan):
    for run in plan.runs:
        write_run(plan, run, range(run.branch_step + 10, run.train_iters + 1, 10))
        for model in [run.name] + ([f"{run.name}-step50"] if not run.branch_step else []):
            for ft_seed in (0, 1):
                base = 80 if "mlm100" in model else 70
                write_score(plan, model, "brown-pos", ft_seed, base + run.seed + ft_seed * 0.5
                            - (5 if model.endswith("step50") else 0))
                write_score(plan, model, "rt-sentiment", ft_seed, 60 + run.seed)
    return plan


@pytest.fixture
def finished(small_plan):
    return make_finished(small_plan(STUDY))


def test_a_branch_curve_is_its_parents_up_to_the_branch_step(finished):
    plan = finished
    run = plan.run("tiny-clm50-mlm50-m40-s1")
    curve = validation_curve(plan, run)
    assert [r["step"] for r in curve] == list(range(10, 101, 10))
    parent = {r["step"]: r["mlm_loss"] for r in validation_curve(plan, plan.run("tiny-clm100-m40-s1"))}
    assert all(r["mlm_loss"] == parent[r["step"]] for r in curve if r["step"] <= 50)
    assert final_validation(plan, run)["mlm_loss"] == pytest.approx(5.05)


def test_a_branch_is_drawn_from_its_branch_step_so_its_parent_stays_visible(finished):
    plan = finished
    assert [r["step"] for r in drawn_curve(plan, plan.run("tiny-clm50-mlm50-m40-s1"))] == list(range(50, 101, 10))
    assert [r["step"] for r in drawn_curve(plan, plan.run("tiny-clm100-m40-s1"))] == list(range(10, 101, 10))


def test_report_tables_and_figures(finished, tmp_path):
    pytest.importorskip("matplotlib")
    path = write_report(finished, tmp_path / "report" / "REPORT.md")
    text = path.read_text()
    assert "6 of 6 runs have finished." in text
    assert [a.label for a in arms(finished)] == ["tiny-clm100-m40", "tiny-mlm100-m40", "tiny-clm50-mlm50-m40"]
    # Welch over the 2 pretraining seeds, unadjusted and descriptive (MLM accuracy and CLM loss have no spread)
    assert ("| tiny-clm100-m40 − tiny-mlm100-m40 | pretraining seeds | +2.050 [+1.358, +2.742], p = 0.010 "
            "| +0.000 (n/a: no spread in either arm) |") in text
    assert "| tiny-mlm100-m40 − tiny-clm50-mlm50-m40 | pretraining seeds | -0.075 [-0.523, +0.373], p = 0.504 |" in text
    assert "#### token classification" in text and "#### sequence classification" in text
    assert "Nothing here is called significant" in text and "**significant**" not in text.split("## The paper")[0]
    assert "beyond" not in text
    # brown-pos per arm over pretraining seeds: MLM 81.25 and 82.25 (means over fine-tuning seeds)
    assert "| tiny-mlm100-m40 | brown-pos | 2 |" in text and "81.25, 82.25" in text
    for figure in ("validation.png", "score_vs_clm_fraction.png", "score_vs_steps.png"):
        assert (tmp_path / "report" / "figures" / figure).stat().st_size > 0
        assert f"(figures/{figure})" in text
    assert (Path(finished.root) / "results.md").is_file()
    assert "Unigram plateau: not measured" in text  # the small study has no --split validation part


def test_the_unigram_entropy_stands_beside_each_mlm_only_arm(small_plan, tmp_path, cache_dir):
    from small_study import SMALL

    from megamlm.data.embedded import MINIATURE_TOKENIZER_FILE

    data = {"split": "969,30,1", "tokenizer_model": str(MINIATURE_TOKENIZER_FILE),
            "data_cache_path": cache_dir}
    plan = make_finished(small_plan({**STUDY, "pretrain": {**SMALL["pretrain"], "data": data}}))
    text = write_report(plan, tmp_path / "report" / "REPORT.md", figures=False).read_text()
    # The 2,048-id vocabulary's validation tokens (issue 32: 6.21 nats); MLM_LOSS's MLM arm ends at 5.05.
    found = re.search(r"have a unigram entropy of (\d\.\d{3}) nats", text)
    assert found and 6.1 < float(found.group(1)) < 6.3, text.split("## Validation")[1][:3000]
    gap = float(found.group(1)) - 5.05
    assert (f"- `tiny-mlm100-m40`: final validation MLM loss 5.050 (mean of 2 seeds), {gap:+.3f} nats under the "
            "entropy: off the plateau") in text
    assert "`tiny-clm100-m40`:" not in text.split("## Downstream")[0]  # only MLM-only arms stand beside it


def test_one_seed_measures_no_spread(finished, tmp_path):
    import shutil

    shutil.rmtree(finished.save_dir(finished.run("tiny-mlm100-m40-s2")))
    text = write_report(finished, tmp_path / "R.md", figures=False).read_text()
    assert ("| tiny-clm100-m40 − tiny-mlm100-m40 | pretraining seeds | +2.100 (n/a: fewer than 2 values in an arm) |"
            in text)


def test_arms_of_one_pretraining_seed_are_compared_over_fine_tuning_seeds(small_plan, tmp_path):
    plan = make_finished(small_plan({**STUDY, "seeds": [1]}))
    text = write_report(plan, tmp_path / "R.md", figures=False).read_text()
    downstream = text.split("## Downstream")[1]
    # brown-pos, one pretraining seed each: CLM 71 and 71.5 over fine-tuning seeds, MLM 81 and 81.5
    assert ("| tiny-clm100-m40 − tiny-mlm100-m40 | fine-tuning seeds at the best LR | -10.00 [-11.52, -8.48], "
            "p = 0.001 |") in downstream  # Welch p 0.00125, unadjusted
    assert "Over fine-tuning seeds (both arms have one pretraining seed)" in downstream
    # validation has no fine-tuning seeds: one value per arm, no test
    assert "| tiny-clm100-m40 − tiny-mlm100-m40 | pretraining seeds | +2.000 (n/a: fewer than 2 values" in text
    assert "No difference in this table could be tested" in text.split("## Downstream")[0]


def test_a_rehearsal_is_headed_as_one_and_draws_no_conclusions(small_plan, tmp_path):
    from megamlm.study.reporting.report_target import report_path

    plan = small_plan(STUDY, scale=0.5)
    assert plan.study.is_rehearsal and plan.study.scale == 0.5
    for run in plan.runs:
        write_run(plan, run, range(run.branch_step + 5, run.train_iters + 1, 5))
        for ft_seed in (0, 1):
            write_score(plan, run.name, "brown-pos", ft_seed, (80 if "mlm" in run.name else 70) + run.seed + ft_seed)
    path = write_report(plan, figures=False)
    assert path == Path(plan.root) / "rehearsal" / "REPORT.md" == report_path(plan)
    text = path.read_text()
    assert text.startswith("# Study `small`: a rehearsal of the pipeline (`--scale 0.5`), not its results")
    assert "| tiny-clm50-m40 − tiny-mlm50-m40 | – | +2.050 |" in text  # the difference, untested
    assert "#### token classification" in text
    assert "significan" not in text.lower() and "p = " not in text and "p < " not in text


def test_a_rehearsal_never_writes_to_the_studys_own_report(small_plan, tmp_path):
    own = tmp_path / "results" / "RESULTS.md"
    plan = small_plan({**STUDY, "report": str(own)}, scale=0.5)
    assert report_path_of(plan) == Path(plan.root) / "rehearsal" / "REPORT.md"
    with pytest.raises(UserError, match="does not write its report"):
        write_report(plan, own.parent / "OTHER.md", figures=False)  # its folder holds the study's figures
    elsewhere = small_plan({**STUDY, "report": str(own)}, overrides=[f"report={tmp_path / 'r' / 'R.md'}"],
                           scale=0.5)
    assert report_path_of(elsewhere) == tmp_path / "r" / "R.md"  # --set report= away from the study's own
    assert report_path_of(small_plan({**STUDY, "report": str(own)})) == own  # the study itself writes there


def report_path_of(plan):
    from megamlm.study.reporting.report_target import report_path

    return report_path(plan)


def test_time_comes_from_the_local_runners_status_files(finished, tmp_path):
    for run, seconds in zip(finished.runs[:2], (60.0, 120.0)):
        write_json_atomic(status_file(finished, run), {"commands": {}, "seconds": {"pretrain": seconds,
                                                                                 "evaluate": 30.0}})
    text = write_report(finished, tmp_path / "R.md", figures=False).read_text()
    assert "Wall time of the 2 runs the local runner timed" in text
    assert "| pretrain | 3.0 |" in text and "| evaluate | 1.0 |" in text and "| total | 4.0 |" in text


def test_report_of_a_study_that_has_not_started(small_plan, tmp_path):
    path = write_report(small_plan(STUDY), tmp_path / "R.md", figures=False)
    assert "0 of 6 runs have finished." in path.read_text() and "No run has finished yet." in path.read_text()


def report_tool(*argv) -> int:
    return runpy.run_path(str(REPO / "tools" / "study_report.py"), run_name="study_report")["main"](list(argv))


def test_the_report_tool_does_not_replace_a_report_with_an_empty_one(small_plan, tmp_path, capsys):
    plan = small_plan(STUDY)
    report = tmp_path / "REPORT.md"
    report.write_text("# Study `small`: report\n\ncommitted results\n")  # an earlier report: it may be replaced
    args = [str(plan.study.source), "--root", plan.root, "--output", str(report), "--no-figures"]
    assert report_tool(*args) == 2
    assert report.read_text() == "# Study `small`: report\n\ncommitted results\n"
    assert "not replacing it with an empty one" in capsys.readouterr().err
    write_run(plan, plan.runs[0], [10, 20])  # one run with metrics: something to report
    assert report_tool(*args) == 0
    assert "# Study" in report.read_text()


def test_arms_of_one_pretraining_seed_are_compared_on_the_same_test_examples(small_plan, tmp_path):
    """Where two arms have one pretraining seed each, the report compares their final models on the same test
    examples from the predictions each fine-tuning run keeps (McNemar's exact test for accuracy)."""
    from test_evidence import PAPER, STUDY, write_results

    from megamlm.study.evidence.scores import models_at

    plan = small_plan({**STUDY, "seeds": [1], "continued_pretraining": [],
                       "evaluation": {**STUDY["evaluation"], "lrs": [3e-3], "seeds": [0]}})
    write_results(plan, **PAPER)
    model = {arm.kind: models_at(plan, arm)[0][1] for arm in arms(plan) if arm.kind in ("mlm", "clm")}
    right = {"mlm": [1] * 18 + [0] * 2, "clm": [0] * 10 + [1] * 8 + [0] * 2}  # 10 only MLM gets right, 0 only CLM
    for kind, name in model.items():
        for task in ("brown-pos", "rt-sentiment"):
            parts = [[100.0 * r] for r in right[kind]]
            write_json_atomic(Path(plan.root) / "eval" / RunKey(name, task, 3e-3, 0).predictions_path(), {
                "model": name, "task": task, "lr": 3e-3, "seed": 0, "metric": "accuracy",
                "test": {"aggregate": "mean", "ids": list(range(20)), "predictions": right[kind], "parts": parts}})
    text = write_report(plan, tmp_path / "R.md", figures=False).read_text()
    section = text.split("### Paired comparisons on the same test examples")[1].split("\n## ")[0]
    # 10 discordant examples, all one way: p = 2 / 2^10
    row = (f"| {model['clm']} − {model['mlm']} | rt-sentiment | 0 | 20 | 40.00 | 90.00 | -50.00 | McNemar exact | "
           f"0.0020 | 0 right only by {model['clm']}, 10 only by {model['mlm']} |")
    assert row in section
    five = small_plan({**STUDY, "continued_pretraining": []})  # five pretraining seeds an arm: the claims test them
    assert "### Paired comparisons" not in write_report(five, tmp_path / "five.md", figures=False).read_text()


def test_a_report_without_its_evaluations_says_they_are_missing(small_plan, tmp_path):
    """Issue 46: a chain whose evaluation jobs all failed wrote "N of N runs have finished" and nothing else; the
    report names the unfinished runs and the fine-tuning runs without a result, by model."""
    plan = small_plan(STUDY)
    text = write_report(plan, tmp_path / "R.md", figures=False).read_text()
    assert f"0 of 6 runs have finished. Not finished: {', '.join(r.name for r in plan.runs)}." in text
    keys = len(evaluation_keys(plan))
    assert f"**Evaluations missing: {keys} of the {keys} fine-tuning runs have no result**" in text
    assert "so the report has no downstream results and no claims." in text

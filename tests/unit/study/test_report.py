"""The study report from synthetic run folders and fine-tuning results: curves stitched along the lineage, seeds
summarised, differences beyond the seed spread named, a table per task family, the figures."""

import json
import runpy
from pathlib import Path

import pytest

from megamlm.eval.results import RunKey, write_json_atomic
from megamlm.study.commands import status_file
from megamlm.study.report import arms, drawn_curve, final_validation, separated, validation_curve, write_report

from test_local import make_checkpoint

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
    arm = run.label.removesuffix("-m40")
    with open(folder / "metrics.jsonl", "w") as f:
        for step in steps:
            final = MLM_LOSS[(arm, run.seed)]
            f.write(json.dumps({"kind": "validation", "step": step, "samples": step * 8, "tokens": step * 512,
                                "mlm_loss": final + (100 - step) / 100, "mlm_accuracy": 0.1, "clm_loss": 6.0}) + "\n")
    make_checkpoint(folder, run.train_iters)


def write_score(plan, model, task, seed, score):
    family = "token classification" if task == "brown-pos" else "sequence classification"
    key = RunKey(model, task, 1e-3, seed)
    write_json_atomic(Path(plan.root) / "eval" / key.relative_path(), {
        "status": "finished", "model": model, "task": task, "lr": 1e-3, "seed": seed, "family": family,
        "metric": "accuracy", "validation": {"score": score}, "test": {"score": score}, "diverged_at_step": None})


@pytest.fixture
def finished(small_plan):
    plan = small_plan(STUDY)
    for run in plan.runs:
        write_run(plan, run, range(run.branch_step + 10, run.train_iters + 1, 10))
        for model in [run.name] + ([f"{run.name}-step50"] if not run.branch_step else []):
            for ft_seed in (0, 1):
                base = 80 if "mlm100" in model else 70
                write_score(plan, model, "brown-pos", ft_seed, base + run.seed + ft_seed * 0.5
                            - (5 if model.endswith("step50") else 0))
                write_score(plan, model, "rt-sentiment", ft_seed, 60 + run.seed)
    return plan


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


def test_separation_means_disjoint_seed_ranges():
    assert separated([5.0, 5.1], [7.0, 7.2])
    assert not separated([5.0, 5.1], [5.05, 5.2])
    assert not separated([5.0], [7.0])  # one seed says nothing about the spread


def test_report_tables_and_figures(finished, tmp_path):
    pytest.importorskip("matplotlib")
    path = write_report(finished, tmp_path / "report" / "REPORT.md")
    text = path.read_text()
    assert "6 of 6 runs have finished." in text
    assert [a.label for a in arms(finished)] == ["tiny-clm100-m40", "tiny-mlm100-m40", "tiny-clm50-mlm50-m40"]
    assert "| tiny-clm100-m40 − tiny-mlm100-m40 | +2.050 **beyond** |" in text
    assert "| tiny-mlm100-m40 − tiny-clm50-mlm50-m40 | -0.075 within |" in text
    assert "#### token classification" in text and "#### sequence classification" in text
    assert ("Beyond the seed spread: tiny-clm100-m40 − tiny-mlm100-m40 (mlm_loss); "
            "tiny-clm100-m40 − tiny-clm50-mlm50-m40 (mlm_loss). Every other") in text
    # brown-pos per arm over pretraining seeds: MLM 81.25 and 82.25 (means over fine-tuning seeds)
    assert "| tiny-mlm100-m40 | brown-pos | 2 |" in text and "81.25, 82.25" in text
    for figure in ("validation.png", "score_vs_clm_fraction.png", "score_vs_steps.png"):
        assert (tmp_path / "report" / "figures" / figure).stat().st_size > 0
        assert f"(figures/{figure})" in text
    assert (Path(finished.root) / "results.md").is_file()


def test_one_seed_measures_no_spread(finished, tmp_path):
    import shutil

    shutil.rmtree(finished.save_dir(finished.run("tiny-mlm100-m40-s2")))
    text = write_report(finished, tmp_path / "R.md", figures=False).read_text()
    assert "| tiny-clm100-m40 − tiny-mlm100-m40 | +2.100 one seed |" in text


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
    report.write_text("committed results\n")
    args = [str(plan.study.source), "--root", plan.root, "--output", str(report), "--no-figures"]
    assert report_tool(*args) == 2
    assert report.read_text() == "committed results\n"
    assert "not replacing it with an empty one" in capsys.readouterr().err
    write_run(plan, plan.runs[0], [10, 20])  # one run with metrics: something to report
    assert report_tool(*args) == 0
    assert "# Study" in report.read_text()

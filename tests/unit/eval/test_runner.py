"""tools/evaluate.py end to end on a tiny model: results per run with their per-example predictions beside them,
skip on rerun, crashes and bad input, and two models compared on the same test examples (--paired)."""

import json
import shutil
from pathlib import Path

import pytest

from megamlm.eval import runner
from megamlm.eval.aggregate import summarize
from megamlm.eval.metrics import score_from_parts
from megamlm.eval.results import RunKey


def _cli():
    from helpers import tool_main

    return tool_main("evaluate")


def _cls_folder(folder: Path, test_labels=("pos", "neg")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [("good film", "pos"), ("great movie", "pos"), ("bad film", "neg"), ("boring movie", "neg")]
    for split in ("train", "validation", "test"):
        labels = test_labels if split == "test" else ("pos", "neg")
        lines = [json.dumps({"text": t, "label": labels[0] if label == "pos" else labels[1]}) for t, label in rows]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _args(model, task, out, *extra):
    return ["--model", f"tiny={model}", "--tasks", task, "--output", str(out), "--lrs", "1e-3,1e-4",
            "--seeds", "0,1", "--max-steps", "1", "--batch-size", "2", "--max-length", "32", "--no-plots", *extra]


def _result_files(out: Path):
    return sorted(p for p in (out / "runs").rglob("*.json") if not p.name.endswith(".predictions.json"))


def test_evaluate_writes_one_result_per_run_and_skips_finished(tiny_models, tmp_path, capsys):
    main = _cli()
    task = f"sequence_classification:{_cls_folder(tmp_path / 'reviews')}"
    out = tmp_path / "out"
    assert main(_args(tiny_models["bert"], task, out)) == 0
    files = _result_files(out)
    assert [p.name for p in files] == ["lr0.0001_seed0.json", "lr0.0001_seed1.json", "lr0.001_seed0.json",
                                       "lr0.001_seed1.json"]
    result = json.loads(files[0].read_text())
    assert result["status"] == "finished" and result["steps"] == 1 and result["task"] == "reviews"
    # beside it, its per-example predictions and scores: the split's score is what they sum to
    kept = json.loads(files[0].with_suffix(".predictions.json").read_text())
    assert "predictions" not in result["test"] and kept["test"]["ids"] == [0, 1, 2, 3]
    assert set(kept["test"]["predictions"]) <= {"pos", "neg"}
    assert score_from_parts(kept["test"]["aggregate"], kept["test"]["parts"]) == pytest.approx(result["test"]["score"])
    table = (out / "results.md").read_text()
    assert "| tiny | sequence classification | reviews | accuracy |" in table
    assert (out / "results.csv").read_text().startswith("model,task,family,metric,best_lr")
    stamps = [p.stat().st_mtime_ns for p in files]
    capsys.readouterr()

    assert main(_args(tiny_models["bert"], task, out)) == 0
    assert "4 runs planned, 4 already finished, 0 to run" in capsys.readouterr().out
    assert [p.stat().st_mtime_ns for p in files] == stamps

    files[1].unlink()  # a lost run is redone, alone
    assert main(_args(tiny_models["bert"], task, out)) == 0
    assert "3 already finished, 1 to run" in capsys.readouterr().out
    assert len(_result_files(out)) == 4

    # Other settings into the same folder are refused instead of mixed in.
    assert main(_args(tiny_models["bert"], task, out, "--weight-decay", "0.0")) == 2
    assert "made with other settings" in capsys.readouterr().err


def test_a_crashed_run_is_not_counted_and_is_retried(tiny_models, tmp_path, monkeypatch):
    from megamlm.eval.model_source import resolve_model

    task = f"sequence_classification:{_cls_folder(tmp_path / 'reviews')}"
    plan = runner.EvalPlan(models=[resolve_model("tiny", Path(tiny_models["llama"]), tmp_path)], tasks=[task],
                           output=tmp_path / "out", lrs=(1e-3,), seeds=(0, 1),
                           hyperparameters=runner.Hyperparameters(max_steps=1, batch_size=2))
    real = runner.run_finetuning

    def crash_on_seed_1(task, loader, hp, device, **kw):
        if hp.seed == 1:
            raise RuntimeError("simulated crash in the middle of a run")
        return real(task, loader, hp, device, **kw)

    monkeypatch.setattr(runner, "run_finetuning", crash_on_seed_1)
    outcome = runner.evaluate(plan, plots=False, log=lambda *_: None)
    assert [k.seed for k in outcome["finished"]] == [0] and [k.seed for k in outcome["failed"]] == [1]
    crashed = plan.output / RunKey("tiny", "reviews", 1e-3, 1).relative_path()
    assert not crashed.exists()
    assert "simulated crash" in crashed.with_suffix(".error.txt").read_text()
    assert outcome["summaries"][0].runs == 1 and outcome["summaries"][0].planned_runs == 2

    monkeypatch.setattr(runner, "run_finetuning", real)
    outcome = runner.evaluate(plan, plots=False, log=lambda *_: None)
    assert [k.seed for k in outcome["finished"]] == [1] and len(outcome["skipped"]) == 1
    assert crashed.exists() and not crashed.with_suffix(".error.txt").exists()


@pytest.mark.parametrize("case, message", [
    ("unknown_task", "unknown task 'sst-3'"),
    ("no_tokenizer", "has no tokenizer; copy the tokenizer files"),
    ("label_mismatch", "test labels ['bad', 'good'] do not occur in train"),
    ("empty_split", "the validation split is empty"),
    ("bad_name", "model names ['tiny'] are given twice"),
    ("bad_pair", "--paired 'tiny:other': give two different evaluated models as A:B (models: tiny)"),
])
def test_bad_input_is_one_clear_error_and_nothing_is_run(tiny_models, tmp_path, capsys, case, message):
    main = _cli()
    model, task = str(tiny_models["bert"]), f"sequence_classification:{_cls_folder(tmp_path / 'reviews')}"
    extra = []
    if case == "unknown_task":
        task = "sst-3"
    elif case == "no_tokenizer":
        model = str(tmp_path / "bare")
        shutil.copytree(tiny_models["bert"], model,
                        ignore=lambda d, names: [n for n in names
                                                 if n.startswith("tokenizer") or n == "special_tokens_map.json"])
    elif case == "label_mismatch":
        task = f"sequence_classification:{_cls_folder(tmp_path / 'mismatch', test_labels=('good', 'bad'))}"
    elif case == "empty_split":
        (tmp_path / "reviews" / "validation.jsonl").write_text("")
    elif case == "bad_name":
        extra = ["--model", f"tiny={model}"]
    elif case == "bad_pair":
        extra = ["--paired", "tiny:other"]
    out = tmp_path / "out"
    assert main(_args(model, task, out, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (out / "runs").exists()


def test_best_lr_is_chosen_on_validation_and_test_is_reported_at_it():
    def result(lr, seed, val, test):
        return {"model": "m", "task": "t", "family": "f", "metric": "accuracy", "lr": lr, "seed": seed,
                "validation": {"score": val}, "test": {"score": test}, "diverged_at_step": None}

    results = [result(1e-4, 0, 80, 70), result(1e-4, 1, 82, 72),   # best validation mean (81)
               result(1e-3, 0, 79, 90), result(1e-3, 1, 81, 95)]   # better test, worse validation (80)
    (summary,) = summarize(results, [RunKey("m", "t", lr, s) for lr in (1e-4, 1e-3) for s in (0, 1)])
    assert summary.best_lr == 1e-4 and summary.validation_mean == 81 and summary.test_mean == 71
    assert summary.test_ci == pytest.approx(12.7062 * (2 ** 0.5) / (2 ** 0.5), abs=1e-3)  # t(1) * sd / sqrt(n)


@pytest.mark.slow
def test_runs_spread_over_worker_processes(tiny_models, tmp_path, capsys):
    main = _cli()
    task = f"sequence_classification:{_cls_folder(tmp_path / 'reviews')}"
    out = tmp_path / "out"
    assert main(_args(tiny_models["eurobert"], task, out, "--num-workers", "2", "--devices", "cpu")) == 0
    results = [json.loads(p.read_text()) for p in _result_files(out)]
    assert len(results) == 4 and {r["device"] for r in results} == {"cpu"}
    assert "4 runs planned, 0 already finished, 4 to run" in capsys.readouterr().out
    assert main(_args(tiny_models["eurobert"], task, out, "--num-workers", "2")) == 0
    assert "4 already finished, 0 to run" in capsys.readouterr().out


def test_report_writes_tables_and_figures(tmp_path):
    from megamlm.eval.aggregate import per_lr
    from megamlm.eval.report import write_report

    def result(model, task, family, lr, seed, score):
        return {"model": model, "task": task, "family": family, "metric": "accuracy", "lr": lr, "seed": seed,
                "validation": {"score": score}, "test": {"score": score - 1}, "diverged_at_step": None}

    results = [result(m, t, f, lr, s, 50 + 10 * (m == "mlm") + s + 1e4 * lr)
               for m in ("mlm", "clm") for t, f in (("a", "f1"), ("b", "f2")) for lr in (1e-4, 5e-4) for s in (0, 1)]
    keys = [RunKey(r["model"], r["task"], r["lr"], r["seed"]) for r in results]
    written = write_report(tmp_path, summarize(results, keys), per_lr(results))
    assert [p.name for p in written] == ["results.md", "results.csv", "scores_per_lr.csv", "score_per_model.png",
                                         "score_vs_lr.png"]
    for png in written[3:]:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    table = (tmp_path / "results.md").read_text()
    # mlm at lr 5e-4: validation mean 50 + 10 + 0.5 + 5 = 65.5, test 64.5 +- t(1) * 0.7071 / 1.4142.
    assert "| mlm | f1 | a | accuracy | 0.0005 | 65.50 | 64.50 ± 6.35 | 2 | 4/4 |" in table
    assert len((tmp_path / "scores_per_lr.csv").read_text().splitlines()) == 1 + 8


def test_two_models_are_compared_on_the_same_test_examples(tiny_models, tmp_path):
    main = _cli()
    task = f"sequence_classification:{_cls_folder(tmp_path / 'reviews')}"
    out = tmp_path / "out"
    model = tiny_models["bert"]
    args = _args(model, task, out, "--model", f"other={model}", "--paired", "tiny:other")
    assert main(args) == 0
    section = (out / "results.md").read_text().split("## Paired comparisons on the same test examples")[1]
    rows = [line for line in section.splitlines() if line.startswith("| tiny − other | reviews |")]
    assert len(rows) == 2  # fine-tuning seeds 0 and 1, each model at its best LR
    # the same weights fine-tuned the same way predict the same: no discordant example, p = 1
    assert all("| McNemar exact | 1.0000 | 0 right only by tiny, 0 only by other |" in row for row in rows)

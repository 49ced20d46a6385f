"""tools/evaluate.py --mteb: a tiny run's export, loaded in sentence-transformers with its card's mean pooling and no
unused tensor, scored by mteb on the bundled AustenNovelClustering offline; mteb's own reader loads the result."""

import csv

import pytest
from helpers import tool_main

pytest.importorskip("mteb")
pytest.importorskip("sentence_transformers")


def test_mteb_scores_an_export_on_the_bundled_task_offline(tiny, tmp_path, capfd, monkeypatch):
    import mteb

    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(key, "1")
    monkeypatch.setenv("MTEB_CACHE", str(tmp_path / "mteb-home"))
    tiny("--train-iters", "4", "--save", tmp_path / "run")
    capfd.readouterr()
    out = tmp_path / "evals"
    assert tool_main("evaluate")(["--mteb", "AustenNovelClustering", "--model", f"tiny={tmp_path / 'run'}",
                                  "--checkpoints", "latest", "--output", str(out)]) == 0
    printed = capfd.readouterr()
    assert "UNEXPECTED" not in printed.out + printed.err  # every tensor of the export has a place
    assert "mteb: tiny (mean pooling) on AustenNovelClustering" in printed.out
    (path,) = (out / "mteb" / "results").glob("tiny/*/AustenNovelClustering.json")
    result = mteb.TaskResult.from_disk(path)
    (row,) = csv.DictReader((out / "mteb_results.csv").open())
    assert row["task"] == result.task_name == "AustenNovelClustering"
    assert float(row["main_score"]) == pytest.approx(result.get_score(), abs=1e-5)  # mteb rounds its file
    assert 0 <= result.get_score() <= 1


def test_mteb_without_models_or_tasks_is_one_line(tmp_path, capsys):
    assert tool_main("evaluate")(["--model", "m=nowhere", "--output", str(tmp_path / "o")]) == 2
    assert "pass --tasks (fine-tuning or --probe) or --mteb TASKS" in capsys.readouterr().err

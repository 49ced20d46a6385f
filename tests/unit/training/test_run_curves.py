"""Issue 23, item 9: tools/plot_runs.py draws a branch or continuation from where it leaves its parent, names a
run without validation as such, and writes to a named default folder it prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import load_tool

from megamlm.training.run_curves import DEFAULT_OUTPUT, legend_name, load_run, validation_curve


def _run(folder: Path, validation: list[tuple[int, int, float]], origin: dict | None = None, train=True) -> Path:
    folder.mkdir(parents=True)
    records = [{"kind": "train", "step": s, "loss": 5.0, "objective": "mlm", "samples": s, "tokens": t}
               for s, t, _ in validation] if train else []
    records += [{"kind": "validation", "step": s, "tokens": t, "mlm_loss": y, "clm_loss": y} for s, t, y in validation]
    if not validation:
        records = [{"kind": "train", "step": 1, "loss": 5.0, "objective": "mlm", "samples": 1, "tokens": 10}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "run_record.json").write_text(json.dumps({"switch_step": None, "lineage": [origin] if origin else []}))
    return folder


def test_branches_and_continuations_start_where_they_leave_their_parent(tmp_path):
    parent = _run(tmp_path / "clm", [(2, 100, 6.0), (4, 200, 5.0), (6, 300, 4.5)])
    branch = _run(tmp_path / "branch", [(6, 300, 4.0)],
                  {"kind": "branch", "parent_run": str(parent), "checkpoint": str(parent / "iter_0000004"), "step": 4})
    cont = _run(tmp_path / "cont", [(2, 400, 3.9)],
                {"kind": "continue", "parent_run": str(parent), "checkpoint": str(parent / "iter_0000006"), "step": 6})
    quiet = _run(tmp_path / "quiet", [])
    runs = [load_run(f) for f in (parent, branch, cont, quiet)]
    assert validation_curve(runs[1], runs, "step", "mlm_loss") == ([4, 6], [5.0, 4.0])
    assert validation_curve(runs[1], runs, "tokens", "mlm_loss") == ([200, 300], [5.0, 4.0])
    assert validation_curve(runs[2], runs, "step", "mlm_loss") == ([6, 8], [4.5, 3.9])
    assert validation_curve(runs[2], runs, "tokens", "mlm_loss") == ([300, 400], [4.5, 3.9])
    alone = [load_run(branch)]  # the parent not plotted: the run's own points
    assert validation_curve(alone[0], alone, "step", "mlm_loss") == ([6], [4.0])
    assert legend_name(runs[3]) == "quiet (no validation)" and legend_name(runs[0]) == "clm"



def test_a_curve_breaks_where_the_validation_setting_changes(tmp_path):
    """--eval-samples phase: phase 2's scores at 128 tokens are not joined to phase 1's at 64."""
    folder = _run(tmp_path / "run", [(3, 100, 6.0), (6, 200, 5.0), (9, 300, 4.0)])
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for r, length in zip([r for r in records if r["kind"] == "validation"], (64, 128, 128)):
        r["validation_seq_length"] = length
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = load_run(folder)
    xs, ys = validation_curve(run, [run], "step", "mlm_loss")
    assert xs == [3, 6, 6, 9] and ys[0] == 6.0 and ys[1] != ys[1] and ys[2:] == [5.0, 4.0]


def test_the_figures_go_to_the_named_default_folder_printed_at_the_end(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    parent = _run(tmp_path / "clm", [(2, 100, 6.0), (4, 200, 5.0)])
    tool = load_tool("plot_runs")
    monkeypatch.chdir(tmp_path)
    assert tool.main([str(parent), str(_run(tmp_path / "quiet", []))]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"wrote 3 figures to {DEFAULT_OUTPUT}/"
    assert (tmp_path / DEFAULT_OUTPUT / "validation_vs_steps.png").is_file()

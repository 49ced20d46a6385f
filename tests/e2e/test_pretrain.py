"""End to end on the bundled corpus: loss, objective switch, checkpoints, bitwise resume."""

import json
import os
import statistics
from pathlib import Path

import pytest
from forked_python import run_python

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("objective", ["mlm", "clm"])
def test_loss_falls_well_below_its_start_under_each_objective(run, objective):
    result = run("--objective", objective, "--train-iters", "40", "--lr", "3e-3")
    losses = [result.losses[s] for s in sorted(result.losses)]
    start, end = losses[0], statistics.mean(losses[-5:])
    assert start > 8.5  # ~ln(8192) at init
    assert end < start - 1.5, (start, end)


def test_clm_then_mlm_switches_at_round_switch_times_iters_and_checkpoints_there(run, tmp_path):
    result = run("--objective", "clm_then_mlm", "--switch", "0.3", "--train-iters", "15", "--save", tmp_path)
    assert result.switch_step == round(0.3 * 15)
    expected = ["clm"] * result.switch_step + ["mlm"] * (15 - result.switch_step)
    assert [result.objectives[s] for s in range(1, 16)] == expected
    saved = sorted(p.name for p in tmp_path.glob("iter_*"))
    assert saved == [f"iter_{result.switch_step:07d}", "iter_0000015"]
    config = json.loads((tmp_path / "iter_0000015" / "config.json").read_text())
    assert config["switch_step"] == result.switch_step
    assert config["config"]["objective"]["objective"] == "clm_then_mlm"
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "15"


@pytest.mark.parametrize("objective", ["clm_then_mlm"])
def test_resumed_run_reproduces_the_uninterrupted_losses_bitwise(run, tmp_path, objective):
    common = ["--objective", objective, "--switch", "0.5", "--train-iters", "12"]
    full = run(*common, "--save", tmp_path / "full", "--save-interval", "4")
    # Resume from step 4 (before the switch at 6) and train to the end.
    resumed = run(*common, "--load", tmp_path / "full" / "iter_0000004", "--save", tmp_path / "resumed")
    assert resumed.start_step == 4
    assert sorted(resumed.losses) == list(range(5, 13))
    for step in range(5, 13):
        assert resumed.losses[step] == full.losses[step], step  # bitwise on CPU
        assert resumed.sample_ids[step] == full.sample_ids[step]
        assert resumed.objectives[step] == full.objectives[step]


def test_init_from_loads_weights_only(run, tmp_path):
    first = run("--objective", "clm", "--train-iters", "6", "--save", tmp_path / "a")
    cpt = run("--objective", "mlm", "--train-iters", "6", "--init-from", tmp_path / "a")
    fresh = run("--objective", "mlm", "--train-iters", "6")
    assert cpt.start_step == 0 and sorted(cpt.losses) == list(range(1, 7))
    assert cpt.sample_ids[1] == fresh.sample_ids[1]  # fresh data position
    assert cpt.losses[1] != fresh.losses[1]  # but trained weights
    assert first.losses


def test_pretrain_py_runs_as_a_script_and_prints_the_switch(tmp_path, cache_dir):
    """``python pretrain.py`` from another folder, forked from a process that imported torch
    (tests/forked_python.py); a fresh interpreter's start is the torchrun and host-memory tests'."""
    env = {**os.environ, "MEGAMLM_CACHE": cache_dir, "PATH": "/usr/bin:/bin"}
    out = run_python(
        [str(REPO / "pretrain.py"), "--objective", "clm_then_mlm", "--switch", "0.25",
         "--train-iters", "8", "--seq-length", "32", "--global-batch-size", "4", "--micro-batch-size", "2",
         "--log-interval", "2"], tmp_path, env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "switch step 2" in out.stdout
    assert "objective switch after step 2: clm -> mlm" in out.stdout
    assert "step 8/8 | objective mlm | loss" in out.stdout


def test_tensorboard_scalars_are_written(run, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run("--objective", "clm_then_mlm", "--switch", "0.5", "--train-iters", "4", "--tensorboard-dir", tmp_path)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"loss", "loss/clm", "loss/mlm", "lr", "grad_norm"} <= tags
    assert [e.step for e in events.Scalars("loss")] == [1, 2, 3, 4]
    assert [e.step for e in events.Scalars("loss/mlm")] == [3, 4]


def test_a_tokenizer_without_data_path_retokenizes_the_bundled_corpus(run, tmp_path):
    """--tokenizer-model alone: the bundled corpus in another vocabulary (the miniature's 2,048-id BPE), so the
    first loss is about ln(2048) = 7.6, not ln(8192) = 9.0, and the checkpoint names that tokenizer."""
    from megamlm.data.embedded import MINIATURE_TOKENIZER_FILE

    tokenizer = MINIATURE_TOKENIZER_FILE
    result = run("--tokenizer-model", tokenizer, "--train-iters", "2", "--save", tmp_path)
    assert 7.0 < result.losses[1] < 8.2, result.losses
    config = json.loads((tmp_path / "iter_0000002" / "config.json").read_text())
    assert config["config"]["data"]["tokenizer_model"] == str(tokenizer)

"""Held-out validation of both objectives, metrics.jsonl across a resume, and the study figures."""

import numpy as np
import pytest
from helpers import load_tool, write_dataset

from megamlm.cli import main
from megamlm.data import IndexedDataset
from megamlm.training.metrics_file import read_metrics

VALIDATION = ["--split", "969,30,1", "--eval-interval", "2", "--eval-iters", "2"]

pytestmark = pytest.mark.usefixtures("one_thread")


def test_every_evaluation_scores_mlm_and_clm_at_the_interval_the_switch_and_the_end(tiny, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tiny("--objective", "clm_then_mlm", "--switch-step", "3", "--train-iters", "7", *VALIDATION, "--save",
         tmp_path / "run", "--tensorboard-dir", tmp_path / "tb")
    records = read_metrics(tmp_path / "run", kind="validation")
    assert [r["step"] for r in records] == [2, 3, 4, 6, 7]
    out = capsys.readouterr().out
    assert f"validation at step 3 | mlm loss {records[1]['mlm_loss']:.4f} | mlm accuracy" in out
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    for name in ("mlm_loss", "mlm_accuracy", "clm_loss"):
        assert [(e.step, e.value) for e in events.Scalars(f"validation/{name}")] == [
            (r["step"], pytest.approx(r[name], rel=1e-6)) for r in records]
    for r in records:
        assert r["validation_samples"] == 8  # 2 global batches of 4
        assert r["mlm_loss"] > 0 and r["clm_loss"] > 0 and 0 <= r["mlm_accuracy"] <= 1
        assert r["clm_tokens"] == 8 * 31 and 0 < r["mlm_tokens"] < 8 * 32
        assert r["tokens"] == r["step"] * 4 * 32
    assert len({r["mlm_tokens"] for r in records}) == 1  # the same masks every time


def test_every_arm_is_scored_on_the_same_tokens(tiny, tmp_path):
    tiny("--objective", "mlm", "--train-iters", "4", *VALIDATION, "--save", tmp_path / "mlm")
    tiny("--objective", "clm", "--train-iters", "4", *VALIDATION, "--save", tmp_path / "clm")
    mlm, clm = (read_metrics(tmp_path / name, kind="validation")[-1] for name in ("mlm", "clm"))
    assert (mlm["mlm_tokens"], mlm["clm_tokens"]) == (clm["mlm_tokens"], clm["clm_tokens"])
    assert mlm["mlm_loss"] < clm["mlm_loss"] and clm["clm_loss"] < mlm["clm_loss"]  # each run is better at its own
    # An arm trained with another mask ratio is scored with the study's masks when --eval-mask-ratio says so.
    for name, flags in (("ratio_02", []), ("ratio_02_eval_04", ["--eval-mask-ratio", "0.4"])):
        tiny("--objective", "mlm", "--train-iters", "4", "--mask-ratio", "0.2", *flags, *VALIDATION, "--save",
             tmp_path / name)
    other, fixed = (read_metrics(tmp_path / name, kind="validation")[-1] for name in ("ratio_02", "ratio_02_eval_04"))
    assert other["mlm_tokens"] < mlm["mlm_tokens"] == fixed["mlm_tokens"]


def test_validation_and_metrics_survive_a_crash_and_resume_without_a_duplicate_step(tiny, tmp_path):
    common = ["--objective", "clm_then_mlm", "--switch-step", "3", "--train-iters", "6", *VALIDATION,
              "--log-interval", "1", "--save-interval", "2"]
    tiny(*common, "--save", tmp_path / "straight")
    tiny(*common, "--save", tmp_path / "crashed", "--exit-interval", "5")
    # A crash after step 5 was logged but before its checkpoint was whole: the relaunch resumes from step 4.
    for path in (tmp_path / "crashed" / "iter_0000005").iterdir():
        path.unlink()
    (tmp_path / "crashed" / "iter_0000005").rmdir()
    resumed = tiny(*common, "--save", tmp_path / "crashed")
    assert resumed.start_step == 4
    straight, crashed = read_metrics(tmp_path / "straight"), read_metrics(tmp_path / "crashed")
    steps = [(r["kind"], r["step"]) for r in crashed]
    assert len(steps) == len(set(steps)) and steps == [(r["kind"], r["step"]) for r in straight]
    for a, b in zip(straight, crashed):
        exact = {k: v for k, v in a.items() if k != "tokens_per_second"}
        assert exact == {k: b[k] for k in exact}, a["step"]  # bitwise on CPU, validation after the resume too


def write_corpus(prefix, documents: int, size: int = 40) -> str:
    rng = np.random.default_rng(0)
    write_dataset(prefix, [rng.integers(10, 8000, size) for _ in range(documents)])
    return str(IndexedDataset(prefix).prefix)


def test_valid_data_path_gives_the_validation_set(tiny, tmp_path, cache_dir):
    from megamlm.data import prepare_embedded_corpus

    _, tokenizer = prepare_embedded_corpus(cache_dir)
    valid = write_corpus(tmp_path / "valid" / "held_out", 20)
    tiny("--objective", "mlm", "--train-iters", "4", "--valid-data-path", valid, "--eval-iters", "1", "--save",
         tmp_path / "run")
    [record] = read_metrics(tmp_path / "run", kind="validation")
    assert record["step"] == 4 and record["clm_tokens"] == 4 * 31


@pytest.mark.parametrize("argv,message", [
    (["--split", "100,0,0"], "--split 100,0,0 leaves no validation documents"),
    (["--split", "969,30,1", "--eval-iters", "1000"], "--eval-iters 1000 x --global-batch-size 4 = 4000 validation "
                                                      "samples, but the validation set (--split 969,30,1) holds"),
    (["--eval-interval", "10"], "--eval-interval needs a validation set: pass --split"),
    (["--split", "969,30,1", "--valid-data-path", "x"], "--split and --valid-data-path both give a validation set"),
    (["--split", "a,b"], "--split a,b does not parse"),
    (["--save-at", "5,3"], "--save-at 5,3 is not strictly increasing"),
    (["--save-at", "3,50"], "--save-at step 50 is outside this run's steps 1-8"),
    (["--switch", "0.5", "--switch-step", "3"], "--switch and --switch-step give the same setting two ways"),
])
def test_bad_study_flags_get_one_line_and_touch_nothing(tmp_path, capsys, tiny_flags, argv, message):
    save = tmp_path / "run"
    assert main([*tiny_flags, "--objective", "clm_then_mlm", "--train-iters", "8", "--save", str(save), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not save.exists()


def test_a_split_whose_validation_part_rounds_to_no_document_is_named(tmp_path, capsys, tiny_flags, cache_dir):
    from megamlm.data import prepare_embedded_corpus

    _, tokenizer = prepare_embedded_corpus(cache_dir)
    data = write_corpus(tmp_path / "small" / "c", 50)  # 1% of 50 documents: round(49.5) = round(50.0) = 50
    argv = [*tiny_flags, "--data-path", data, "--tokenizer-model", tokenizer, "--split", "99,1,0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the validation part of --split (weights 0.99, 0.01, 0) of" in err and "holds 0 sequences" in err, err


def test_plot_runs_draws_the_figures_of_two_runs(tiny, tmp_path):
    pytest.importorskip("matplotlib")
    tiny("--objective", "mlm", "--train-iters", "4", *VALIDATION, "--log-interval", "1", "--save", tmp_path / "mlm")
    tiny("--objective", "clm_then_mlm", "--switch-step", "2", "--train-iters", "4", *VALIDATION, "--log-interval",
         "1", "--save", tmp_path / "clm_then_mlm")
    tool = load_tool("plot_runs")
    assert tool.main([str(tmp_path / "mlm"), str(tmp_path / "clm_then_mlm"), "--output", str(tmp_path / "fig")]) == 0
    for name in ("validation_vs_steps.png", "validation_vs_tokens.png", "training_loss.png"):
        png = (tmp_path / "fig" / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000, name
    assert tool.main([str(tmp_path / "nothing"), "--output", str(tmp_path / "fig")]) == 2


def test_eval_samples_phase_scores_each_phase_at_its_own_length_and_masking(tiny, tmp_path):
    """A context extension (64 then 128 tokens): with --eval-samples phase, phase 2's validations score 128-token
    samples at its mask ratio; by default every validation scores the run's --seq-length and masking; each record
    names the length and masking it scored with, and validation never changes a step."""
    import yaml

    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump({"phases": [{"steps": 3, "seq_length": 64, "mask_ratio": 0.3},
                                                 {"seq_length": 128, "mask_ratio": 0.15}]}))
    run = ["--config", config, "--seq-length", "128", "--train-iters", "6", "--split", "969,30,1",
           "--eval-interval", "100", "--eval-iters", "1"]
    per_run = tiny(*run, "--save", tmp_path / "run")
    per_phase = tiny(*run, "--eval-samples", "phase", "--save", tmp_path / "phase")
    assert per_phase.losses == per_run.losses
    by_phase, by_run = (read_metrics(tmp_path / name, kind="validation") for name in ("phase", "run"))
    assert [(r["step"], r["validation_seq_length"], r["clm_tokens"], r["validation_masking"]["mask_ratio"])
            for r in by_phase] == [(3, 64, 4 * 63, 0.3), (6, 128, 4 * 127, 0.15)]
    assert [(r["step"], r["validation_seq_length"], r["clm_tokens"], r["validation_masking"]["mask_ratio"])
            for r in by_run] == [(3, 128, 4 * 127, 0.4), (6, 128, 4 * 127, 0.4)]
    assert all(r["validation_sample_mode"] == "windows" for r in by_phase + by_run)
    assert by_phase[1]["mlm_loss"] != by_run[1]["mlm_loss"]  # another mask ratio on the same model

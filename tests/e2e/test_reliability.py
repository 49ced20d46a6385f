"""Reliability in-process on the bundled corpus: non-finite steps, early exits with auto-resume, run records."""

import errno
import json
import os
import signal
import time

import numpy as np
import pytest
import torch

from megamlm.checkpoint import load_model_weights
from megamlm.errors import ResumeError
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer
from megamlm.training import trainer
from megamlm.training.nonfinite import NonFiniteError

GBS = 4  # the TINY settings' global batch size (conftest.py)


pytestmark = pytest.mark.usefixtures("one_thread")


class StepHook:
    """Wraps the trainer's step function: optional non-finite forward at chosen steps, and whether each step
    changed the weights."""

    def __init__(self, monkeypatch, nan_steps=(), on_step=None):
        self.real = trainer.train_step
        self.nan_steps = set(nan_steps)
        self.on_step = on_step
        self.step = 0
        self.weights_changed: dict[int, bool] = {}
        monkeypatch.setattr(trainer, "train_step", self)

    def __call__(self, setup, optimizer, micro_batches, *args, **kwargs):
        self.step += 1
        model = setup.pm.model
        before = [p.detach().clone() for p in model.parameters()]
        handle = None
        if self.step in self.nan_steps:
            handle = model.register_forward_hook(lambda module, inputs, out: out * float("nan"))
        try:
            stats = self.real(setup, optimizer, micro_batches, *args, **kwargs)
        finally:
            if handle is not None:
                handle.remove()
        self.weights_changed[self.step] = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        if self.on_step:
            self.on_step(self.step)
        return stats


def test_a_nan_step_is_skipped_without_an_update_and_the_run_continues(tiny, monkeypatch):
    hook = StepHook(monkeypatch, nan_steps=[3])
    result = tiny("--train-iters", "6")
    assert result.skipped_steps == [3]
    assert not np.isfinite(result.losses[3])
    assert all(np.isfinite(result.losses[s]) for s in (1, 2, 4, 5, 6))
    # (step 6 has learning rate 0 at the end of the decay, so it is left out)
    assert [hook.weights_changed[s] for s in range(1, 6)] == [True, True, False, True, True]


def test_persistent_nan_stops_naming_steps_and_samples_with_a_checkpoint_of_the_last_good_state(tiny, tmp_path,
                                                                                                monkeypatch):
    StepHook(monkeypatch, nan_steps=range(3, 100))
    with pytest.raises(NonFiniteError) as err:
        tiny("--train-iters", "8", "--max-skipped-steps", "3", "--save", tmp_path, "--save-interval", "2")
    message = str(err.value)
    assert "3 steps in a row had a non-finite loss or gradient norm" in message
    for step in (3, 4, 5):
        first = (step - 1) * GBS
        assert f"step {step}: loss nan" in message and f"samples [{first}-{first + GBS - 1}]" in message
    assert "step 6" not in message
    assert f"Checkpoint {tmp_path / 'iter_0000005'} holds the weights and optimizer state of step 2" in message
    weights = {}
    for step in (2, 5):
        args = ModelArgs(**json.loads((tmp_path / f"iter_{step:07d}" / "config.json").read_text())["model_args"])
        weights[step] = Transformer(args)
        load_model_weights(tmp_path / f"iter_{step:07d}", weights[step])
    for a, b in zip(weights[2].parameters(), weights[5].parameters()):
        assert torch.equal(a, b)


def test_the_same_command_with_exit_interval_resumes_each_time_and_matches_one_run(tiny, tmp_path):
    common = ["--objective", "clm_then_mlm", "--switch", "0.5", "--train-iters", "8"]
    full = tiny(*common, "--save", tmp_path / "full")
    parts = [tiny(*common, "--save", tmp_path / "parts", "--exit-interval", "3") for _ in range(3)]
    assert [p.start_step for p in parts] == [0, 3, 6]
    assert [p.stop_reason is not None for p in parts] == [True, True, False]
    assert parts[1].resumed_from == tmp_path / "parts" / "iter_0000003"
    losses = {s: v for p in parts for s, v in p.losses.items()}
    objectives = {s: v for p in parts for s, v in p.objectives.items()}
    assert losses == full.losses  # bitwise on CPU: weights, optimizer, LR, objective phase and data position
    assert objectives == full.objectives
    assert sorted(p.name for p in (tmp_path / "parts").glob("iter_*")) == [
        "iter_0000003", "iter_0000004", "iter_0000006", "iter_0000008"]  # 4: the objective switch


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_during_a_step_saves_after_it_and_the_relaunch_continues_bitwise(tiny, tmp_path, monkeypatch,
                                                                                     signum):
    common = ["--train-iters", "6", "--save", tmp_path / "run"]
    full = tiny("--train-iters", "6")
    handler_before = signal.getsignal(signum)
    StepHook(monkeypatch, on_step=lambda step: step == 2 and os.kill(os.getpid(), signum))
    first = tiny(*common)
    monkeypatch.undo()
    assert first.stop_reason == f"signal {signum.name}" and sorted(first.losses) == [1, 2]
    assert first.last_checkpoint.name == "iter_0000002"
    assert [p.name for p in (tmp_path / "run").glob("iter_*")] == ["iter_0000002"]
    assert signal.getsignal(signum) == handler_before  # handlers restored after the run
    second = tiny(*common)
    assert second.start_step == 2
    assert {**first.losses, **second.losses} == full.losses


def test_exit_duration_stops_with_a_checkpoint(tiny, tmp_path):
    result = tiny("--train-iters", "6", "--save", tmp_path, "--exit-duration-in-mins", "1e-6")
    assert result.stop_reason == "--exit-duration-in-mins 1e-06 reached"
    assert sorted(result.losses) == [1] and [p.name for p in tmp_path.glob("iter_*")] == ["iter_0000001"]


def test_exit_duration_counts_from_the_runs_start_not_from_the_processs(tiny, monkeypatch, tmp_path):
    # The process has lived two hours before this run (a long test session, a study driver running one run after
    # another): the run's hour starts with the run.
    process_clock = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: process_clock() + 7200.0)
    result = tiny("--train-iters", "4", "--save", tmp_path, "--exit-duration-in-mins", "60")
    assert result.stop_reason is None and sorted(result.losses) == [1, 2, 3, 4]


def test_run_record_is_written_and_resuming_on_other_data_or_shape_is_refused(tiny, tmp_path, other_corpus):
    save = tmp_path / "ckpt"
    tiny("--train-iters", "4", "--save", save, "--exit-interval", "2")
    record = json.loads((save / "run_record.json").read_text())
    assert record["software"]["torch"] == torch.__version__ and "python" in record["software"]
    assert len(record["data_fingerprint"]) == 32 and record["world_size"] == 1
    assert record["git"] is None or len(record["git"]["commit"]) == 40
    assert json.loads((save / "iter_0000002" / "config.json").read_text())["data_fingerprint"] == \
        record["data_fingerprint"]

    data_path, tokenizer = other_corpus
    other = ["--data-path", data_path, "--tokenizer-model", tokenizer, "--train-iters", "4", "--save", save]
    with pytest.raises(ResumeError, match="was trained on other data .* --override-data"):
        tiny(*other)
    with pytest.raises(ResumeError, match="--hidden-size is 32 in the checkpoint and 64 here"):
        tiny("--train-iters", "4", "--save", save, "--hidden-size", "64")
    resumed = tiny(*other, "--override-data")
    assert resumed.start_step == 2 and sorted(resumed.losses) == [3, 4]
    assert resumed.sample_ids[3] == list(range(2 * GBS, 3 * GBS))  # the data position carries over


def test_a_relaunch_with_load_continues_from_its_own_save_folder_not_from_load_again(tiny, tmp_path):
    tiny("--train-iters", "6", "--save", tmp_path / "base", "--exit-interval", "2")
    branch = ["--train-iters", "6", "--load", tmp_path / "base", "--save", tmp_path / "branch", "--exit-interval", "3"]
    first = tiny(*branch)
    assert first.start_step == 2 and first.stop_reason is not None
    again = tiny(*branch)
    assert again.start_step == 3 and again.resumed_from == tmp_path / "branch" / "iter_0000003"


def test_a_full_disk_during_a_periodic_save_stops_the_run_clearly_and_the_relaunch_resumes(tiny, tmp_path,
                                                                                          monkeypatch):
    from torch.distributed.checkpoint.filesystem import FileSystem

    from megamlm.checkpoint import CheckpointSaveError

    def full_disk(fs, path, mode):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    StepHook(monkeypatch, on_step=lambda step: step == 3 and monkeypatch.setattr(FileSystem, "create_stream",
                                                                                 full_disk))
    common = ["--train-iters", "6", "--save", tmp_path, "--save-interval", "2"]
    with pytest.raises(CheckpointSaveError, match=r"step 4 .*No space left on device \(ENOSPC\).*iter_0000002 is "
                                                  r"untouched"):
        tiny(*common)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".megamlm.lock", "iter_0000002",
                                                          "latest_checkpointed_iteration.txt", "run_record.json"]
    assert (tmp_path / ".megamlm.lock").read_text() == ""  # released
    again = tiny(*common)
    assert again.start_step == 2 and sorted(again.losses) == [3, 4, 5, 6]


def test_the_command_line_reports_a_persistent_nan_in_one_line_with_exit_code_3(cache_dir, monkeypatch, capsys,
                                                                             tiny_flags):
    from megamlm.cli import main

    StepHook(monkeypatch, nan_steps=range(1, 100))
    assert main([*tiny_flags, "--train-iters", "6", "--max-skipped-steps", "2"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: 2 steps in a row had a non-finite loss") and "Traceback" not in err

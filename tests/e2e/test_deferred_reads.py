"""The step numbers read only when needed (the GPU path, forced here on CPU) give the synchronous loop's logged
values, skips and stops; the log rows carry MFU and peak memory as metrics.throughput computes them."""

import json

import pytest
import torch
from helpers import FAST, TINY
from step_recorder import StepRecorder

from megamlm.checkpoint import load_model_weights
from megamlm.config import parse_args
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer
from megamlm.training import metrics, trainer
from megamlm.training.metrics import model_flops
from megamlm.training.metrics_file import read_metrics
from megamlm.training.nonfinite import NonFiniteError
from megamlm.training.trainer import pretrain

GBS = 4  # TINY's global batch size
TIMING = ("tokens_per_second", "mfu", "peak_memory_mib")

pytestmark = pytest.mark.usefixtures("one_thread", "cache_dir")


class Poison:
    """Wraps the trainer's step: a NaN forward at ``nan_steps``, a finite 1e20 gradient (its norm overflows) at
    ``huge_steps``; records each step's predicted tokens."""

    def __init__(self, monkeypatch, nan_steps=(), huge_steps=()):
        self.real, self.nan_steps, self.huge_steps = trainer.train_step, set(nan_steps), set(huge_steps)
        self.predicted: dict[int, int] = {}
        monkeypatch.setattr(trainer, "train_step", self)

    def __call__(self, setup, optimizer, micro_batches, *args, **kwargs):
        step = micro_batches[0].sample_ids[0] // GBS + 1
        model = setup.pm.model
        handle = None
        if step in self.nan_steps:
            handle = model.register_forward_hook(lambda module, inputs, out: out * float("nan"))
        elif step in self.huge_steps:
            handle = model.layers["0"].mlp.up_proj.weight.register_hook(lambda g: g + 1e20)
        try:
            out = self.real(setup, optimizer, micro_batches, *args, **kwargs)
        finally:
            if handle is not None:
                handle.remove()
        self.predicted[step] = out.predicted_tokens
        return out


def train(folder, *argv, read_on_device, on_step=None):
    cfg = parse_args(FAST + TINY + ["--save", str(folder)] + [str(a) for a in argv])
    return pretrain(cfg, on_step=on_step, read_on_device=read_on_device)


def untimed(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def weights(folder):
    args = ModelArgs(**json.loads((folder / "config.json").read_text())["model_args"])
    model = Transformer(args)
    load_model_weights(folder, model)
    return list(model.parameters())


def test_reading_at_log_lines_logs_what_the_synchronous_loop_logs(tmp_path, monkeypatch):
    common = ["--train-iters", "10", "--log-interval", "4", "--objective", "clm_then_mlm", "--switch", "0.5"]
    results = {}
    for read_on_device in (False, True):
        Poison(monkeypatch, nan_steps=[3], huge_steps=[6])
        results[read_on_device] = train(tmp_path / str(read_on_device), *common, read_on_device=read_on_device)
        monkeypatch.undo()
    sync, deferred = (read_metrics(tmp_path / str(k), "train") for k in (False, True))
    assert [r["step"] for r in sync] == [4, 5, 8, 10]  # step 5 is the switch
    assert untimed(deferred) == untimed(sync)  # loss and grad-norm means with the NaN and the inf included
    assert results[True].total_skipped == results[False].total_skipped == 2
    for a, b in zip(weights(tmp_path / "False" / "iter_0000010"), weights(tmp_path / "True" / "iter_0000010")):
        assert torch.equal(a, b)


def test_with_an_on_step_callback_every_step_is_read_with_the_synchronous_values(tmp_path, monkeypatch):
    recorders = {}
    for read_on_device in (False, True):
        Poison(monkeypatch, huge_steps=[2])
        recorders[read_on_device] = StepRecorder()
        train(tmp_path / str(read_on_device), "--train-iters", "4", read_on_device=read_on_device,
              on_step=recorders[read_on_device])
        monkeypatch.undo()
    sync, deferred = recorders[False], recorders[True]
    assert deferred.skipped_steps == sync.skipped_steps == [2]
    assert deferred.grad_norms == sync.grad_norms and deferred.grad_norms[2] == float("inf")
    assert deferred.losses == sync.losses
    assert all(isinstance(v, float) for v in deferred.losses.values())


def test_the_streak_stop_read_later_counts_the_same_steps_and_keeps_the_last_good_state(tmp_path, monkeypatch):
    """--max-skipped-steps 3 with NaN from step 3 on: the synchronous loop stops at step 5; read every 4 steps,
    the stop comes at step 8 with the same streak, and steps 6-8 changed nothing."""
    common = ["--train-iters", "12", "--log-interval", "4", "--max-skipped-steps", "3", "--save-at", "2"]
    errors, states = {}, {}
    for read_on_device, stop_step in ((False, 5), (True, 8)):
        Poison(monkeypatch, nan_steps=range(3, 100))
        with pytest.raises(NonFiniteError) as err:
            train(tmp_path / str(read_on_device), *common, read_on_device=read_on_device)
        monkeypatch.undo()
        errors[read_on_device] = str(err.value)
        folder = tmp_path / str(read_on_device) / f"iter_{stop_step:07d}"
        assert f"Checkpoint {folder} holds the weights and optimizer state of step 2" in errors[read_on_device]
        states[read_on_device] = json.loads((folder / "train_state.json").read_text())["state"]["guard"]
        for a, b in zip(weights(tmp_path / str(read_on_device) / "iter_0000002"), weights(folder)):
            assert torch.equal(a, b)
    assert states[True] == states[False]
    assert [s["step"] for s in states[True]["in_a_row"]] == [3, 4, 5] and states[True]["total_skipped"] == 3
    assert errors[True].split(" Checkpoint ")[0] == errors[False].split(" Checkpoint ")[0]  # same streak named
    assert "Steps 6-8 ran before the host read the step flags; their updates were held back." in errors[True]


def test_train_rows_carry_mfu_and_peak_memory_as_throughput_computes_them(tmp_path, monkeypatch):
    poison = Poison(monkeypatch)
    run = tmp_path / "cpu"
    train(run, "--train-iters", "4", "--log-interval", "2", read_on_device=None)
    rows = read_metrics(run, "train")
    assert [(r["mfu"], r["peak_memory_mib"]) for r in rows] == [(None, None)] * 2  # CPU: no known peak, no GPU

    peak_flops = 1e12
    monkeypatch.setattr(metrics, "device_peak_flops", lambda device, override=None: peak_flops)
    monkeypatch.setattr(metrics, "peak_device_memory_mib", lambda device: 123.5)
    run = tmp_path / "known_peak"
    train(run, "--train-iters", "6", "--log-interval", "2", "--objective", "clm_then_mlm", "--switch", "0.5",
          read_on_device=None)
    args = ModelArgs(**json.loads((run / "iter_0000006" / "config.json").read_text())["model_args"])
    rows = read_metrics(run, "train")
    assert [(r["step"], r["objective"]) for r in rows] == [(2, "clm"), (3, "clm"), (4, "mlm"), (6, "mlm")]
    previous = 0
    for row in rows:
        steps = range(previous + 1, row["step"] + 1)
        tokens = len(steps) * GBS * args.max_seq_length
        predicted = sum(poison.predicted[s] for s in steps)
        seconds = tokens / row["tokens_per_second"]
        want = metrics.throughput(args, tokens, predicted, row["objective"] == "clm", seconds, torch.device("cpu"))
        assert row["mfu"] == pytest.approx(want.mfu, rel=1e-9)
        assert row["mfu"] == pytest.approx(model_flops(args, tokens, predicted, row["objective"] == "clm")
                                           / seconds / peak_flops, rel=1e-9)
        assert row["peak_memory_mib"] == want.peak_memory_mib == 123.5
        previous = row["step"]

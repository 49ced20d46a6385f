"""The device-side skip (the GPU path: fused AdamW skips on the device, the host reads the step numbers only at
log lines and saves), forced on CPU, under data and tensor parallelism: when one rank's numbers break (a NaN
forward, or a finite gradient whose square overflows) and the other's do not, every rank skips that step, and the
run logs and ends with what the synchronous single-process run logs and ends with."""

from __future__ import annotations

import json

import pytest
import torch
from harness import spawn
from trainer_checks import FLAGS, pretrain_poisoned_on_rank

from megamlm.checkpoint import load_model_weights
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer
from megamlm.training.metrics_file import read_metrics

pytestmark = pytest.mark.distributed

POISON_STEP = 2
RUN = FLAGS + ["--train-iters", "6", "--log-interval", "3", "--save-interval", "6"]


def weights(folder):
    args = ModelArgs(**json.loads((folder / "config.json").read_text())["model_args"])
    model = Transformer(args)
    load_model_weights(folder, model)
    return dict(model.named_parameters())


def train_rows(folder):
    return [{k: r[k] for k in ("step", "objective", "loss", "grad_norm")} for r in read_metrics(folder, "train")]


@pytest.fixture(scope="module")
def synchronous(cache, tmp_path_factory):
    """Single-process runs that read every step on the host, poisoned at the same step."""
    runs = {}
    for poison in ("nan", "huge"):
        out = tmp_path_factory.mktemp(f"sync-{poison}")
        pretrain_poisoned_on_rank(0, 1, RUN + ["--save", out / "ckpt"], str(out), poison, POISON_STEP, 0, False)
        runs[poison] = out
    return runs


# A NaN forward on one TP rank reaches the other through the vocabulary-parallel loss's collectives, so nan-tp2
# decides its skip as nan-dp2 (a rank alone with it) and huge-tp2 (a skip under TP) do: the slow suite's.
@pytest.mark.parametrize("poison,layout", [("nan", []), ("huge", []), ("huge", ["--tp", "2"]),
                                           pytest.param("nan", ["--tp", "2"], marks=pytest.mark.slow)],
                         ids=["nan-dp2", "huge-dp2", "huge-tp2", "nan-tp2"])
def test_numbers_broken_on_one_rank_are_skipped_on_every_rank_as_the_synchronous_run_skips_them(
        synchronous, poison, layout, tmp_path):
    spawn(pretrain_poisoned_on_rank, 2, RUN + layout + ["--save", tmp_path / "ckpt"], str(tmp_path), poison,
          POISON_STEP, 1, True)
    reference = synchronous[poison]
    assert json.loads((reference / "rank0.json").read_text()) == {"total_skipped": 1, "skip_on_device": False}
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == {"total_skipped": 1,
                                                                           "skip_on_device": True}
    expected, got = train_rows(reference / "ckpt"), train_rows(tmp_path / "ckpt")
    assert [r["step"] for r in got] == [r["step"] for r in expected] == [3, 6]
    assert got[0]["grad_norm"] is None and expected[0]["grad_norm"] is None  # the interval's mean holds the inf/NaN
    if poison == "nan":
        assert got[0]["loss"] is None and expected[0]["loss"] is None
    else:
        assert got[0]["loss"] == pytest.approx(expected[0]["loss"], rel=1e-4)
    assert got[1]["loss"] == pytest.approx(expected[1]["loss"], rel=1e-4)
    assert got[1]["grad_norm"] == pytest.approx(expected[1]["grad_norm"], rel=1e-3)
    reference_weights = weights(reference / "ckpt" / "iter_0000006")
    for name, value in weights(tmp_path / "ckpt" / "iter_0000006").items():
        torch.testing.assert_close(value, reference_weights[name], rtol=1e-4, atol=1e-5, msg=name)

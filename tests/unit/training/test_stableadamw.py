"""Issue 44, item 6: --optimizer stableadamw trains with torch-optimi's StableAdamW (ModernBERT's implementation): the
same steps as a plain loop with optimi.StableAdamW, its state saved and resumed exactly; without the package the flag
is one line naming the extra."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import TINY
from step_recorder import StepRecorder

from megamlm.config import ConfigError, parse_args
from megamlm.training.trainer import pretrain

optimi = pytest.importorskip("optimi", reason='StableAdamW comes from torch-optimi: pip install "megamlm[optimi]"')

FLAGS = [*TINY, "--objective", "clm", "--optimizer", "stableadamw", "--lr-decay-style", "constant",
         "--lr-warmup-iters", "0", "--lr", "3e-3", "--log-interval", "1"]


def run(*argv):
    recorder = StepRecorder()
    result = pretrain(parse_args(FLAGS + [str(a) for a in argv]), on_step=recorder)
    return SimpleNamespace(**vars(result), **vars(recorder))


def plain_loop(cfg, steps: dict[int, list[int]]) -> dict[int, float]:
    """The run's model built from its seed, trained on the given global batches (step -> sample ids) by a loop of
    its own: one forward over the whole global batch, the mean next-token loss, clipping, optimi.StableAdamW."""
    from megamlm.data import StreamSpec, build_train_dataset
    from megamlm.model.transformer import Transformer
    from megamlm.training.resolved_run import backends_on_device, resolve_run

    t = cfg.training
    plan = resolve_run(cfg)
    torch.manual_seed(t.seed)
    model = Transformer(plan.model_args, backends_on_device(plan, cfg, torch.device("cpu")))
    last = max(k for ids in steps.values() for k in ids)
    dataset = build_train_dataset(StreamSpec(plan.data_path, plan.model_args.max_seq_length, last + 1, t.seed,
                                             vocab_size=plan.model_args.vocab_size, split=plan.split), None)
    params = list(model.parameters())
    optimizer = optimi.StableAdamW(
        [{"params": [p for p in params if p.ndim >= 2], "weight_decay": t.weight_decay},
         {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
        lr=t.lr, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps, triton=False)
    losses = {}
    for step, ids in sorted(steps.items()):
        tokens = torch.from_numpy(np.stack([dataset[k] for k in ids]).astype(np.int64))
        logits = model.logits(model(tokens, causal=True))
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, t.clip_grad)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses[step] = loss.item()
    return losses


def test_a_stableadamw_run_equals_a_plain_loop_with_optimi(cache_dir):
    """Issue 44 acceptance: the trainer's steps equal a hand-written loop with optimi.StableAdamW over the same
    batches to 1e-6 (each step's loss depends on every update before it)."""
    result = run("--train-iters", "6")
    reference = plain_loop(parse_args(FLAGS + ["--train-iters", "6"]), result.sample_ids)
    assert sorted(result.losses) == list(range(1, 7))
    for step in range(1, 7):
        assert result.losses[step] == pytest.approx(reference[step], rel=1e-6, abs=1e-6), step
    # and it is not AdamW: the same run with AdamW takes other steps
    adamw = run("--train-iters", "3", "--optimizer", "adamw")
    assert adamw.losses[1] == result.losses[1] and adamw.losses[3] != result.losses[3]


def test_a_stableadamw_run_resumes_bitwise(cache_dir, tmp_path):
    """Its state (moments, the step count it keeps in each parameter group) is checkpointed and restored."""
    full = run("--train-iters", "6", "--save", tmp_path / "full", "--save-interval", "3")
    resumed = run("--train-iters", "6", "--load", tmp_path / "full" / "iter_0000003", "--save", tmp_path / "resumed")
    assert resumed.start_step == 3 and sorted(resumed.losses) == [4, 5, 6]
    for step in (4, 5, 6):
        assert resumed.losses[step] == full.losses[step], step  # bitwise on CPU


def test_without_optimi_the_flag_is_one_line_naming_the_extra(monkeypatch):
    from megamlm import extras

    monkeypatch.setitem(extras.EXTRAS, "optimi", extras.Extra("megamlm_no_such_module", ("torch-optimi",), "optimi"))
    with pytest.raises(ConfigError) as caught:
        parse_args(["--optimizer", "stableadamw"])
    assert str(caught.value) == ('--optimizer stableadamw needs the torch-optimi package, which is not installed; '
                                 'pip install "megamlm[optimi]", or use --optimizer adamw')
    with pytest.raises(ConfigError, match="invalid choice: 'adafactor'"):
        parse_args(["--optimizer", "adafactor"])

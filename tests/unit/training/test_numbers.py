"""Issue 23, item 6: the ETA comes from recent steps, not the compile/warm-up step; the batch-size note comes
after the checks that can still refuse the launch."""

from __future__ import annotations

import re

import pytest
import torch
from helpers import tiny_args

from megamlm.config import ConfigError, parse_args
from megamlm.training import reporter as reporter_module
from megamlm.training.reporter import RunReporter
from megamlm.training.step import StepOutcome


def _eta_seconds(line: str) -> int:
    minutes, seconds = re.search(r"eta (\d+)m(\d+)s", line).groups()
    return int(minutes) * 60 + int(seconds)


def test_the_eta_follows_the_recent_steps_not_the_warm_up_step(monkeypatch, capsys):
    clock = [0.0]
    monkeypatch.setattr(reporter_module.time, "perf_counter", lambda: clock[0])
    reporter = RunReporter(None, None, 10, 100, 0, tiny_args(), torch.device("cpu"))
    etas = []
    for step in range(1, 51):
        clock[0] += 60.0 if step == 1 else 1.0  # step 1 compiles: a minute; every later step: a second
        reporter.step(StepOutcome(loss=1.0, grad_norm=1.0, applied=True, predicted_tokens=8, lr=1e-3, sample_ids=[],
                                  step=step, objective="mlm", consumed_samples=step * 4), 4)
        if step % 10 == 0:
            etas.append(_eta_seconds(capsys.readouterr().out))
    assert etas[0] == 90  # 9 steps in 9 s after step 1: 1 s per step for the 90 left (the whole-run pace: 621 s)
    assert etas == [90, 80, 70, 60, 50]


def test_the_batch_size_note_comes_after_the_checks_that_can_refuse(capsys):
    with pytest.raises(ConfigError):
        parse_args(["--save", "x", "--save-at", "999", "--dry-run", "--world-size", "2"])  # outside 1-300
    assert "not given: global" not in capsys.readouterr().out
    parse_args(["--dry-run", "--world-size", "2"])
    assert "--micro-batch-size and --global-batch-size not given" in capsys.readouterr().out

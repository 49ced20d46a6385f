"""--distributed-timeout-minutes reaches torch.distributed's init_process_group (the bound on every collective's wait
for a silent peer: a dropped link holds the allocation that long), is logged at start, and a bad value is one line."""

from datetime import timedelta

import pytest
import torch

from megamlm.config import parse_args
from megamlm.errors import ConfigError
from megamlm.parallel import launch, runtime
from megamlm.parallel.dims import ParallelDims

TWO_RANKS = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "n1", "MASTER_PORT": "1234"}


def started_with(monkeypatch, flags: list[str]) -> tuple[dict, list[str]]:
    """The keyword arguments init_process_group got when a two-rank run of ``flags`` joined its group, and the
    lines logged."""
    calls, lines = [], []
    monkeypatch.setattr(launch, "torch_env_vars", lambda *a: dict(TWO_RANKS))
    monkeypatch.setattr(launch.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(launch.dist, "init_process_group", lambda *a, **kw: calls.append(kw))
    monkeypatch.setattr(ParallelDims, "build_mesh", lambda self, device_type: None)
    monkeypatch.setattr(runtime, "log", lines.append)
    for name in TWO_RANKS:  # init_distributed exports them: set then delete, so that monkeypatch records each one
        monkeypatch.setenv(name, "")  # and removes it again after the test (a delenv of an unset variable records
        monkeypatch.delenv(name)  # nothing: WORLD_SIZE=2 left behind made every later in-process run wait for a peer)
    cfg = parse_args(["--train-iters", "4", *flags])
    runtime.start_parallel(ParallelDims.of(2, cfg.parallel, 1), torch.device("cpu"),
                           cfg.parallel.distributed_timeout_minutes)
    assert len(calls) == 1
    return calls[0], lines


def test_the_flag_sets_the_process_group_timeout_and_is_logged(monkeypatch):
    kwargs, lines = started_with(monkeypatch, ["--distributed-timeout-minutes", "0.5"])
    assert kwargs["timeout"] == timedelta(seconds=30)
    assert "distributed timeout: 0.5 minutes (--distributed-timeout-minutes)" in lines


def test_the_default_is_torchs_30_minutes(monkeypatch):
    kwargs, lines = started_with(monkeypatch, [])
    assert kwargs["timeout"] == timedelta(minutes=30)
    assert "distributed timeout: 30 minutes (--distributed-timeout-minutes)" in lines


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(value):
    with pytest.raises(ConfigError, match="--distributed-timeout-minutes must be a (positive|finite) number"):
        parse_args(["--train-iters", "4", "--distributed-timeout-minutes", value])  # the start-up checks

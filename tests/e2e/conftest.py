import os

import pytest
import torch

from types import SimpleNamespace

from megamlm.config import parse_args
from megamlm.training.recorder import StepRecorder
from megamlm.training.trainer import pretrain

# Small enough for seconds per run on 2 cores, large enough for the loss to move.
FAST = ["--seq-length", "64", "--global-batch-size", "8", "--micro-batch-size", "4", "--log-interval", "5"]


@pytest.fixture(scope="session")
def fast_flags():
    """The FAST settings every in-process run of these tests starts from."""
    return list(FAST)


@pytest.fixture(scope="session")
def run(cache_dir):
    """Train in-process on the bundled corpus with the FAST settings plus ``argv``; returns the RunResult's fields
    and the StepRecorder's (losses, objectives, sample_ids, ... per step)."""
    return run_recorded


def run_recorded(*argv, on_step=None):
    recorder = StepRecorder()

    def observe(report):
        recorder(report)
        if on_step is not None:
            on_step(report)

    result = pretrain(parse_args(FAST + [str(a) for a in argv]), on_step=observe)
    return SimpleNamespace(**vars(result), **vars(recorder))


@pytest.fixture
def one_thread():
    """One intra-op thread: bitwise comparisons between runs need the same arithmetic order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

"""--profile-steps under TP=2 and PP=2 (gloo): every rank with --profile-all-ranks writes a trace of the asked
steps that summarizes, communication included, and the run's losses are the unprofiled run's."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import spawn
from trainer_checks import FLAGS, pretrain_on_rank, read_ranks

from megamlm.training.profiling import summarize_trace

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("layout", [["--tp", "2"], ["--pp", "2"]], ids=["tp2", "pp2"])
def test_profile_steps_under_a_layout(cache, tmp_path, layout):
    save = tmp_path / "run"
    spawn(pretrain_on_rank, 2, FLAGS + layout + ["--save", save, "--profile-steps", "2", "3",
                                                 "--profile-all-ranks"], str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    spawn(pretrain_on_rank, 2, FLAGS + layout, str(plain))
    for rank, (profiled, reference) in enumerate(zip(read_ranks(tmp_path, 2), read_ranks(plain, 2))):
        assert profiled["losses"] == pytest.approx(reference["losses"], rel=1e-6)
        (trace,) = Path(save, "profile").glob(f"rank{rank}.*.pt.trace.json")
        summary = summarize_trace(trace)
        assert summary.steps == 2 and summary.shares["communication"] > 0, summary.format()

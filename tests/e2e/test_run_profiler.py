"""--profile-steps A B: a torch.profiler trace of those steps of the real run under <save>/profile, in TensorBoard's
profiler-plugin format, with a one-screen summary; the run's numbers are those of the run without it."""

import json

import pytest

from megamlm.training.profiling import STEP_MARK, summarize_trace

pytestmark = pytest.mark.usefixtures("one_thread")


def test_profile_steps_writes_a_trace_of_those_steps_and_a_summary(tiny, tmp_path, capsys):
    plain = tiny("--train-iters", "6", "--save", tmp_path / "plain")
    profiled = tiny("--train-iters", "6", "--save", tmp_path / "run", "--profile-steps", "3", "5")
    assert profiled.losses == plain.losses  # bitwise: profiling reads, never changes, the run
    (trace,) = (tmp_path / "run" / "profile").glob("rank0.*.pt.trace.json")
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e.get("name") == STEP_MARK and e.get("ph") == "X" for e in events) == 3
    summary = summarize_trace(trace)
    assert summary.steps == 3 and summary.top and summary.shares["host gaps"] < 1
    out = capsys.readouterr().out
    assert "profiling steps 3-5 (--profile-steps)" in out
    assert "profile: 3 steps" in out and "share of step time: matmul" in out
    assert (tmp_path / "run" / "profile" / "rank0.summary.txt").read_text().startswith("profile: 3 steps")
    assert not (tmp_path / "plain" / "profile").exists()


def test_a_run_that_stops_inside_the_profiled_steps_still_writes_its_trace(tiny, tmp_path):
    tiny("--train-iters", "4", "--save", tmp_path / "run", "--profile-steps", "3", "9")
    (trace,) = (tmp_path / "run" / "profile").glob("rank0.*.pt.trace.json")
    assert summarize_trace(trace).steps == 2


@pytest.mark.parametrize("flags,message", [
    (["--profile-steps", "5", "3"], "--profile-steps takes the first and last step to profile"),
    (["--profile-steps", "0", "3"], "--profile-steps takes the first and last step to profile"),
])
def test_bad_profile_steps_are_one_line(tiny_flags, tmp_path, capsys, flags, message):
    from megamlm.cli import main

    assert main([*tiny_flags, "--train-iters", "6", "--save", str(tmp_path / "run"), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()

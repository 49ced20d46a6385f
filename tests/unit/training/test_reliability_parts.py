"""The small reliability pieces on their own: signal handler, non-finite guard, stop policy, run record, flags."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from megamlm.config import ConfigError, parse_args
from megamlm.data import IndexedDatasetWriter
from megamlm.training.nonfinite import NonFiniteGuard
from megamlm.training.run_record import data_fingerprint, git_state, software_versions
from megamlm.training.stopping import ExitSignalHandler, StopPolicy


def test_first_signal_sets_the_flag_and_handlers_are_restored():
    previous = signal.getsignal(signal.SIGUSR1)
    with ExitSignalHandler() as handler:
        assert not handler.requested
        os.kill(os.getpid(), signal.SIGUSR1)
        assert handler.received == "SIGUSR1"
        assert StopPolicy(handler).reason_to_stop(1) == "signal SIGUSR1"
    assert signal.getsignal(signal.SIGUSR1) == previous


def test_one_request_delivered_twice_is_one_request_and_a_later_second_signal_exits_at_once():
    code = """
import os, signal, sys, time
from megamlm.training import stopping
clock = [1000.0]
stopping.time.monotonic = lambda: clock[0]  # the handler's clock moves only when this test moves it
with stopping.ExitSignalHandler() as handler:
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)  # within SAME_REQUEST_S: the same request
    print("still running after", handler.received, flush=True)
    clock[0] += stopping.SAME_REQUEST_S + 0.2
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
print("not reached")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[3])
    assert "still running after SIGINT" in out.stdout and "not reached" not in out.stdout
    assert out.returncode == 128 + signal.SIGINT
    assert "received a second signal (SIGINT) after SIGINT: exiting now without saving" in out.stderr


def test_stop_policy_exit_interval_and_duration():
    handler = ExitSignalHandler()
    interval = StopPolicy(handler, exit_interval=3)
    assert [interval.reason_to_stop(s) for s in (1, 2, 4)] == [None, None, None]
    assert interval.reason_to_stop(6) == "--exit-interval 3 reached at step 6"
    a_minute_ago = time.monotonic() - 60.0
    assert StopPolicy(handler, exit_duration_in_mins=1.0, start_time=a_minute_ago).reason_to_stop(1) == \
        "--exit-duration-in-mins 1.0 reached"
    assert StopPolicy(handler, exit_duration_in_mins=60.0).reason_to_stop(1) is None


def test_exit_duration_counts_from_the_runs_start_not_from_the_processs(monkeypatch):
    # This process has run for two hours (a long test session, a study driver) before the run starts: none of it
    # counts against the run's --exit-duration-in-mins.
    two_hours_on = time.monotonic() + 7200.0
    monkeypatch.setattr(time, "monotonic", lambda: two_hours_on)
    assert StopPolicy(ExitSignalHandler(), exit_duration_in_mins=60.0).reason_to_stop(1) is None


def test_guard_counts_skips_in_a_row_and_names_steps_and_sample_ranges():
    guard = NonFiniteGuard(max_in_a_row=2)
    assert not guard.record(1, False, float("nan"), float("nan"), [0, 1, 2, 3])
    assert not guard.record(2, True, 1.0, 1.0, [4, 5, 6, 7])  # an applied step resets the count
    assert not guard.record(3, False, float("nan"), float("nan"), [8, 9, 10, 11])
    assert guard.record(4, False, float("inf"), float("nan"), [12, 13, 15])
    message = str(guard.error("No checkpoint."))
    assert "2 steps in a row" in message and "(--max-skipped-steps 2)" in message
    assert "step 3: loss nan, grad-norm nan, samples [8-11]" in message
    assert "step 4: loss inf, grad-norm nan, samples [12-13, 15]" in message
    assert guard.total_skipped == 3


def test_guard_state_survives_a_checkpoint_in_the_middle_of_a_streak():
    guard = NonFiniteGuard(max_in_a_row=3)
    guard.record(5, False, float("nan"), float("inf"), [20, 21])
    state = json.loads(json.dumps(guard.state_dict()))  # the train state is JSON
    resumed = NonFiniteGuard(max_in_a_row=3)
    resumed.load_state_dict(state)
    assert not resumed.record(6, False, 2.0, float("inf"), [22, 23])
    assert resumed.record(7, False, 2.0, float("inf"), [24, 25])
    assert resumed.last_good_step == 4 and resumed.total_skipped == 3
    assert "step 5: loss nan, grad-norm inf, samples [20-21]" in str(resumed.error(""))


def write_dataset(prefix: Path, documents) -> str:
    with IndexedDatasetWriter(prefix, "uint16") as writer:
        for doc in documents:
            writer.add_document(doc)
    return str(prefix)


def test_data_fingerprint_follows_content_and_weights_not_location(tmp_path):
    a = write_dataset(tmp_path / "a" / "corpus", [[1, 2, 3], [4, 5]])
    same = write_dataset(tmp_path / "elsewhere" / "corpus", [[1, 2, 3], [4, 5]])
    other = write_dataset(tmp_path / "b" / "corpus", [[1, 2, 3], [4, 6]])
    assert data_fingerprint([a]) == data_fingerprint([same])
    assert data_fingerprint([a]) != data_fingerprint([other])
    assert data_fingerprint(["0.5", a, "0.5", other]) != data_fingerprint(["0.3", a, "0.7", other])


def test_software_versions_and_git_state():
    versions = software_versions()
    assert versions["torch"] == torch.__version__ and "triton" in versions and "flash-attn" in versions
    json.dumps(versions)
    state = git_state()
    assert state is None or (len(state["commit"]) == 40 and isinstance(state["dirty"], bool))
    assert git_state(Path("/")) is None


@pytest.mark.parametrize("argv,message", [
    (["--keep-last", "0", "--save", "d"], "--keep-last must be at least 1"),
    (["--keep-last", "2"], "--keep-last needs --save"),
    (["--override-data"], "--override-data only matters when resuming"),
    (["--override-schedule"], "--override-schedule only matters when resuming"),
    (["--exit-interval", "0", "--save", "d"], "--exit-interval must be positive"),
    (["--exit-duration-in-mins", "-1", "--save", "d"], "--exit-duration-in-mins must be positive"),
    (["--exit-interval", "5"], "stop the run with a checkpoint: pass --save"),
    (["--max-skipped-steps", "0"], "--max-skipped-steps must be at least 1"),
])
def test_reliability_flags_are_validated(argv, message):
    with pytest.raises(ConfigError, match=message):
        parse_args(argv)

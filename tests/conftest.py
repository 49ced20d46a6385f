"""Fixtures and helper paths shared by the test folders."""

import os
import sys
import time
from pathlib import Path

import pytest

# Shared test helpers are imported by module name from every test folder (and by spawned ranks, which inherit
# sys.path): tests/helpers.py, the tiny shapes, models, batches, datasets and flags; tests/step_recorder.py, every
# step of a run; tests/unit/hf/decoder_families.py, the tiny decoder families.
TESTS = Path(__file__).resolve().parent
for HELPERS in (str(TESTS), str(TESTS / "unit" / "hf")):
    if HELPERS not in sys.path:
        sys.path.insert(0, HELPERS)


def pytest_sessionfinish(session, exitstatus):
    forked_python = sys.modules.get("forked_python")  # tests/forked_python.py: its servers end with the session
    if forked_python is not None:
        forked_python.close_servers()


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One tokenized copy of the bundled corpus for the whole session (MEGAMLM_CACHE)."""
    path = str(tmp_path_factory.mktemp("megamlm-cache"))
    previous = os.environ.get("MEGAMLM_CACHE")
    os.environ["MEGAMLM_CACHE"] = path
    yield path
    if previous is None:
        os.environ.pop("MEGAMLM_CACHE", None)
    else:
        os.environ["MEGAMLM_CACHE"] = previous


LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def launcher_environment_left_as_found():
    """A test that leaves a launcher's variables behind fails itself (and they are put back): with WORLD_SIZE=2 left
    in the environment, every later in-process run of the suite would wait for a peer that never comes."""
    before = {name: os.environ.get(name) for name in LAUNCHER_VARIABLES}
    yield
    changed = {name for name in LAUNCHER_VARIABLES if os.environ.get(name) != before[name]}
    for name in changed:
        if before[name] is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before[name]
    if changed:
        pytest.fail(f"the test left {', '.join(sorted(changed))} changed in the environment; set them with "
                    "monkeypatch.setenv (a monkeypatch.delenv of an unset variable is not undone)")


# ---- --cpu-durations: where the suite's time goes, on a machine others load too ---------------------------------

def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="list the N tests that used the most CPU time: this process, its finished children and the "
                          "ranks of tests/distributed's kept worlds (wall times mislead on a loaded machine)")


def _cpu_seconds() -> float:
    times = os.times()
    harness = sys.modules.get("harness")  # tests/distributed/harness.py: its kept ranks are reaped only at the end
    return (times.user + times.system + times.children_user + times.children_system
            + (harness.worker_cpu_seconds() if harness is not None else 0.0))


_CPU: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.config.getoption("cpu_durations") is None:
        yield
        return
    start, wall = _cpu_seconds(), time.perf_counter()
    yield
    _CPU[item.nodeid] = (_cpu_seconds() - start, time.perf_counter() - wall)


def pytest_terminal_summary(terminalreporter, config):
    count = config.getoption("cpu_durations")
    if count is None or not _CPU:
        return
    terminalreporter.section(f"{count or len(_CPU)} tests using the most CPU (setup, call and teardown)")
    ranked = sorted(_CPU.items(), key=lambda item: -item[1][0])
    for nodeid, (cpu, wall) in ranked[:count or None]:
        terminalreporter.write_line(f"{cpu:8.2f}s cpu {wall:8.2f}s wall  {nodeid}")
    cpu, wall = (sum(values) for values in zip(*_CPU.values()))
    terminalreporter.write_line(f"{cpu:8.2f}s cpu {wall:8.2f}s wall  in all ({len(_CPU)} tests)")

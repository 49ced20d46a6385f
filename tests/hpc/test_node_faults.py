"""The faults of a cluster on the stage's two nodes (issue 46 item 3), each on a run of one torchrun per node started
by hand (torchrun_nodes.py; SLURM's part, a requeue after a node failure, is test_two_nodes.py's), data parallel
across the nodes, compared with one process's straight run of the same flags:

- a node dies during a save: the half-written checkpoint is never the one resumed;
- the link drops for longer than the run's --distributed-timeout-minutes: the surviving rank fails within that
  timeout (it waited 30 minutes, torch's default, before the flag), and the relaunch resumes exactly; a blip shorter
  than the timeout: the run goes on to the straight run's loss;
- a slow node (its interface rate-limited): the run goes on, and the per-step time in the log shows it;
- torchrun's elastic restart (--max-restarts 1) after a worker is killed: the restarted workers resume from the
  newest whole checkpoint to the straight run's loss.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from nodes import NODE1, NODE2, kill_node, on_node, set_link, start_slurmd, two_nodes
from slurm_jobs import REPO, TINY, job_env, last_loss, latest_step, wait_until
from torchrun_nodes import ITERS, TwoNodeRun, step_seconds, wait_for_step

pytestmark = two_nodes
TIMEOUT_MINUTES = 0.25  # the run's process-group timeout in the link tests: 15 s


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> float:
    """The final loss of the straight run: one process, the same flags."""
    save = tmp_path_factory.mktemp("straight") / "run"
    out = subprocess.run([sys.executable, str(REPO / "pretrain.py"), *TINY, *ITERS, "--device", "cpu", "--save",
                          str(save)], env=job_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return last_loss(save)


@pytest.fixture
def runs():
    """Every run a test starts, killed at its end if still running."""
    started: list[TwoNodeRun] = []
    yield started
    for run in started:
        run.close()


def relaunch_resumes_exactly(tmp_path, runs, save, straight: float, name: str) -> int:
    """The same command again, on both nodes: it resumes from the newest whole checkpoint (returned) and ends with
    the straight run's final loss."""
    again = TwoNodeRun(tmp_path, name, [*ITERS, "--save", str(save)])
    runs.append(again)
    again.finish()
    text = again.text()
    assert "resumed from " in text, text[-3000:]
    resumed = int(text.split("resumed from ")[1].split(" at step ")[1].split()[0])
    assert latest_step(save) == 40
    assert last_loss(save) == pytest.approx(straight, rel=1e-5)
    return resumed


def test_a_node_that_dies_during_a_save_leaves_a_half_written_checkpoint_that_is_never_resumed(tmp_path, runs,
                                                                                               straight):
    save = tmp_path / "run"
    run = TwoNodeRun(tmp_path, "save-death", [*ITERS, "--save", str(save)])
    runs.append(run)
    half = save / "iter_0000020.tmp"  # the second save, after a whole one at step 10
    wait_until(lambda: half.exists() or run._ended("the save of step 20"), "the save of step 20 under way",
               every=0.001)
    try:
        assert kill_node(NODE2), "no process on the node"
        # The rank that survives fails on its lost peer: no whole checkpoint of step 20 appears.
        assert run.wait(NODE1) != 0
    finally:
        start_slurmd(NODE2)
    assert half.exists() and not (save / "iter_0000020").exists(), sorted(os.listdir(save))
    assert latest_step(save) == 10
    assert relaunch_resumes_exactly(tmp_path, runs, save, straight, "save-death-again") == 10


def test_a_link_down_longer_than_the_distributed_timeout_fails_the_surviving_rank_within_it(tmp_path, runs,
                                                                                          straight):
    save = tmp_path / "run"
    run = TwoNodeRun(tmp_path, "link-down", [*ITERS, "--save", str(save),
                                             "--distributed-timeout-minutes", str(TIMEOUT_MINUTES)])
    runs.append(run)
    run.wait_for(f"saved checkpoint {save / 'iter_0000010'}")
    assert f"distributed timeout: {TIMEOUT_MINUTES:g} minutes" in run.text()
    set_link(NODE2, False)
    down = time.monotonic()
    try:
        # Nothing closes the connections: only the timeout ends the wait (torch's default, 30 minutes, before the
        # flag existed). The bound leaves the timeout a minute for torchrun's own shutdown on 2 busy cores.
        assert run.wait(NODE1, limit=TIMEOUT_MINUTES * 60 + 60) != 0
        waited = time.monotonic() - down
        run.kill(NODE2)  # cut off, the node is as good as dead
    finally:
        set_link(NODE2, True)
    assert waited >= TIMEOUT_MINUTES * 60 * 0.9, waited  # it was the timeout, not something else, that ended it
    assert relaunch_resumes_exactly(tmp_path, runs, save, straight, "link-down-again") >= 10


def test_a_link_blip_shorter_than_the_distributed_timeout_does_not_stop_the_run(tmp_path, runs, straight):
    save = tmp_path / "run"
    run = TwoNodeRun(tmp_path, "link-blip", [*ITERS, "--save", str(save),
                                             "--distributed-timeout-minutes", str(TIMEOUT_MINUTES)])
    runs.append(run)
    before = wait_for_step(run, 3)
    set_link(NODE2, False)
    try:
        time.sleep(3)  # the blip: the fault's length, not a wait for an outcome
    finally:
        set_link(NODE2, True)
    run.finish()
    assert last_loss(save) == pytest.approx(straight, rel=1e-5)
    # The blip held a step (TCP retransmits once the link is back), so it hit the run mid-training.
    assert max(t for step, t in step_seconds(save).items() if step > before) >= 2.5, step_seconds(save)


def tc(node: str, *args: str) -> None:
    subprocess.run(on_node(node, ["tc", "qdisc", *args]), check=True, timeout=60)


def test_a_slow_node_slows_the_steps_which_the_log_shows_and_the_run_goes_on(tmp_path, runs, straight):
    save = tmp_path / "run"
    run = TwoNodeRun(tmp_path, "slow-node", [*ITERS, "--save", str(save)])
    runs.append(run)
    fast = wait_for_step(run, 5)
    # The node's link slowed to 16 Mbit/s (a token bucket: netem's delay is not in every kernel, this one's
    # included): each step's all-gather and reduce-scatter of the model's ~1 MB then take a good part of a second.
    tc(NODE2, "add", "dev", "eth0", "root", "tbf", "rate", "16mbit", "burst", "32kbit", "latency", "10s")
    try:
        slow = wait_for_step(run, fast + 4)
    finally:
        tc(NODE2, "del", "dev", "eth0", "root")
    run.finish()
    assert last_loss(save) == pytest.approx(straight, rel=1e-5)
    seconds = step_seconds(save)
    before = sorted(seconds[s] for s in range(2, fast + 1) if s % 10 != 1)  # not the warm-up nor after a save
    during = sorted(seconds[s] for s in range(fast + 2, slow + 1))  # fast + 1 may have begun before the limit
    assert during[len(during) // 2] > 3 * before[len(before) // 2], (before, during)
    assert f"step {slow}/40" in run.text()


def test_torchrun_restarts_after_a_worker_crash_and_the_restarted_workers_resume_exactly(tmp_path, runs, straight):
    """torchrun shares its rendezvous store with the workers across restart rounds (torch's default since 2.5), so
    a restarted worker could read its peer's address from the round before: 'Gloo connectFullMesh failed ...
    Connection refused' spent the restart and the other node's torchrun hung (pytorch/pytorch#135712; this test,
    2026-12-03, in every full stage). Started through examples/torchrun_forward_signals.sh, which gives a run
    with --max-restarts TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (a fresh store each round), the restart resumes."""
    save = tmp_path / "run"
    run = TwoNodeRun(tmp_path, "elastic", [*ITERS, "--save", str(save)], max_restarts=1)
    runs.append(run)
    run.wait_for(f"saved checkpoint {save / 'iter_0000010'}")
    workers = run.workers(NODE2)
    assert workers, run.text()[-3000:]
    os.kill(workers[0], 9)
    run.finish()
    text = run.text()
    assert "resumed from " in text, text[-3000:]
    assert int(text.split("resumed from ")[1].split(" at step ")[1].split()[0]) >= 10
    assert "pytorch/pytorch#135712" not in text  # the warning of a run that shares the store
    assert latest_step(save) == 40
    assert last_loss(save) == pytest.approx(straight, rel=1e-5)

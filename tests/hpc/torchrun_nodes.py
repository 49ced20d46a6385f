"""torchrun started by hand on each of the stage's two nodes (tests/hpc/cluster.sh), as a user starts it on two hosts:
one rank per node, the c10d rendezvous on the first node's address. The fault tests (test_node_faults.py) start
runs this way, without SLURM, so that a fault's outcome shows in seconds rather than after SlurmdTimeout."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from pathlib import Path

from nodes import NODE1, NODE2, on_node
from slurm_jobs import LIMIT, REPO, TINY, job_env, wait_until

# Long enough that a fault lands mid-run on 2 busy cores (a step takes tens of ms), short enough to cost seconds.
ITERS = ["--train-iters", "40", "--save-interval", "10"]


def descendants(pid: int) -> list[int]:
    """``pid``'s children, theirs, and so on (torchrun starts its workers in sessions of their own)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [p for child in map(int, children) for p in (child, *descendants(child))]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class TwoNodeRun:
    """``pretrain.py ARGS`` under one torchrun per node, ``per_node`` ranks each (a node's ranks are consecutive:
    torchrun numbers them node rank x per_node + local rank); each node's output in ``<tmp>/<name>-<node>.log``.
    torchrun is started as every launch script starts it, through examples/torchrun_forward_signals.sh (which also
    chooses the rendezvous store of a restartable run)."""

    def __init__(self, tmp: Path, name: str, args: list[str], max_restarts: int = 0, per_node: int = 1):
        port = random.randrange(15000, 30000)  # below the ephemeral range; a fresh one per launch
        self.logs = {node: tmp / f"{name}-{node}.log" for node in (NODE1, NODE2)}
        self.procs: dict[str, subprocess.Popen] = {}
        for node in (NODE1, NODE2):
            command = ["bash", str(REPO / "examples" / "torchrun_forward_signals.sh"), "--nnodes", "2",
                       "--nproc-per-node", str(per_node), "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", f"{NODE1}:{port}", "--rdzv-id", name, "--max-restarts", str(max_restarts),
                       str(REPO / "pretrain.py"), *TINY, "--device", "cpu", *args]
            with open(self.logs[node], "w") as log:
                # nsenter enters the node and execs the forwarder: the Popen's pid is its, torchrun its child
                self.procs[node] = subprocess.Popen(on_node(node, command), stdout=log, stderr=subprocess.STDOUT,
                                                    env=job_env(), cwd=tmp, start_new_session=True)

    def text(self, node: str | None = None) -> str:
        nodes = [node] if node else list(self.logs)
        return "".join(self.logs[n].read_text(errors="replace") for n in nodes if self.logs[n].exists())

    def wait_for(self, text: str, limit: float = LIMIT) -> None:
        """Until ``text`` is in either node's output (rank 0 logs; it may run on either)."""
        wait_until(lambda: text in self.text() or self._ended(text), f"{text!r} in the run's output", limit, 0.05)

    def _ended(self, text: str) -> bool:
        if all(p.poll() is not None for p in self.procs.values()):
            raise AssertionError(f"the run ended without {text!r}:\n{self.text()[-4000:]}")
        return False

    def wait(self, node: str, limit: float = LIMIT) -> int:
        """torchrun's exit status on ``node``."""
        try:
            return self.procs[node].wait(timeout=limit)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"torchrun on {node} still running after {limit:.0f} s:\n"
                                 f"{self.text(node)[-4000:]}") from None

    def finish(self, limit: float = LIMIT) -> None:
        """Both nodes' torchrun exit 0."""
        codes = {node: self.wait(node, limit) for node in self.procs}
        assert set(codes.values()) == {0}, (codes, self.text()[-6000:])

    def workers(self, node: str) -> list[int]:
        """The training processes torchrun started on ``node``: ``python -u .../pretrain.py ...`` (the forwarder's and
        torchrun's command lines name pretrain.py too, among their arguments)."""
        def command(pid: int) -> list[bytes]:
            return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")

        return [pid for pid in descendants(self.procs[node].pid)
                if any(arg.endswith(b"pretrain.py") for arg in command(pid)[:3])]

    def kill(self, node: str) -> None:
        """SIGKILL to ``node``'s torchrun and everything it started."""
        proc = self.procs[node]
        _kill([*descendants(proc.pid), proc.pid])
        proc.wait(timeout=60)

    def close(self) -> None:
        for node, proc in self.procs.items():
            if proc.poll() is None:
                self.kill(node)


def step_seconds(save: Path) -> dict[int, float]:
    """Each logged step's wall time, from the tokens per second rank 0 logs (and writes to metrics.jsonl)."""
    records = [json.loads(line) for line in (save / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in records if r.get("kind") == "train"]
    # tokens is the run's running total; every step here has the same batch
    return {r["step"]: r["tokens"] / r["step"] / r["tokens_per_second"] for r in train}


def logged_step(run: TwoNodeRun) -> int:
    """The last step whose log line rank 0 has written ("step N/M | ..."), 0 before the first."""
    steps = [int(line.split("step ")[1].split("/")[0]) for line in run.text().splitlines()
             if "] step " in line and " | loss " in line]
    return max(steps, default=0)


def wait_for_step(run: TwoNodeRun, step: int, limit: float = LIMIT) -> int:
    return wait_until(lambda: (s := logged_step(run)) >= step and s or run._ended(f"step {step}"),
                      f"step {step} logged", limit, 0.05)

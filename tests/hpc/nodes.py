"""The two nodes of the HPC stage's cluster (tests/hpc/cluster.sh): each a network, UTS and mount namespace with a
slurmd of its own. Run a command on a node, kill a node (every process in its namespaces but the one holding
them), bring its slurmd back, take its link down."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

NODE1, NODE2 = "mmnode1", "mmnode2"
CLUSTER = Path(os.environ.get("MEGAMLM_HPC_CLUSTER", "/nonexistent"))
two_nodes = pytest.mark.skipif(os.environ.get("MEGAMLM_HPC_TWO_NODES") != "1",
                               reason="needs the HPC stage's two-node cluster (network namespaces could not be made)")


def anchor(node: str) -> int:
    return int((CLUSTER / f"{node}.anchor").read_text())


def on_node(node: str, command: list[str]) -> list[str]:
    """``command`` run inside ``node``'s namespaces."""
    return ["nsenter", "-t", str(anchor(node)), "-m", "-u", "-n", "--", *command]


def mpirun_options() -> list[str]:
    """Open MPI's options for the two nodes: their hostfile (2 slots each) and the agent that enters a node."""
    return ["--hostfile", str(CLUSTER / "hostfile"), "--mca", "plm_rsh_agent", str(CLUSTER / "nsrsh")]


def processes(node: str) -> list[int]:
    """Every process in ``node``'s network namespace but its anchor."""
    netns = (CLUSTER / f"{node}.netns").read_text().strip()
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=60, check=True)
    return [int(pid) for pid in out.stdout.split() if int(pid) != anchor(node)]


def kill_node(node: str) -> list[int]:
    """The node dies: SIGKILL to every process on it (its slurmd, job steps, ranks); returns their ids."""
    pids = processes(node)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def start_slurmd(node: str) -> None:
    subprocess.run(on_node(node, ["slurmd", "-f", os.environ["SLURM_CONF"], "-N", node]), check=True, timeout=60)


def set_link(node: str, up: bool) -> None:
    """The node's cable: its veth end on the bridge, up or down."""
    veth = (CLUSTER / f"{node}.veth").read_text().strip()
    subprocess.run(["ip", "link", "set", veth, "up" if up else "down"], check=True, timeout=60)

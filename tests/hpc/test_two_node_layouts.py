"""Layouts across the stage's two nodes (issue 46 item 2), two ranks per node under one torchrun each, started by hand
(torchrun_nodes.py): each equals one process's losses, step by step, with the layout tests' tolerance. Ranks are
laid out tensor parallel fastest, pipeline slowest (megamlm/parallel/dims.py), and a node's ranks are consecutive, so:

- TP=2 x PP=2: each stage's two tensor-parallel ranks on one node, the pipeline's activations across the nodes;
- HSDP 2 x 2: parameters sharded over a node's two ranks, the two replicas on the two nodes (gradients all-reduced
  across them).

Data parallel across the nodes (one rank each) is every run of test_node_faults.py and test_two_nodes.py, whose
checkpoints resume on two nodes. A layout's checkpoint written across the two nodes resumes on one node too (its
four ranks under one torchrun there), to the same losses. And as MPI users launch: `mpirun -np 4 --hostfile` (through
examples/run_mpirun.sh, started outside both nodes as on a login node) runs TP=2 x PP=2 across them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from nodes import NODE1, mpirun_options, on_node, two_nodes
from slurm_jobs import REPO, TINY, job_env
from torchrun_nodes import TwoNodeRun

pytestmark = two_nodes
# Two layers (a stage each under PP=2), one sample per micro-batch (HSDP's four data-parallel ranks of a batch of 4).
FLAGS = ["--num-layers", "2", "--micro-batch-size", "1", "--train-iters", "6"]
LAYOUTS = {"tp2_within_nodes_pp2_across": ["--tp", "2", "--pp", "2"],
           "hsdp_shards_within_nodes_replicas_across": ["--dp-replicate", "2"]}


def losses(save) -> list[float]:
    """Each step's training loss, in step order (a resumed run's records follow the first launch's)."""
    records = [json.loads(line) for line in (save / "metrics.jsonl").read_text().splitlines() if line.strip()]
    by_step = {r["step"]: r["loss"] for r in records if r.get("kind") == "train"}
    return [by_step[step] for step in sorted(by_step)]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> list[float]:
    save = tmp_path_factory.mktemp("one") / "run"
    out = subprocess.run([sys.executable, str(REPO / "pretrain.py"), *TINY, *FLAGS, "--device", "cpu", "--save",
                          str(save)], env=job_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return losses(save)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_layout_across_two_nodes_equals_one_process(tmp_path, one_process, layout):
    save = tmp_path / "run"
    run = TwoNodeRun(tmp_path, layout, [*FLAGS, *LAYOUTS[layout], "--save", str(save)], per_node=2)
    try:
        run.finish()
    finally:
        run.close()
    assert "parallel layout: world 4" in run.text()
    assert losses(save) == pytest.approx(one_process, rel=1e-4), run.text()[-3000:]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_layouts_checkpoint_from_two_nodes_resumes_on_one_node(tmp_path, one_process, layout):
    """Stopped at step 3 across the two nodes (--exit-interval), resumed on the first node alone with the same four
    ranks: steps 4-6 are one process's."""
    save = tmp_path / "run"
    run = TwoNodeRun(tmp_path, layout, [*FLAGS, *LAYOUTS[layout], "--save", str(save), "--exit-interval", "3"],
                     per_node=2)
    try:
        run.finish()
    finally:
        run.close()
    assert len(losses(save)) == 3, run.text()[-3000:]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
               str(REPO / "pretrain.py"), *TINY, *FLAGS, *LAYOUTS[layout], "--device", "cpu", "--save", str(save)]
    out = subprocess.run(on_node(NODE1, command), env=job_env(), cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "resumed from " in out.stdout + out.stderr
    assert losses(save) == pytest.approx(one_process, rel=1e-4), (out.stdout + out.stderr)[-3000:]


def test_mpirun_np_4_with_a_hostfile_runs_tp_within_and_pp_across_the_nodes_equal_to_one_process(tmp_path, one_process):
    """The hostfile's two slots a node put ranks 0-1 on the first node and 2-3 on the second (Open MPI fills a host's
    slots first), so each stage's tensor-parallel pair shares a node; rank 0's host is asked of mpirun."""
    save = tmp_path / "run"
    env = job_env(NP="4")
    env.pop("MASTER_ADDR", None)
    command = ["bash", str(REPO / "examples" / "run_mpirun.sh"), *mpirun_options(), "--bind-to", "none", "--",
               *TINY, *FLAGS, *LAYOUTS["tp2_within_nodes_pp2_across"], "--device", "cpu", "--save", str(save)]
    out = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    assert "parallel layout: world 4" in out.stdout
    assert losses(save) == pytest.approx(one_process, rel=1e-4), out.stdout[-3000:]

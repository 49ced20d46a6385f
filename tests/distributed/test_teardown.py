"""stop_parallel frees every process group while the interpreter is whole (issue 46): a DeviceMesh kept in a
reference cycle (a parallelized model holds its mesh so) must not outlive it, because a gloo group destructed in the
interpreter's own teardown, after its peer has exited, aborts the process ('terminate called without an active
exception'; a two-node study job failed so under SLURM). Run in a fresh Python: the process group is its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

WORLD_OF_ONE = """
import sys, weakref
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from megamlm.parallel.runtime import stop_parallel

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
holder = {"mesh": init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))}
holder["self"] = holder  # a cycle, as a parallelized model's DTensors, hooks and modules make
mesh = weakref.ref(holder["mesh"])
del holder
stop_parallel()
print("mesh freed" if mesh() is None else "mesh alive after stop_parallel")
"""


def test_no_mesh_or_process_group_outlives_stop_parallel(tmp_path):
    out = subprocess.run([sys.executable, "-c", WORLD_OF_ONE, str(tmp_path / "store")], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "mesh freed", out.stdout

"""The HPC stage's tests run against the one-node SLURM cluster that tests/hpc/run_stage.sh starts (it exports
MEGAMLM_HPC_CLUSTER and SLURM_CONF) and the machine's Open MPI; elsewhere they skip, so the README's test command
leaves them out."""

import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # slurm_jobs.py, the stage tests' helpers (pytest runs with --import-mode=importlib)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if str(item.fspath).startswith(HERE):
            item.add_marker(pytest.mark.hpc)
            if not os.environ.get("MEGAMLM_HPC_CLUSTER"):
                item.add_marker(pytest.mark.skip(reason="needs the HPC stage's cluster: bash tests/hpc/run_stage.sh"))
            elif shutil.which("sbatch") is None or shutil.which("mpirun") is None:
                item.add_marker(pytest.mark.skip(reason="needs sbatch and mpirun (tests/hpc/run_stage.sh installs "
                                                        "them)"))

"""The README's "SLURM and mpirun" commands, as written, on the stage's cluster: in a copy of the repository,
scaled down only through MEGAMLM_PRETRAIN_ARGS (the variable the README's "Tests" section documents)."""

from __future__ import annotations

import re
import shutil
import subprocess

from slurm_jobs import REPO, job_env, latest_step

SCALE = {"MEGAMLM_PRETRAIN_ARGS": "--train-iters 4 --seq-length 32 --log-interval 1"}


def section_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("### SLURM and mpirun", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readmes_slurm_and_mpirun_commands_run_as_written(tmp_path):
    copy = tmp_path / "megamlm"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(".git", "__pycache__", "runs", "ckpt", "*.egg-info"))
    env = {**job_env(), **SCALE, "PYTHONPATH": str(copy)}
    env.pop("REPO")  # as a reader has it: the sbatch script finds the repository as the folder sbatch ran in
    commands = section_commands()
    assert [c.split()[0] for c in commands] == ["sbatch", "NP=2"]
    for command in commands:
        out = subprocess.run(["bash", "-c", command], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
        logs = "".join(p.read_text() for p in copy.glob("megamlm-*.out"))
        assert out.returncode == 0, (command, out.stdout[-2000:], out.stderr[-2000:], logs[-2000:])
    assert latest_step(copy / "ckpt" / "slurm") == 4 and latest_step(copy / "ckpt" / "mpi") == 4

"""examples/slurm/with_requeue.sh: requeue the job only when the run stopped early after making progress.

The launch command is a stand-in that leaves checkpoints the way the trainer does (latest pointer, config.json
with train_iters); `scontrol` is a stand-in on PATH that records its arguments.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "slurm" / "with_requeue.sh"


def fake_training(tmp_path: Path, save: Path, reach_step: int | None, exit_code: int, train_iters: int = 10) -> str:
    """A command that 'trains' up to reach_step (saving its checkpoint), then exits with exit_code."""
    script = tmp_path / "train.sh"
    lines = ["#!/bin/bash"]
    if reach_step is not None:
        folder = save / f"iter_{reach_step:07d}"
        config = json.dumps({"config": {"training": {"train_iters": train_iters}}})
        lines += [f"mkdir -p {folder}", f"echo '{config}' > {folder}/config.json",
                  f"printf {reach_step} > {save}/latest_checkpointed_iteration.txt"]
    lines.append(f"exit {exit_code}")
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)
    return str(script)


def run(tmp_path: Path, command: list[str], restarts: int = 0) -> tuple[int, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    scontrol = bin_dir / "scontrol"
    calls = tmp_path / "scontrol.calls"
    scontrol.write_text(f"#!/bin/bash\necho \"$@\" >> {calls}\n")
    scontrol.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
           "SLURM_RESTART_COUNT": str(restarts)}
    proc = subprocess.run(["bash", str(SCRIPT), *command], env=env, capture_output=True, text=True, timeout=60)
    return proc.returncode, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_stopped_early_with_progress_is_requeued(tmp_path, form):
    save = tmp_path / "ckpt"
    save.mkdir()
    (save / "latest_checkpointed_iteration.txt").write_text("2")
    flags = ["--save", str(save)] if form == "separate" else [f"--save={save}"]
    code, calls = run(tmp_path, [fake_training(tmp_path, save, 6, exit_code=143), "--lr", "1e-3", *flags])
    assert calls == ["requeue 4242"] and code == 0


def test_finished_run_is_not_requeued_and_keeps_its_status(tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    code, calls = run(tmp_path, [fake_training(tmp_path, save, 10, exit_code=0), "--save", str(save)])
    assert calls == [] and code == 0


def test_no_progress_or_too_many_restarts_is_not_requeued(tmp_path):
    save = tmp_path / "ckpt"
    save.mkdir()
    (save / "latest_checkpointed_iteration.txt").write_text("4")
    code, calls = run(tmp_path, [fake_training(tmp_path, save, None, exit_code=1), "--save", str(save)])
    assert calls == [] and code == 1  # a crash before any new checkpoint: the failure stands
    code, calls = run(tmp_path, [fake_training(tmp_path, save, 6, exit_code=0), "--save", str(save)], restarts=50)
    assert calls == [] and code == 0

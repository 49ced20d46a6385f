"""Emitted SLURM scripts: they parse, and submit.sh, run against a fake sbatch, chains every job after the job
that writes the checkpoint it starts from."""

import os
import re
import shutil
import subprocess

import pytest

from megamlm.study.slurm import emit_slurm, segments

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

FAKE_SBATCH = """#!/bin/bash
# Records its arguments and answers a new job id, as sbatch --parsable does ("id;cluster").
n=$(( $(wc -l < "$SBATCH_LOG" 2>/dev/null || echo 0) + 1 ))
echo "$n $*" >> "$SBATCH_LOG"
echo "$n;cluster"
"""


def submit(plan, tmp_path):
    out = tmp_path / "slurm"
    written = emit_slurm(plan, out, workdir=tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    log = tmp_path / "sbatch.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SBATCH_LOG": str(log)}
    subprocess.run(["bash", str(out / "submit.sh")], check=True, env=env, capture_output=True, text=True)
    jobs = {}
    for line in log.read_text().splitlines():
        number, *args = line.split()
        dependency = next((a.split(":", 1)[1] for a in args if a.startswith("--dependency=")), None)
        target = next((a.split("TARGET_STEP=")[1] for a in args if a.startswith("--export=")), None)
        jobs[int(number)] = (args[-1], dependency, target)
    return written, jobs


def test_scripts_parse(small_plan, tmp_path):
    plan = small_plan({"evaluation": {"tasks": ["brown-pos"], "lrs": [1e-3], "seeds": [0]}})
    written = emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    assert len(written) == 2 * len(plan.runs) + 1
    for path in written:
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, (path.name, result.stderr)
    text = (tmp_path / "slurm" / "tiny-clm30-mlm30-m40.sbatch").read_text()
    assert "#SBATCH --nodes=1" in text and "#SBATCH --gpus-per-node=8" in text
    assert "examples/slurm/pretrain_nvidia.sbatch" in text
    assert f"--load {plan.root}/tiny-clm100-m40/iter_0000030" in text.replace(" \\\n    ", " ")
    evaluation = (tmp_path / "slurm" / "tiny-clm100-m40.eval.sbatch").read_text()
    assert '"$REPO"/tools/convert_to_hf.py' in evaluation and '"$REPO"/tools/evaluate.py' in evaluation


def test_submit_chains_branches_after_the_segment_that_writes_their_checkpoint(small_plan, tmp_path):
    plan = small_plan({"evaluation": {"tasks": ["brown-pos"], "lrs": [1e-3], "seeds": [0]}})
    _, jobs = submit(plan, tmp_path)
    clm = [n for n, (script, _, _) in sorted(jobs.items()) if script == "tiny-clm100-m40.sbatch"]
    # The CLM run is one job per branch step (15, 25, 30, 40, 50) and one to the end, each after the previous.
    assert [jobs[n][2] for n in clm] == ["15", "25", "30", "40", "50", ""]
    assert [jobs[n][1] for n in clm] == [None] + [str(n) for n in clm[:-1]]
    ends_at = dict(zip([15, 25, 30, 40, 50, 100], clm))
    for run in plan.runs:
        if run.name == "tiny-clm100-m40":
            continue
        first = min(n for n, j in jobs.items() if j[0] == f"{run.name}.sbatch")
        dependency = jobs[first][1]
        if run.parent is None:
            assert dependency is None, run.name
        elif run.branch_step:  # a branch waits for the job that ends at its branch step
            parent_jobs = {n for n, j in jobs.items() if j[0] == f"{run.parent}.sbatch"}
            [ending] = [n for n in parent_jobs if jobs[n][2] in (str(run.branch_step), "")
                        and (jobs[n][2] or str(plan.run(run.parent).train_iters)) == str(run.branch_step)]
            assert dependency == str(ending), run.name
            if run.parent == "tiny-clm100-m40":
                assert dependency == str(ends_at[run.branch_step])
        else:  # a continuation waits for its parent's last job
            assert dependency == str(clm[-1]), run.name
    evaluations = {script: dep for script, dep, _ in jobs.values() if script.endswith(".eval.sbatch")}
    assert len(evaluations) == len(plan.runs)
    assert evaluations["tiny-clm100-m40.eval.sbatch"] == str(clm[-1])


def test_segments_are_the_branch_steps_then_the_end(small_plan):
    plan = small_plan()
    assert segments(plan, plan.run("tiny-clm100-m40")) == [15, 25, 30, 40, 50, 100]
    assert segments(plan, plan.run("tiny-mlm100-m40")) == [40, 100]
    assert segments(plan, plan.run("tiny-clm60-m40")) == [60]


def test_a_segment_job_stops_at_its_step_and_skips_when_reached(small_plan, tmp_path):
    """The script adds --exit-interval TARGET_STEP and exits at once when the run is already there."""
    plan = small_plan()
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    script = (tmp_path / "slurm" / "tiny-clm100-m40.sbatch").read_text()
    assert re.search(r'\$\{TARGET_STEP:\+--exit-interval "\$TARGET_STEP"\}', script)
    run_dir = plan.save_dir(plan.run("tiny-clm100-m40"))
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("30")
    result = subprocess.run(["bash", str(tmp_path / "slurm" / "tiny-clm100-m40.sbatch")], capture_output=True,
                            text=True, env={**os.environ, "TARGET_STEP": "25"})
    assert result.returncode == 0 and "step 25 reached before" in result.stdout

"""What a cluster user loses a study to, on the stage's cluster (issue 46): a failed or cancelled job must not
strand its dependents (each dies with it, --kill-on-invalid-dep=yes) and the report job still runs and names what is
missing; a second submit.sh while the study's jobs are queued is refused in one line; a time limit within the jobs'
stop warning is refused at emission; a CPU study's jobs are ones a CPU partition accepts."""

from __future__ import annotations

import re
import subprocess
import sys

from slurm_jobs import REPO, job_env, queue_empty, wait_until
from test_study_chain import BRANCH, CLM, emit, jobs_named


def stranded() -> list[str]:
    """Jobs pending on a dependency that can never be met (what SLURM does without --kill-on-invalid-dep)."""
    out = subprocess.run(["squeue", "-h", "-o", "%j %r"], capture_output=True, text=True, timeout=60).stdout
    return [line for line in out.splitlines() if "DependencyNeverSatisfied" in line]


def test_a_cancelled_job_cancels_its_dependents_and_the_report_runs_and_names_what_is_missing(tmp_path):
    emitted = emit(tmp_path, "--set", "name=stranded", "--set", "evaluation.tasks=[austen-qa, brown-pos]",
                   "--set", f"evaluation.data_dir={tmp_path / 'no-data'}")
    # The evaluation's data folder is checked at emission, as the tokenizer is.
    assert f"warning: the study's evaluation data folder {tmp_path / 'no-data'} does not exist here" in emitted.stderr
    submit = ["bash", "slurm/submit.sh"]
    first = subprocess.run(submit, cwd=tmp_path, env=job_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    jobs = jobs_named("stranded-")
    assert len(jobs) == 6

    # Submitting again while the study's jobs are queued: refused in one line, nothing submitted.
    again = subprocess.run(submit, cwd=tmp_path, env=job_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and len(again.stderr.splitlines()) == 1, again.stderr
    assert "submit.sh: study stranded has jobs queued or running already" in again.stderr
    assert "scancel" in again.stderr and jobs_named("stranded-").keys() == jobs.keys()

    # The first job of the chain cancelled: everything after it is cancelled with it, the report still runs.
    subprocess.run(["scancel", str(min(jobs))], check=True, timeout=60)
    wait_until(lambda: queue_empty() or stranded(), "every job of the study ended (or was stranded)", every=2)
    assert not stranded(), "jobs left pending forever behind a cancelled job"
    states = {j["JobName"].removeprefix("stranded-"): j["JobState"] for j in jobs_named("stranded-").values()}
    assert states.pop("report") == "COMPLETED" and set(states.values()) == {"CANCELLED"}, states
    report = (tmp_path / "runs" / "mini" / "rehearsal" / "REPORT.md").read_text()
    assert f"0 of 2 runs have finished. Not finished: {CLM}, {BRANCH}." in report
    missing = re.search(r"\*\*Evaluations missing: (\d+) of the (\d+) fine-tuning runs have no result\*\*", report)
    assert missing and missing.group(1) == missing.group(2), report[:2000]
    assert "so the report has no downstream results and no claims" in report


def test_a_time_limit_within_the_stop_warning_is_refused_at_emission(tmp_path):
    out = emit(tmp_path, "--set", "name=short", "--set", 'slurm.time="4"', check=False)
    assert out.returncode == 2 and not (tmp_path / "slurm").exists()
    assert out.stderr.strip().splitlines()[-1].startswith("error: slurm.time is '4' (240 s), not longer than the jobs' "
                                                          "stop warning 300 s"), out.stderr


def test_a_cpu_study_emits_jobs_the_cpu_partition_accepts(tmp_path):
    """cpu_miniature as committed: no GPU asked for (the default partition has none), 2 CPUs, one worker."""
    out = subprocess.run([sys.executable, str(REPO / "tools" / "plan_study.py"),
                          str(REPO / "examples" / "studies" / "cpu_miniature.yaml"), "--emit", "slurm",
                          str(tmp_path / "slurm")], cwd=REPO, env=job_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    scripts = sorted((tmp_path / "slurm").glob("*.sbatch"))
    for script in (scripts[0], next(s for s in scripts if s.name.endswith(".eval.sbatch")),
                   tmp_path / "slurm" / "report.sbatch"):
        text = script.read_text()
        assert "--gpus-per-node" not in text and "--num-workers" not in text and "--cpus-per-task=2" in text
        test = subprocess.run(["sbatch", "--test-only", str(script)], cwd=REPO, env=job_env(), capture_output=True,
                              text=True, timeout=60)
        assert test.returncode == 0 and "to start at" in test.stderr, (script.name, test.stderr)


def test_the_sbatch_scripts_cpu_partition_recipes_as_the_readme_gives_them(tmp_path):
    """--gpus-per-node=0 and SBATCH_GPUS_PER_NODE=0 submit to the CPU partition; GPUS_PER_NODE=0 alone leaves the
    script's --gpus-per-node=8 standing, which the CPU partition refuses (so the README does not offer it); the
    script as written submits to the fake-GPU partition."""
    script = str(REPO / "examples" / "slurm" / "pretrain_nvidia.sbatch")

    def test_only(*options: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sbatch", "--test-only", "--nodes=1", "--cpus-per-task=1", *options, script],
                              cwd=tmp_path, env=job_env(**env), capture_output=True, text=True, timeout=60)

    assert test_only("--gpus-per-node=0").returncode == 0
    assert test_only(SBATCH_GPUS_PER_NODE="0").returncode == 0
    refused = test_only(GPUS_PER_NODE="0")
    assert refused.returncode != 0, refused.stderr  # "Requested node configuration is not available" here
    assert test_only("--partition=gpu").returncode == 0

"""Emitted SLURM scripts: they parse, and submit.sh, run against a fake sbatch, chains every job after the job
that writes the checkpoint it starts from, stops at the first refused submission, creates the logs folder first,
ends the chain with the report job and names no folder of the machine it was written on. tests/hpc/ submits them
to a real SLURM."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from megamlm.study.running.commands import REPO
from megamlm.study.running.slurm import emit_slurm, segments

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

FAKE_SBATCH = """#!/bin/bash
# Records its arguments, its folder and whether the folder of its --output log exists, and answers a new job id as
# sbatch --parsable does ("id;cluster"); the call numbered REFUSE is refused as sbatch refuses (message, exit 1).
n=$(( $(wc -l < "$SBATCH_LOG" 2>/dev/null || echo 0) + 1 ))
if [[ "$n" == "${REFUSE:-}" ]]; then
    echo "sbatch: error: Invalid partition name specified" >&2
    exit 1
fi
logs=missing
for a in "$@"; do
    if [[ "$a" == --output=* ]]; then out=${a#--output=}; [[ -d "$(dirname "$out")" ]] && logs=exists; fi
done
echo "$n $* cwd=$PWD logs=$logs" >> "$SBATCH_LOG"
echo "$n;cluster"
"""

FAKE_SQUEUE = """#!/bin/bash
# The queue as squeue -h -o "%j %i" prints it: the lines of $SQUEUE_LINES (none by default).
printf '%s' "${SQUEUE_LINES:-}"
"""


def fake_sbatch(tmp_path: Path, refuse: int | None = None) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("sbatch", FAKE_SBATCH), ("squeue", FAKE_SQUEUE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SBATCH_LOG": str(tmp_path / "sbatch.log")}
    env.pop("WORKDIR", None)
    return {**env, "REFUSE": str(refuse)} if refuse else env


def sbatch_calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "sbatch.log"
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def submit(plan, tmp_path):
    out = tmp_path / "slurm"
    written = emit_slurm(plan, out, workdir=tmp_path)
    subprocess.run(["bash", str(out / "submit.sh")], check=True, env=fake_sbatch(tmp_path), capture_output=True,
                   text=True)
    jobs = {}
    for number, *args in sbatch_calls(tmp_path):
        args = [a for a in args if not a.startswith(("cwd=", "logs="))]
        dependency = next((a.split(":", 1)[1] for a in args if a.startswith("--dependency=")), None)
        target = next((a.split("TARGET_STEP=")[1] for a in args if a.startswith("--export=")), None)
        jobs[int(number)] = (Path(args[-1]).name, dependency, target)
    return written, jobs


def test_scripts_parse(small_plan, tmp_path):
    plan = small_plan({"evaluation": {"tasks": ["brown-pos"], "lrs": [1e-3], "seeds": [0]}})
    written = emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    assert len(written) == 2 * len(plan.runs) + 3  # + report.sbatch, submit.sh, env.sh
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
    # The last job writes the report after every evaluation, whether each succeeded or not (afterany).
    [(_, (script, dependency, _))] = [max(jobs.items())]
    eval_jobs = sorted(n for n, j in jobs.items() if j[0].endswith(".eval.sbatch"))
    assert script == "report.sbatch" and dependency == ":".join(map(str, eval_jobs))
    dependency_flag = next(a for a in sbatch_calls(tmp_path)[-1] if a.startswith("--dependency="))
    assert dependency_flag.startswith("--dependency=afterany:")


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


def test_a_refused_submission_stops_submit_sh_and_nothing_after_it_is_submitted(small_plan, tmp_path):
    """sbatch refusing the third job (a wrong partition, account, time limit or gres) stops the script with
    sbatch's message and a non-zero exit; the jobs that would depend on it are not submitted."""
    plan = small_plan()
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    result = subprocess.run(["bash", str(tmp_path / "slurm" / "submit.sh")], env=fake_sbatch(tmp_path, refuse=3),
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "Invalid partition name specified" in result.stderr and "submit.sh: sbatch refused" in result.stderr
    assert len(sbatch_calls(tmp_path)) == 2 and "submitted" not in result.stdout


def test_the_logs_folder_exists_before_any_job_is_submitted(small_plan, tmp_path):
    plan = small_plan()
    submit(plan, tmp_path)
    calls = sbatch_calls(tmp_path)
    assert calls and all("logs=exists" in call for call in calls)
    assert all(f"--output={Path(plan.root) / 'logs'}/%x-%j.out" in call for call in calls)


def test_scripts_name_no_folder_of_the_machine_they_were_written_on(small_study, tmp_path):
    """Planned with a relative root from a folder, emitted, then the folder moved: submit.sh finds the new folder,
    runs sbatch there, and no script holds the old path; every job script sources the environment file."""
    old = tmp_path / "laptop"
    old.mkdir()
    plan = build_relative_plan(small_study)
    emit_slurm(plan, old / "slurm" / "small", workdir=old)
    new = tmp_path / "cluster"
    shutil.move(old, new)
    for script in (new / "slurm" / "small").iterdir():
        text = script.read_text()
        assert str(old) not in text, script.name
        if script.suffix == ".sbatch":
            assert 'source "$MEGAMLM_ENV"' in text, script.name
    (new / "slurm" / "small" / "env.sh").write_text("echo environment activated >&2\n")
    result = subprocess.run(["bash", str(new / "slurm" / "small" / "submit.sh")], env=fake_sbatch(tmp_path),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "environment activated" in result.stderr
    assert all(f"cwd={new}" in call for call in sbatch_calls(tmp_path))
    assert (new / "runs" / "small" / "logs").is_dir()


def build_relative_plan(small_study):
    from megamlm.study.planning.plan import build_plan

    return build_plan(small_study(), "runs/small")


def test_env_sh_is_written_once_and_kept(small_plan, tmp_path):
    plan = small_plan()
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    env = tmp_path / "slurm" / "env.sh"
    assert "module load" in env.read_text()
    env.write_text("source /my/venv/bin/activate\n")
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path, force=True)
    assert env.read_text() == "source /my/venv/bin/activate\n"


def test_placeholder_data_paths_are_warned_about_at_emission(small_plan, tmp_path, capsys):
    plan = small_plan({"pretrain": {"model": {"seq_length": 64}, "data": {"data_path": ["/data/fineweb_text_document"],
                                                                           "tokenizer_model": "/models/llama3"}}})
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    err = capsys.readouterr().err
    assert "warning: the study's data /data/fineweb_text_document does not exist here" in err
    assert "warning: the study's tokenizer /models/llama3 does not exist here" in err


def test_hub_evaluation_sets_are_fetched_on_the_login_node_before_submission(small_plan, tmp_path):
    plan = small_plan({"evaluation": {"tasks": ["sst2", "brown-pos"], "lrs": [1e-3], "seeds": [0]}})
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    submit_sh = (tmp_path / "slurm" / "submit.sh").read_text()
    fetch = submit_sh.index("tools/fetch_eval_datasets.py sst2")
    assert fetch < submit_sh.index("$(submit ")
    evaluation = (tmp_path / "slurm" / "tiny-clm100-m40.eval.sbatch").read_text()
    assert "HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}" in evaluation


def test_each_evaluation_job_writes_its_own_tables(small_plan, tmp_path):
    plan = small_plan({"evaluation": {"tasks": ["brown-pos"], "lrs": [1e-3], "seeds": [0]}})
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    for run in plan.runs:
        text = (tmp_path / "slurm" / f"{run.name}.eval.sbatch").read_text().replace(" \\\n    ", " ")
        assert f"--output {plan.root}/eval " in text  # every fine-tuning result where the report reads them
        assert f"--tables {plan.root}/eval_jobs/{run.name}" in text


def test_a_cpu_partition_asks_for_no_gpus_and_launches_on_the_cpus(small_plan, tmp_path):
    plan = small_plan(overrides=["slurm.gpus_per_node=0", "slurm.eval_gpus=0"])
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    for script in (tmp_path / "slurm").glob("*.sbatch"):
        assert "--gpus-per-node" not in script.read_text(), script.name
    assert "export GPUS_PER_NODE=0" in (tmp_path / "slurm" / "tiny-clm100-m40.sbatch").read_text()


def test_scripts_find_the_repository_relative_to_the_workdir(small_plan, tmp_path):
    plan = small_plan()
    emit_slurm(plan, tmp_path / "slurm", workdir=REPO)  # planned from the repository root, as documented
    text = (tmp_path / "slurm" / "tiny-clm100-m40.sbatch").read_text()
    assert 'export REPO=${REPO:-"$WORKDIR"}' in text and str(REPO) not in text


def test_missing_evaluation_data_is_warned_about_at_emission(small_plan, tmp_path, capsys):
    plan = small_plan({"evaluation": {"tasks": ["brown-pos", "austen-qa", f"token_classification:{tmp_path}/mine"],
                                      "lrs": [1e-3], "seeds": [0], "data_dir": str(tmp_path / "nodata")}})
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    err = capsys.readouterr().err
    assert f"warning: the study's evaluation data folder {tmp_path / 'nodata'} does not exist here" in err
    assert f"warning: the study's task folder of token_classification {tmp_path}/mine does not exist here" in err
    assert "austen" not in err  # the Austen tasks read the package's own corpus


@pytest.mark.parametrize("key, limit", [("time", "5"), ("time", "4:59"), ("eval_time", "0-0:05")])
def test_a_time_limit_within_the_stop_warning_is_refused_at_emission(small_plan, tmp_path, key, limit):
    from megamlm.study.planning.schema import StudyError

    plan = small_plan({"slurm": {key: limit}, "evaluation": {"tasks": ["austen-qa"], "lrs": [1e-3], "seeds": [0]}})
    with pytest.raises(StudyError, match=rf"slurm.{key} is '{limit}' \(\d+ s\), not longer than the jobs' stop "
                                         r"warning 300 s .*give it more than 5 minutes"):
        emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    assert not (tmp_path / "slurm").exists()
    emit_slurm(small_plan({"slurm": {key: "5:01"}}), tmp_path / "ok", workdir=tmp_path)  # 301 s is enough


def test_every_dependent_job_dies_with_the_job_it_waits_on(small_plan, tmp_path):
    submit(small_plan({"evaluation": {"tasks": ["austen-qa"], "lrs": [1e-3], "seeds": [0]}}), tmp_path)
    for _, *args in sbatch_calls(tmp_path):
        dependency = next((a for a in args if a.startswith("--dependency=")), "")
        assert ("--kill-on-invalid-dep=yes" in args) == dependency.startswith("--dependency=afterok:"), args


def test_a_second_submission_while_the_studys_jobs_are_queued_is_refused_in_one_line(small_plan, tmp_path):
    plan = small_plan()
    emit_slurm(plan, tmp_path / "slurm", workdir=tmp_path)
    env = {**fake_sbatch(tmp_path), "SQUEUE_LINES": f"other-job 7\n{plan.study.name}-tiny-clm100-m40 12\n"
                                                     f"{plan.study.name}-report 15\n"}
    out = subprocess.run(["bash", str(tmp_path / "slurm" / "submit.sh")], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and sbatch_calls(tmp_path) == []
    assert out.stderr == (f"submit.sh: study {plan.study.name} has jobs queued or running already (12 15); wait for "
                          "them to end, or scancel 12 15, then submit again\n")

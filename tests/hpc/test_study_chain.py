"""A small study (tools/plan_study.py --scale and --set: a CLM run and a CLM-then-MLM arm branched at its switch
step, each fine-tuned on one task) emitted with --emit slurm and submitted with its submit.sh to the stage's
cluster: the chain runs in order, the branch starts at its branch step, each evaluation job writes only its own
tables and the last job writes the report holding every model; a refused submission stops submit.sh. On the
stage's two nodes (issue 46 item 4), the study asks for two nodes a pretraining job (slurm.nodes: 2): every
pretraining job runs one rank on each node, every evaluation job and the report on one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime

from nodes import NODE1, NODE2
from slurm_jobs import REPO, job_env, queue_empty, wait_until

STUDY = str(REPO / "examples" / "studies" / "cpu_miniature.yaml")
SMALL = ["--scale", "0.02", "--root", "runs/mini", "--set", "seeds=[1]",
         "--set", "grids=[{budgets: [500], clm_fractions: [0.5, 1], mask_ratios: [0.4]}]",
         "--set", "continued_pretraining=[]",
         "--set", "pretrain.model={num_layers: 1, hidden_size: 32, ffn_hidden_size: 64, num_attention_heads: 2, "
                  "num_query_groups: 2, seq_length: 32}",
         "--set", "pretrain.training.micro_batch_size=2", "--set", "pretrain.training.global_batch_size=4",
         "--set", "pretrain.validation={eval_interval: 250, eval_iters: 1}",
         "--set", "evaluation={tasks: [austen-qa], lrs: [1.0e-3], seeds: [0], max_train_examples: 8, "
                  "max_eval_examples: 8, hyperparameters: {batch_size: 4, micro_batch_size: 4, max_steps: 1}, "
                  "task_settings: {max_query_length: 8}}",
         "--set", 'slurm={gpus_per_node: 0, eval_gpus: 0, cpus_per_task: 1, time: "15", eval_time: "15"}',
         # The study names its tokenizer relative to the repository root, where it runs; the chain runs elsewhere.
         "--set", f"pretrain.data.tokenizer_model={REPO / 'megamlm' / 'assets' / 'austen' / 'tokenizer-2048.json'}"]
CLM, BRANCH = "tiny-clm10-m40", "tiny-clm5-mlm5-m40"
TWO_NODES = os.environ.get("MEGAMLM_HPC_TWO_NODES") == "1"


def emit(folder, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, str(REPO / "tools" / "plan_study.py"), STUDY, *SMALL, *extra,
                          "--emit", "slurm", "slurm"], cwd=folder, env=job_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 or not check, out.stderr[-3000:]
    return out


def jobs_named(prefix: str) -> dict[int, dict]:
    out = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=60).stdout
    jobs = {}
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if fields.get("JobName", "").startswith(prefix):
            jobs[int(fields["JobId"])] = fields
    return jobs


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def hosts(node_list: str) -> set[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", node_list], capture_output=True, text=True, timeout=60)
    return set(out.stdout.split())


def test_the_chain_runs_in_order_and_its_last_job_reports_every_model(tmp_path):
    emit(tmp_path, *(["--set", "slurm.nodes=2"] if TWO_NODES else []))
    submitted = subprocess.run(["bash", "slurm/submit.sh"], cwd=tmp_path, env=job_env(), capture_output=True,
                               text=True, timeout=300)
    assert submitted.returncode == 0, submitted.stderr
    assert "submitted 3 pretraining jobs for 2 runs, 2 evaluation jobs and the report job" in submitted.stdout
    wait_until(queue_empty, "every job of the study ended", limit=900, every=2)
    jobs = jobs_named("cpu_miniature-")
    assert len(jobs) == 6 and all(j["JobState"] == "COMPLETED" for j in jobs.values()), \
        {j["JobName"]: j["JobState"] for j in jobs.values()}
    by_name: dict[str, list[dict]] = {}
    for job_id in sorted(jobs):
        by_name.setdefault(jobs[job_id]["JobName"].removeprefix("cpu_miniature-"), []).append(jobs[job_id])
    first_segment, last_segment = by_name[CLM]
    [branch] = by_name[BRANCH]
    # In order: the branch starts once the CLM run's first segment has ended at the branch step, each evaluation
    # after its run, the report after every evaluation.
    assert when(branch["StartTime"]) >= when(first_segment["EndTime"])
    assert when(last_segment["StartTime"]) >= when(first_segment["EndTime"])
    for run, last in ((CLM, last_segment), (BRANCH, branch)):
        [evaluation] = by_name[f"eval-{run}"]
        assert when(evaluation["StartTime"]) >= when(last["EndTime"])
    [report] = by_name["report"]
    evaluations = [job for name, named in by_name.items() if name.startswith("eval-") for job in named]
    assert all(when(report["StartTime"]) >= when(e["EndTime"]) for e in evaluations)
    if TWO_NODES:  # every pretraining job on both nodes, the evaluations and the report on one each
        assert all(hosts(job["NodeList"]) == {NODE1, NODE2} for job in (first_segment, last_segment, branch)), \
            {name: [job["NodeList"] for job in named] for name, named in by_name.items()}
        assert all(len(hosts(job["NodeList"])) == 1 for job in [*evaluations, report])

    root = tmp_path / "runs" / "mini"
    logs = {path.name: path.read_text() for path in (root / "logs").iterdir()}
    # No rank aborts at exit (a two-node segment once did after "done", and SLURM failed its job).
    assert not any("terminate called" in text for text in logs.values()), \
        [name for name, text in logs.items() if "terminate called" in text]
    branch_log = next(text for name, text in logs.items() if name.startswith(f"cpu_miniature-{BRANCH}-"))
    assert f"branched from runs/mini/{CLM}/iter_0000005 at step 5" in branch_log
    first_log = logs[f"cpu_miniature-{CLM}-{first_segment['JobId']}.out"]
    assert "] step 5/10" in first_log and "] step 6/10" not in first_log  # the segment stopped at the branch step
    assert f"parallel layout: world {2 if TWO_NODES else 1}" in first_log
    last_log = logs[f"cpu_miniature-{CLM}-{last_segment['JobId']}.out"]
    assert f"resumed from runs/mini/{CLM}/iter_0000005 at step 5" in last_log
    for run in (CLM, BRANCH):
        own = (root / "eval_jobs" / run / "results.md").read_text()
        assert f"| {run} |" in own and all(f"| {other} |" not in own for other in (CLM, BRANCH) if other != run)
    report_text = (root / "rehearsal" / "REPORT.md").read_text()
    results = (root / "results.md").read_text()
    assert all(f"| {run} |" in results and run in report_text for run in (CLM, BRANCH))


def test_a_refused_submission_stops_submit_sh_and_submits_nothing(tmp_path):
    emit(tmp_path, "--set", "name=refused", "--set", "slurm.partition=nosuch")
    submitted = subprocess.run(["bash", "slurm/submit.sh"], cwd=tmp_path, env=job_env(), capture_output=True,
                               text=True, timeout=300)
    assert submitted.returncode != 0
    assert "invalid partition" in submitted.stderr.lower() and "submit.sh: sbatch refused" in submitted.stderr
    assert jobs_named("refused-") == {}

"""The recipes study (examples/studies/recipes_2026.yaml: the paper's arms, the CLM detour mlm -> clm -> mlm and
MNTP then MLM) scaled down to 12-step runs of a 1-layer model (hidden 32) without fine-tuning, through the
documented commands: ``--emit slurm`` writes scripts that launch exactly the planned commands with their branch
flags, and ``--run`` trains the 8 runs end to end, the detour branching from the MLM run's pinned checkpoint at
its first switch (step 7) and MNTP-then-MLM from the MNTP run at step 6, as their run records show.

Slow: 8 pretraining processes, each starting torch and building its data indices: 2.4 CPU-minutes; on the shared
2-core machine under load (2026-12-02), 11 minutes of wall time for the --run alone and 23.5 for this test."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from megamlm.study.planning.load import load_study
from megamlm.study.planning.plan import build_plan

REPO = Path(__file__).resolve().parents[2]
STUDY = "examples/studies/recipes_2026.yaml"
pytestmark = pytest.mark.slow

SCALE = "0.024"  # 500-step runs -> 12; the detour switches after steps 7 and 11, MNTP-then-MLM after step 6
TINY = ("pretrain.model={num_layers: 1, hidden_size: 32, ffn_hidden_size: 64, num_attention_heads: 4, "
        "num_query_groups: 2, seq_length: 64}")
DETOUR, MLM = "tiny-mlm7-clm4-mlm1-m40", "tiny-mlm12-m40"
MNTP_MLM, MNTP = "tiny-mntp6-mlm6-m40", "tiny-mntp12-m40"


def overrides(tmp_path: Path) -> list[str]:
    return [f"report={tmp_path / 'REPORT.md'}", "evaluation=null", TINY, "pretrain.validation.eval_interval=250"]


def plan_study(tmp_path: Path, *extra: str, timeout: int) -> subprocess.CompletedProcess:
    command = [sys.executable, "tools/plan_study.py", STUDY, "--scale", SCALE, "--root", str(tmp_path / "runs")]
    for override in overrides(tmp_path):
        command += ["--set", override]
    return subprocess.run(command + list(extra), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def script_flags(script: str) -> list[str]:
    """The pretrain.py flags a run's sbatch script passes to examples/slurm/pretrain_nvidia.sbatch."""
    command = script.replace(" \\\n    ", " ")
    [line] = [ln for ln in command.splitlines() if ln.startswith('bash "$REPO/examples/slurm/pretrain_nvidia.sbatch"')]
    words = shlex.split(line.split('${TARGET_STEP:+')[0])
    return words[2:]


def test_recipes_study_scaled_down_emits_slurm_and_runs_end_to_end(tmp_path, cache_dir, monkeypatch):
    monkeypatch.chdir(REPO)
    plan = build_plan(load_study(STUDY, overrides(tmp_path), float(SCALE)), str(tmp_path / "runs"))
    assert (plan.run(DETOUR).parent, plan.run(DETOUR).branch_step) == (MLM, 7)
    assert (plan.run(MNTP_MLM).parent, plan.run(MNTP_MLM).branch_step) == (MNTP, 6)
    assert plan.run(MLM).save_at == [7] and plan.run(MNTP).save_at == [6]

    emitted = plan_study(tmp_path, "--emit", "slurm", str(tmp_path / "slurm"), timeout=600)
    assert emitted.returncode == 0, emitted.stdout[-3000:] + emitted.stderr[-3000:]
    assert "| tiny-mlm7-clm4-mlm1-m40 | tiny-mlm12-m40 @ 7 | mlm 1-7 -> clm 8-11 -> mlm 12-12 |" in emitted.stdout
    for run in plan.runs:
        assert script_flags((tmp_path / "slurm" / f"{run.name}.sbatch").read_text()) == plan.flags(run), run.name
    detour = plan.flags(plan.run(DETOUR))
    assert detour[detour.index("--load") + 1] == f"{tmp_path}/runs/{MLM}/iter_0000007"
    assert detour[detour.index("--objective") + 1] == "mlm,clm,mlm"
    mlm = plan.flags(plan.run(MLM))
    assert mlm[mlm.index("--save-at") + 1] == "7"
    submit = (tmp_path / "slurm" / "submit.sh").read_text()
    # The MLM run is submitted as a job to step 7, then one to its end; the detour waits for the first.
    assert f'TARGET_STEP=7 "$SCRIPTS"/{MLM}.sbatch)' in submit
    assert f'--dependency=afterok:$job_tiny_mlm12_m40_1 --export=ALL,TARGET_STEP= "$SCRIPTS"/{DETOUR}.sbatch' \
        in submit

    ran = plan_study(tmp_path, "--run", "--quiet", timeout=1800)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
    assert ran.stdout.count(": trained") == len(plan.runs) == 8
    for name, parent, step in ((DETOUR, MLM, 7), (MNTP_MLM, MNTP, 6)):
        record = json.loads((tmp_path / "runs" / name / "run_record.json").read_text())
        [branch] = [event for event in record["lineage"] if event["kind"] == "branch"]
        assert Path(branch["parent_run"]).name == parent and branch["step"] == step, record["lineage"]
        status = json.loads((tmp_path / "runs" / "status" / f"{name}.json").read_text())
        assert f"{tmp_path}/runs/{parent}/iter_{step:07d}" in status["commands"]["pretrain"]
    metrics = [json.loads(line) for line in (tmp_path / "runs" / DETOUR / "metrics.jsonl").read_text().splitlines()]
    trained = {m["step"]: m["objective"] for m in metrics if m.get("kind") == "train"}
    assert trained == {8: "clm", 9: "clm", 10: "clm", 11: "clm", 12: "mlm"}  # its own steps: the rest are the MLM run's
    assert (tmp_path / "REPORT.md").is_file()

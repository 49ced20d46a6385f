"""The CPU miniature of the paper's study, scaled down (--scale 0.04: 40-step runs, 10 steps of continued
pretraining, 2 fine-tuning steps) and run end to end through the documented command: plan, pretraining with
branches and a continuation, validation, export, fine-tuning, report; a second launch does nothing again."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.mark.skipif(not (REPO.parent / "shared" / "data" / "brown").is_dir(),
                    reason="needs ../shared/data (Brown POS) for the fine-tuning task")
def test_cpu_miniature_scaled_down_end_to_end(tmp_path):
    command = [sys.executable, "tools/plan_study.py", "examples/studies/cpu_miniature.yaml", "--scale", "0.04",
               "--root", str(tmp_path / "runs"), "--set", f"report={tmp_path / 'REPORT.md'}", "--run", "--quiet"]
    first = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3000)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert first.stdout.count(": trained") == 10
    report = (tmp_path / "REPORT.md").read_text()
    assert "10 of 10 runs have finished." in report
    assert report.startswith("# Study `cpu_miniature`: a rehearsal of the pipeline (`--scale 0.04`)")
    assert "significan" not in report.lower()  # a rehearsal draws no conclusions
    assert "| tiny-clm30-mlm10-m40 | 2 |" in report  # both seeds' branch reached the final validation
    assert "#### token classification" in report
    status = json.loads((tmp_path / "runs" / "status" / "tiny-clm20-mlm20-m40-s1.json").read_text())
    assert "--load" in status["commands"]["pretrain"]
    branch = json.loads((tmp_path / "runs" / "tiny-clm20-mlm20-m40-s1" / "run_record.json").read_text())
    assert "branch" in json.dumps(branch.get("lineage"))

    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and second.stdout.count(": finished before") == 10, second.stdout[-2000:]

"""The CPU miniature of the paper's study, scaled down (--scale 0.04: 20-step runs, CLM-then-MLM switching at
steps 5, 10 and 15, 5 steps of continued pretraining from the CLM and from the MLM run, the MLM and CLM runs
also evaluated at step 5, 1 fine-tuning step on each of the four task families at 3 LRs and 2 seeds) and run
end to end through the documented command: plan, pretraining with branches and continuations, validation,
export, fine-tuning, report with the paper's figures and its claims section (untested: a rehearsal); a second
launch does nothing again.

Slow: 21 pretraining runs and 648 fine-tuning runs (27 models x 4 tasks x 3 LRs x 2 seeds), each step tiny but
every run starting its own processes and every fine-tuning run paying its fixed costs (the retrieval task encodes
its whole corpus): about an hour on 2 cores (measured 2026-12-01: 14 runs in 50 minutes beside a CI run, the other
7 in 10 minutes alone)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
pytestmark = pytest.mark.slow

RUNS = 21


@pytest.mark.skipif(not ((SHARED / "brown").is_dir() and (SHARED / "sentiment").is_dir()),
                    reason="needs ../shared/data (Brown POS, RT sentiment) for two of the fine-tuning tasks")
def test_cpu_miniature_scaled_down_end_to_end(tmp_path):
    command = [sys.executable, "tools/plan_study.py", "examples/studies/cpu_miniature.yaml", "--scale", "0.04",
               "--root", str(tmp_path / "runs"), "--set", f"report={tmp_path / 'REPORT.md'}", "--run", "--quiet"]
    first = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=5400)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert first.stdout.count(": trained") == RUNS
    report = (tmp_path / "REPORT.md").read_text()
    assert f"{RUNS} of {RUNS} runs have finished." in report
    assert report.startswith("# Study `cpu_miniature`: a rehearsal of the pipeline (`--scale 0.04`)")
    assert "significan" not in report.lower()  # a rehearsal draws no conclusions
    assert "| tiny-clm10-mlm10-m40 | 3 |" in report  # all three seeds' branch reached the final validation
    for family in ("sequence classification", "token classification", "question answering",
                   "information retrieval"):
        assert f"#### {family}" in report
    claims = report.split("## The paper's claims")[1]
    assert "answers none of them" in claims and "supported" not in claims
    assert "tiny-clm20-m40-cpt-mlm5 − tiny-mlm20-m40-cpt-mlm5" in claims  # (d): from CLM against from MLM
    assert "at step 5" in claims  # (b): the evaluated intermediate checkpoint
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        for figure in ("validation", "score_vs_clm_fraction", "score_vs_steps", "lr_sensitivity", "lr_stability",
                       "continuation_gain"):
            assert (tmp_path / "figures" / f"{figure}.png").is_file() and f"(figures/{figure}.png)" in report
    status = json.loads((tmp_path / "runs" / "status" / "tiny-clm10-mlm10-m40-s1.json").read_text())
    assert "--load" in status["commands"]["pretrain"]
    branch = json.loads((tmp_path / "runs" / "tiny-clm10-mlm10-m40-s1" / "run_record.json").read_text())
    assert "branch" in json.dumps(branch.get("lineage"))

    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert second.returncode == 0 and second.stdout.count(": finished before") == RUNS, second.stdout[-2000:]

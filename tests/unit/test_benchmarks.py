"""The benchmark scripts run with the transformers the extras install.

A script's own folder is first on ``sys.path`` when Python runs it, so a benchmark named like a package that
transformers imports shadows it: ``benchmarks/kernels.py`` hid Hugging Face's ``kernels`` package and every
benchmark that compares with transformers failed at import (ImportError: cannot import name 'CUDAProperties').
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def test_no_benchmark_script_shadows_an_installed_module():
    shadowing = [script.name for script in sorted(BENCHMARKS.glob("*.py"))
                 if importlib.util.find_spec(script.stem) is not None]
    assert not shadowing, f"benchmarks/{shadowing[0]} hides the installed module of its name: rename the script"


@pytest.mark.parametrize("block", ["preset", "modernbert"])
def test_the_comparison_with_transformers_runs(tmp_path, block):
    """EuroBertForMaskedLM against the preset's block; ModernBertForMaskedLM against megamlm's ModernBERT block."""
    out = tmp_path / "step.json"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "train_step.py"), "--preset", "tiny", "--compare", "hf", "--device", "cpu",
         "--steps", "1", "--warmup", "0", "--micro-batch-size", "2", "--seq-length", "32", "--json", str(out),
         "--block", block],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures["megamlm_tokens_per_s"] > 0 and figures["hf_tokens_per_s"] > 0, figures

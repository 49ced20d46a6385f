"""pretrain.py --dry-run: a 64-GPU layout checked and sized on a CPU, without a process group."""

import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from megamlm.cli import main
from megamlm.config import parse_args
from megamlm.parallel.dry_run import dry_run_model_args, rank_estimates
from megamlm.parallel.dims import dims_from_config
from megamlm.model.transformer import Transformer

REPO = Path(__file__).resolve().parents[3]
LAYOUT = ["--model", "610m", "--dry-run", "--world-size", "64", "--tp", "2", "--pp", "4", "--micro-batch-size", "4",
          "--global-batch-size", "512", "--device", "cuda"]


def test_610m_on_64_gpus_prints_every_pipeline_rank(capsys):
    assert main(LAYOUT) == 0
    out = capsys.readouterr().out
    assert "TP 2 | PP 4" in out and "DP 8 (FSDP2: replicate 1 x shard 8)" in out
    assert "16 micro-batches per step" in out
    assert not (dist.is_available() and dist.is_initialized())


def test_per_rank_parameters_add_up_to_the_model():
    cfg = parse_args(LAYOUT)
    dims, args = dims_from_config(cfg), dry_run_model_args(cfg)
    rows = rank_estimates(cfg, dims, args)
    assert [r["layers"][0] for r in rows] == ["0", "7", "14", "20"]
    # Each pipeline rank holds 1/TP of its matrices and whole norms: adding the TP shares back gives the model.
    with torch.device("meta"):
        total = sum(p.numel() for p in Transformer(args).parameters())
    assert sum((r["parameters"] - r["replicated"]) * 2 + r["replicated"] for r in rows) == total
    assert rows[0]["parameters_per_rank"] == rows[0]["parameters"] / 8
    assert rows[-1]["head_gib"] > 0 and rows[0]["head_gib"] == 0


def test_bad_layout_fails_with_exit_code_2():
    out = subprocess.run([sys.executable, str(REPO / "pretrain.py"), "--model", "610m", "--dry-run", "--world-size",
                          "64", "--tp", "4"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2
    assert "--num-attention-heads 18 is not divisible by --tensor-model-parallel-size 4" in out.stderr

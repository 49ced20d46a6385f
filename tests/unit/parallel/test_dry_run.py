"""pretrain.py --dry-run: a 64-GPU layout checked and sized on a CPU, without a process group."""

from pathlib import Path

import torch
import torch.distributed as dist
from helpers import expect_one_line

from megamlm.cli import main
from megamlm.config import parse_args
from megamlm.model.transformer import Transformer
from megamlm.parallel.dry_run import dry_run_model_args, rank_estimates
from megamlm.training.startup import dims_from_config

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


def test_bad_layout_fails_with_exit_code_2(capsys):
    expect_one_line(capsys, main(["--model", "610m", "--dry-run", "--world-size", "64", "--tp", "4"]),
                    "--num-attention-heads 18 is not divisible by --tensor-model-parallel-size 4")


def _config_only_folder(folder: Path, **config) -> Path:
    """config.json and a Llama-3-style tokenizer, no weights: what --dry-run --init-from reads."""
    import pytest

    transformers = pytest.importorskip("transformers")
    from decoder_families import FAMILIES, tokenizer_of

    transformers.LlamaConfig(**config).save_pretrained(str(folder))
    tokenizer_of(FAMILIES["llama3.2"]).save_pretrained(str(folder))
    return folder


LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def test_dry_run_takes_the_shape_of_a_hugging_face_init_from_without_its_weights(tmp_path, capsys):
    """Llama 3.1 8B's config (no weights on disk): 8.03B parameters, GQA 32/8 heads, llama3 RoPE, untied."""
    folder = _config_only_folder(tmp_path / "llama-3.1-8b", vocab_size=128256, hidden_size=4096,
                                 intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                                 num_key_value_heads=8, max_position_embeddings=131072, rope_parameters=LLAMA3_ROPE)
    argv = ["--dry-run", "--init-from", str(folder), "--world-size", "16", "--tp", "4", "--pp", "2",
            "--seq-length", "8192", "--micro-batch-size", "1", "--global-batch-size", "64", "--device", "cuda"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "(8030.3M parameters, 32 layers, hidden 4096, vocab 128256, seq 8192)" in out, out
    assert "TP 4 | PP 2" in out and "0-15" in out and "16-31" in out
    from megamlm.hf.init_from import adopt_hf_shape

    cfg = parse_args(argv, adopt=adopt_hf_shape)
    args = dry_run_model_args(cfg)
    assert (args.num_query_groups, args.head_dim, args.rope_scaling.rope_type, args.tie_word_embeddings) == \
        (8, 128, "llama3", False)


def test_dry_run_counts_a_tied_embedding_once_per_pipeline_rank_that_holds_it(tmp_path):
    """Llama 3.2 1B's shape: 1.24B parameters with the embedding tied; under PP the last stage keeps a copy."""
    folder = _config_only_folder(tmp_path / "llama-3.2-1b", vocab_size=128256, hidden_size=2048,
                                 intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                                 num_key_value_heads=8, max_position_embeddings=131072, tie_word_embeddings=True,
                                 rope_parameters=dict(LLAMA3_ROPE, factor=32.0))
    from megamlm.hf.init_from import adopt_hf_shape

    cfg = parse_args(["--dry-run", "--init-from", str(folder), "--world-size", "2", "--pp", "2", "--seq-length",
                      "2048", "--micro-batch-size", "1", "--global-batch-size", "2"], adopt=adopt_hf_shape)
    args = dry_run_model_args(cfg)
    with torch.device("meta"):
        total = sum(p.numel() for p in Transformer(args).parameters())
    assert total == 1_235_814_400
    rows = rank_estimates(cfg, dims_from_config(cfg), args)
    embedding = 128256 * 2048
    assert rows[0]["parameters"] + rows[1]["parameters"] == total + embedding

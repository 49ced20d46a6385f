"""Tiny megamlm checkpoints written the way the trainer writes them, for the conversion tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from megamlm.checkpoint import save_checkpoint
from megamlm.config import Config
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer

REPO = Path(__file__).resolve().parents[3]
AUSTEN_TOKENIZER = REPO / "megamlm" / "assets" / "austen" / "tokenizer.json"
AUSTEN_IDS = {"vocab_size": 8192, "bos_id": 0, "eos_id": 1, "pad_id": 2, "mask_id": 3}

TINY = ModelArgs(vocab_size=8192, num_layers=2, hidden_size=64, ffn_hidden_size=160, num_attention_heads=4,
                 num_query_groups=2, max_seq_length=64, rope_theta=5000.0, norm_epsilon=1e-6)


def random_model(args: ModelArgs = TINY, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(args)
    with torch.no_grad():  # non-trivial norms, so a swapped or dropped norm weight shows in the logits
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model


def write_checkpoint(save_dir: Path, model: Transformer, step: int = 7, consumed: int = 56,
                     tokenizer: dict | None = None, objective: str = "clm_then_mlm") -> Path:
    cfg = Config()
    cfg.objective.objective = objective
    cfg.training.train_iters = 10
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    record = {
        "config": cfg.to_dict(), "model_args": model.args.to_dict(), "switch_step": 2,
        "data_path": ["/data/austen_text_document"], "seq_length": model.args.max_seq_length,
        "tokenizer": {"path": str(AUSTEN_TOKENIZER), **(tokenizer or AUSTEN_IDS)},
    }
    return save_checkpoint(save_dir, step, model, optimizer, {"consumed_samples": consumed}, record)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """(save folder, the model it holds)."""
    save_dir = tmp_path_factory.mktemp("ckpt")
    model = random_model()
    write_checkpoint(save_dir, model)
    return save_dir, model

"""Worker side of test_hf_export_layouts.py: save the same weights from a parallel layout.

(Kept out of the test module so spawned processes can import it by name.)
"""

from __future__ import annotations

from pathlib import Path

import torch
from helpers import SPLITTABLE, layout_dims, random_model, tiny_args

from megamlm.config import Config

REPO = Path(__file__).resolve().parents[2]
AUSTEN_TOKENIZER = REPO / "megamlm" / "assets" / "austen" / "tokenizer.json"
# Splits by 2 in heads, KV heads, layers and MLP width; the Austen tokenizer's vocabulary.
ARGS = tiny_args(vocab_size=8192, **SPLITTABLE)
SEED = 11


def reference_model():
    return random_model(ARGS, SEED)


def run_record() -> dict:
    return {"config": Config().to_dict(), "model_args": ARGS.to_dict(), "switch_step": None, "data_path": [],
            "seq_length": ARGS.max_seq_length,
            "tokenizer": {"path": str(AUSTEN_TOKENIZER), "vocab_size": 8192, "bos_id": 0, "eos_id": 1, "pad_id": 2,
                          "mask_id": 3}}


def save(model, save_dir: str) -> None:
    from megamlm.checkpoint import save_checkpoint

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    save_checkpoint(save_dir, 5, model, optimizer, {"consumed_samples": 40}, run_record())


def save_layout(rank: int, world: int, layout: dict, save_dir: str) -> None:
    from megamlm.parallel.parallelize import parallelize

    dims = layout_dims(world, layout, ARGS, micro_batch_size=1, global_batch_size=world)
    pm = parallelize(reference_model(), dims, dims.build_mesh("cpu"), torch.device("cpu"))
    save(pm.model, save_dir)

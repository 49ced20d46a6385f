"""megamlm's own model as the encoder of an evaluation, for models no Hugging Face encoder class holds exactly
(an encoder continued from Qwen3: EuroBERT has no query/key norms, and transformers' Qwen3 is causal only).

The model's folder is its causal Hugging Face export (``--arch qwen3``: config, weights, tokenizer) with a
``megamlm_encoder.json`` beside it; ``megamlm.eval.model_io.load_encoder`` then reads the weights back into
megamlm's model and runs it bidirectionally, padding kept apart from the tokens as its own document.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from megamlm.hf.importer import load_hf_weights, model_args_from_hf
from megamlm.model.transformer import Transformer

MARKER = "megamlm_encoder.json"


class MegamlmEncoder(nn.Module):
    """A megamlm Transformer with the call of a Hugging Face encoder: ``(input_ids, attention_mask)`` ->
    ``.last_hidden_state``, bidirectional; padded positions (attention_mask 0) form their own document, so no
    token attends to them."""

    def __init__(self, model: nn.Module, config):
        super().__init__()
        self.model = model
        self.config = config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        documents = attention_mask.long() if attention_mask is not None and not bool(attention_mask.all()) else None
        return SimpleNamespace(last_hidden_state=self.model(input_ids, causal=False, document_ids=documents))


def is_megamlm_encoder(path: str | Path) -> bool:
    return (Path(path) / MARKER).is_file()


def write_marker(folder: Path, reason: str) -> None:
    (folder / MARKER).write_text(json.dumps({"encoder": "megamlm", "reason": reason}, indent=2) + "\n")


def load_megamlm_encoder(path: str | Path) -> MegamlmEncoder:
    from transformers import AutoConfig

    args = model_args_from_hf(path)
    model = Transformer(args)
    load_hf_weights(path, model)
    return MegamlmEncoder(model.float(), AutoConfig.from_pretrained(str(path), trust_remote_code=False))

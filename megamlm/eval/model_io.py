"""Load an encoder and its tokenizer from a Hugging Face model folder, with the checks that turn a
broken folder into one clear error instead of a failure deep inside a fine-tuning run."""

from __future__ import annotations

import json
from pathlib import Path

import torch


class ModelFolderError(ValueError):
    """A model folder that cannot be evaluated; the message names the fix."""


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "tokenizer.model", "vocab.json")


def check_model_folder(path: str | Path) -> None:
    """Fail early (before any run starts) on a folder without config, weights or tokenizer."""
    path = Path(path)
    if not path.is_dir():
        raise ModelFolderError(f"model folder {path} does not exist; pass a Hugging Face model folder "
                               f"(e.g. one written by tools/convert_to_hf.py)")
    if not (path / "config.json").is_file():
        raise ModelFolderError(f"model folder {path} has no config.json; it is not a Hugging Face model folder "
                               f"(export the checkpoint to Hugging Face format first)")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ModelFolderError(f"model folder {path} has no weights (*.safetensors or *.bin); "
                               f"export the model with save_pretrained")
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):
        raise ModelFolderError(f"model folder {path} has no tokenizer; copy the tokenizer files into it "
                               f"(tokenizer.save_pretrained({str(path)!r}) writes tokenizer.json and tokenizer_config.json)")
    with open(path / "config.json", encoding="utf-8") as f:
        config = json.load(f)
    if "model_type" not in config:
        raise ModelFolderError(f"{path}/config.json has no model_type; re-export the model with save_pretrained")


def load_tokenizer(path: str | Path):
    """A fast tokenizer (offsets are needed for tagging and QA) with a padding token."""
    from transformers import AutoTokenizer

    check_model_folder(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if not getattr(tokenizer, "is_fast", False):
        raise ModelFolderError(f"the tokenizer in {path} is a slow (Python) tokenizer; evaluation needs a fast one "
                               f"with offsets: save a tokenizer.json (convert with AutoTokenizer.from_pretrained(..., use_fast=True))")
    if tokenizer.pad_token is None:
        fallback = tokenizer.eos_token or tokenizer.sep_token or tokenizer.unk_token
        if fallback is None:
            raise ModelFolderError(f"the tokenizer in {path} has no pad, eos, sep or unk token to pad with; "
                                   f"set pad_token in tokenizer_config.json")
        tokenizer.pad_token = fallback
    return tokenizer


def segment_separator(tokenizer) -> str:
    """Text to append to the first segment of a pair when the tokenizer's own template puts nothing
    between the two segments (e.g. a raw byte-level BPE), so the encoder still sees a boundary."""
    if tokenizer.num_special_tokens_to_add(pair=True) > tokenizer.num_special_tokens_to_add(pair=False):
        return ""
    return tokenizer.sep_token or tokenizer.eos_token or tokenizer.pad_token


def load_encoder(path: str | Path):
    """The bare encoder (AutoModel: EuroBERT, BERT, Llama, ...) in float32; heads are added on top."""
    from transformers import AutoModel

    check_model_folder(path)
    return AutoModel.from_pretrained(str(path), dtype=torch.float32)

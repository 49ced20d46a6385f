"""Load an encoder and its tokenizer from a Hugging Face model folder, with the checks that turn a
broken folder into one clear error instead of a failure deep inside a fine-tuning run."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from megamlm.errors import UserError
from megamlm.eval.megamlm_encoder import is_megamlm_encoder, load_megamlm_encoder
from megamlm.hf.hf_source import remote_code_refusal


class ModelFolderError(UserError, ValueError):
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
                               f"(tokenizer.save_pretrained({str(path)!r}) writes tokenizer.json and "
                               "tokenizer_config.json)")
    with open(path / "config.json", encoding="utf-8") as f:
        config = json.load(f)
    if "model_type" not in config:
        raise ModelFolderError(f"{path}/config.json has no model_type; re-export the model with save_pretrained")


def load_tokenizer(path: str | Path):
    """A fast tokenizer (offsets are needed for tagging and QA) with a padding token."""
    from transformers import AutoTokenizer

    check_model_folder(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except ValueError as error:
        if "trust_remote_code" in str(error):
            raise ModelFolderError(remote_code_refusal(str(path))) from None
        raise
    return prepare_tokenizer(tokenizer, path)


def prepare_tokenizer(tokenizer, path: str | Path):
    """``tokenizer`` (of the model at ``path``) checked to be fast, given a pad token (eos, sep or unk) if none."""
    if not getattr(tokenizer, "is_fast", False):
        raise ModelFolderError(f"the tokenizer in {path} is a slow (Python) tokenizer; evaluation needs a fast one "
                               "with offsets: save a tokenizer.json (convert with AutoTokenizer.from_pretrained(..., "
                               "use_fast=True))")
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


MAX_LENGTH_FRACTION = 0.99
"""The protocol's input length: 99% of the model's positions (EncodEval leaves a 1% margin), e.g. 2,028 of 2,048."""


def model_max_positions(path: str | Path) -> int | None:
    with open(Path(path) / "config.json", encoding="utf-8") as f:
        return json.load(f).get("max_position_embeddings")


def protocol_max_length(path: str | Path) -> int:
    """round(0.99 x max_position_embeddings) of the model folder (512 when the config does not say)."""
    positions = model_max_positions(path)
    return round(MAX_LENGTH_FRACTION * (positions or 512))


def model_type(path: str | Path) -> str:
    with open(Path(path) / "config.json", encoding="utf-8") as f:
        return json.load(f).get("model_type", "")


_REPORTED: set[str] = set()


def load_encoder(path: str | Path, log=print):
    """The bare encoder (AutoModel: EuroBERT, BERT, Llama, ...) in float32; heads are added on top.

    transformers' per-load progress bar and key report are silenced; what they would say is logged
    once per model folder as one line (tensors of the checkpoint that the bare encoder does not use,
    such as an LM head, are expected)."""
    import transformers
    from transformers import AutoModel

    check_model_folder(path)
    if is_megamlm_encoder(path):  # no Hugging Face encoder class holds it: megamlm's own model, bidirectional
        model = load_megamlm_encoder(path)
        key = str(Path(path).resolve())
        if key not in _REPORTED:
            _REPORTED.add(key)
            log(f"loaded {path} into megamlm's own bidirectional model ({model.config.model_type} weights, "
                f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters); later loads are silent")
        return model
    transformers.utils.logging.disable_progress_bar()
    verbosity = transformers.utils.logging.get_verbosity()
    transformers.utils.logging.set_verbosity_error()
    try:
        model, info = AutoModel.from_pretrained(str(path), dtype=torch.float32, output_loading_info=True,
                                                  trust_remote_code=False)
    except ValueError as error:
        if "trust_remote_code" in str(error):
            raise ModelFolderError(remote_code_refusal(str(path))) from None
        raise
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
    key = str(Path(path).resolve())
    if key not in _REPORTED:
        _REPORTED.add(key)
        unused, missing = sorted(info.get("unexpected_keys") or []), sorted(info.get("missing_keys") or [])
        parameters = sum(p.numel() for p in model.parameters())
        line = f"loaded {path} ({model.config.model_type}, {parameters / 1e6:.1f}M parameters"
        if unused:
            line += f"; {len(unused)} checkpoint tensors unused by the bare encoder, e.g. {unused[0]}"
        if missing:
            line += f"; {len(missing)} encoder tensors not in the checkpoint (freshly initialised), e.g. {missing[0]}"
        log(line + "); later loads of this model are silent")
    return model

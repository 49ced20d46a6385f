"""A Hugging Face model on disk: a folder with config.json and safetensors/bin weights, or a GGUF file
(read through transformers' GGUF loader, which dequantizes to float32)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from megamlm.hf.errors import ConversionError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class HFSource:
    folder: Path
    gguf_file: str | None = None

    def describe(self) -> str:
        return str(self.folder / self.gguf_file) if self.gguf_file else str(self.folder)

    @property
    def loader_kwargs(self) -> dict:
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def is_hf_model(path: str | Path) -> bool:
    """True for a .gguf file, a folder holding one, or a folder whose config.json names a ``model_type``
    (a megamlm iter_N folder also holds a config.json, without that key)."""
    path = Path(path)
    if path.is_file():
        return path.suffix == ".gguf"
    if not path.is_dir():
        return False
    config = path / "config.json"
    if config.is_file():
        try:
            return "model_type" in json.loads(config.read_text())
        except ValueError:
            return False
    return any(path.glob("*.gguf"))


def open_source(path: str | Path) -> HFSource:
    """Locate config and weights; a missing file is refused by name before anything is loaded."""
    path = Path(path)
    if not path.exists():
        raise ConversionError(f"{path} does not exist; pass a Hugging Face model folder or a .gguf file")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConversionError(f"{path} is a file but not a .gguf; pass the model folder (config.json + weights)")
        return HFSource(path.parent, path.name)
    if (path / "config.json").is_file():
        if not any((path / name).is_file() for name in WEIGHT_FILES):
            raise ConversionError(f"{path} has config.json but no weights ({' or '.join(WEIGHT_FILES)}); "
                                  "copy the weight files next to it")
        return HFSource(path)
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if len(ggufs) == 1:
        return HFSource(path, ggufs[0])
    if ggufs:
        raise ConversionError(f"{path} holds several GGUF files ({', '.join(ggufs)}); pass one of them as --input")
    raise ConversionError(f"{path} has no config.json and no .gguf file; pass a Hugging Face model folder")


def load_config(source: HFSource):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(source.folder), **source.loader_kwargs)
    except (OSError, ValueError, KeyError) as error:
        raise ConversionError(f"could not read the model config of {source.describe()}: {error}") from error


def load_tokenizer(source: HFSource):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source.folder), **source.loader_kwargs)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConversionError(f"could not read a tokenizer from {source.describe()} ({error}); the import needs "
                              "the model's tokenizer files (tokenizer.json, tokenizer_config.json) beside it") from error


def _read_weight_file(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # safetensors and torch raise many types for a truncated or damaged file
        raise ConversionError(f"cannot read the weights in {path} ({type(error).__name__}: {error}); the file is "
                              "truncated or damaged: download or copy it again") from None


def load_state_dict(source: HFSource, config) -> dict[str, torch.Tensor]:
    """Every tensor of the model, float32, under its Hugging Face name (``model.`` prefix included)."""
    if source.gguf_file:
        state = _load_gguf(source, config)
    else:
        state = {}
        for name in WEIGHT_FILES:
            path = source.folder / name
            if not path.is_file():
                continue
            if name.endswith(".index.json"):
                shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
                for shard in shards:
                    if not (source.folder / shard).is_file():
                        raise ConversionError(f"weight shard {source.folder / shard} listed in {name} is missing")
                    state.update(_read_weight_file(source.folder / shard))
            else:
                state = _read_weight_file(path)
            break
    if "model.embed_tokens.weight" not in state and "embed_tokens.weight" in state:
        state = {("lm_head.weight" if k == "lm_head.weight" else f"model.{k}"): v for k, v in state.items()}
    return {k: v.float() for k, v in state.items()}


def _load_gguf(source: HFSource, config) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(source.folder), gguf_file=source.gguf_file, dtype=torch.float32)
    return {k: v.detach() for k, v in model.state_dict().items()}

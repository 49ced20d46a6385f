"""A Hugging Face model on disk: a folder with config.json and safetensors/bin weights, or a GGUF file
(read through transformers' GGUF loader, which dequantizes to float32)."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open

from megamlm import extras
from megamlm.hf.errors import ConversionError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


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


def open_source(path: str | Path, require_weights: bool = True) -> HFSource:
    """Locate config and weights; a missing file is refused by name before anything is loaded.

    ``require_weights=False`` accepts a folder with config.json and the tokenizer only (enough for a shape).
    """
    path = Path(path)
    if not path.exists():
        raise ConversionError(f"{path} does not exist; pass a Hugging Face model folder or a .gguf file")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConversionError(f"{path} is a file but not a .gguf; pass the model folder (config.json + weights)")
        return HFSource(path.parent, path.name)
    if (path / "config.json").is_file():
        if require_weights and not any((path / name).is_file() for name in WEIGHT_FILES):
            raise ConversionError(f"{path} has config.json but no weights ({' or '.join(WEIGHT_FILES)}); "
                                  "copy the weight files next to it")
        return HFSource(path)
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if len(ggufs) == 1:
        return HFSource(path, ggufs[0])
    if ggufs:
        raise ConversionError(f"{path} holds several GGUF files ({', '.join(ggufs)}); pass one of them as --input")
    raise ConversionError(f"{path} has no config.json and no .gguf file; pass a Hugging Face model folder")


def remote_code_refusal(where: str) -> str:
    """What transformers' refusal of a folder that ships its own Python code means, in one line."""
    return (f"{where} ships its own Python code for its model or tokenizer (config.json 'auto_map'), which megamlm "
            "never runs; use a model whose architecture transformers implements")


def load_config(source: HFSource):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(source.folder), trust_remote_code=False, **source.loader_kwargs)
    except (OSError, ValueError, KeyError) as error:
        if "trust_remote_code" in str(error):
            raise ConversionError(remote_code_refusal(source.describe())) from None
        raise ConversionError(f"could not read the model config of {source.describe()}: {error}") from error


def load_tokenizer(source: HFSource):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(source.folder), trust_remote_code=False, **source.loader_kwargs)
    except (OSError, ValueError, KeyError, TypeError) as error:
        if "trust_remote_code" in str(error):
            raise ConversionError(remote_code_refusal(source.describe())) from None
        raise ConversionError(f"could not read a tokenizer from {source.describe()} ({error}); the import needs "
                              "the model's tokenizer files (tokenizer.json, tokenizer_config.json) "
                              "beside it") from error


def weight_files(source: HFSource) -> list[Path]:
    """The files holding the weights, one shard after another; a missing shard is refused by name."""
    for name in WEIGHT_FILES:
        path = source.folder / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            return [path]
        shards = [source.folder / shard for shard in dict.fromkeys(json.loads(path.read_text())["weight_map"].values())]
        for shard in shards:
            if not shard.is_file():
                raise ConversionError(f"weight shard {shard} listed in {name} is missing")
        return shards
    raise ConversionError(f"{source.folder} has no weights ({' or '.join(WEIGHT_FILES)})")


def _damaged(path: Path, error: Exception) -> ConversionError:
    first_line = next((line for line in str(error).splitlines() if line.strip()), "")  # torch's run to pages
    return ConversionError(f"cannot read the weights in {path} ({type(error).__name__}: {first_line}); the file is "
                           "truncated, damaged or not plain tensors: download or copy it again")


def _hf_name(name: str) -> str:
    """A base model's tensor names (``embed_tokens.weight``; ModernBertModel's ``embeddings.``, ``final_norm.``) under
    the full model's (``model.embed_tokens.weight``)."""
    if name.startswith(("embed_tokens.", "layers.", "norm.", "embeddings.", "final_norm.")):
        return f"model.{name}"
    return name


def iter_tensors(source: HFSource) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of the model under its Hugging Face name, read one at a time from one shard at a time.

    safetensors shards are memory-mapped and each tensor copied out on its own, so reading a large model holds
    at most one shard's pages beside the tensors the caller keeps. A GGUF file is read through transformers'
    loader, which dequantizes the whole model to float32 first.
    """
    if source.gguf_file:
        yield from _load_gguf(source).items()
        return
    for path in weight_files(source):
        if path.suffix == ".safetensors":
            yield from _safetensors_tensors(path)
        else:
            state = torch_state(path)
            for name in list(state):
                yield _hf_name(name), state.pop(name)


def _safetensors_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    try:
        shard_context = safe_open(str(path), framework="pt")
    except Exception as error:  # safetensors raises several types for a truncated or damaged header
        raise _damaged(path, error) from None
    with shard_context as shard:
        for name in shard.keys():
            try:
                tensor = shard.get_tensor(name)
            except Exception as error:  # the data section ends before this tensor
                raise _damaged(path, error) from None
            yield _hf_name(name), tensor


def torch_state(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a PyTorch weight file (``pytorch_model.bin``), loaded weights-only (nothing in the pickle
    runs), memory-mapped where the format allows; a ConversionError names a refused or damaged file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:  # weights_only refused what the pickle asks to build (nothing ran)
        raise _refused_pickle(path, error) from None
    except RuntimeError:  # a legacy (pre-zip) pickle cannot be memory-mapped; a damaged file fails again below
        pass
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types for a truncated or damaged file
        raise _damaged(path, error) from None


def _refused_pickle(path: Path, error: Exception) -> ConversionError:
    detail = next((line for line in str(error).splitlines() if "GLOBAL" in line or "Unsupported" in line), "")
    return ConversionError(f"cannot read the weights in {path}: the file is not plain tensors, weights_only loading "
                           f"refused it ({detail.strip() or type(error).__name__}) and nothing in it was run; "
                           "use the model's model.safetensors, or download or copy it again")


def check_gguf(source: HFSource) -> None:
    """Refuse, by reading the GGUF metadata only, what transformers' GGUF loader would load wrongly or not at all:
    a tensor type gguf cannot dequantize, and RoPE scaling (llama.cpp's ``rope_freqs`` factors or a
    ``rope.scaling.type``), which that loader drops."""
    gguf = extras.require("gguf", f"reading the GGUF file {source.gguf_file}")
    extras.require("accelerate", f"reading the GGUF file {source.gguf_file}")  # transformers' GGUF loader needs it
    GGUFReader, dequantize = gguf.GGUFReader, gguf.dequantize

    path = source.folder / source.gguf_file
    try:
        reader = GGUFReader(str(path))
    except (ValueError, OSError) as error:
        raise ConversionError(f"{path} is not a readable GGUF file: {error}") from error
    tried = set()
    for tensor in reader.tensors:
        if tensor.name.startswith("rope_freqs"):
            raise ConversionError(f"{path} stores RoPE frequency factors (tensor {tensor.name}, Llama 3.1-style "
                                  "scaling), which transformers' GGUF loader drops, so the import would compute "
                                  "another model; import the model's safetensors folder instead")
        if tensor.tensor_type in tried:
            continue
        tried.add(tensor.tensor_type)
        try:
            dequantize(tensor.data[:1], tensor.tensor_type)
        except NotImplementedError:
            raise ConversionError(f"{path}: tensor {tensor.name} is quantized as {tensor.tensor_type.name}, which the "
                                  "gguf package cannot dequantize; use a GGUF file of another quantization "
                                  "(F16, Q8_0, Q4_K, ...) or the safetensors folder") from None
    for key, field in reader.fields.items():
        if key.endswith(".rope.scaling.type"):
            kind = bytes(field.parts[field.data[0]]).decode()
            if kind not in ("none", ""):
                raise ConversionError(f"{path} declares RoPE scaling {kind!r} ({key}), which transformers' GGUF "
                                      "loader ignores; import the model's safetensors folder instead")


def _load_gguf(source: HFSource) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(source.folder), gguf_file=source.gguf_file, dtype=torch.float32,
                                                 trust_remote_code=False)
    return {k: v.detach() for k, v in model.state_dict().items()}

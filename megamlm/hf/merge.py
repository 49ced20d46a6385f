"""Weighted linear merges of models of one architecture (BidirLM merges an adapted encoder with its source decoder
to limit forgetting): sum_k w_k x_k of every tensor, over two or more megamlm checkpoints or two or more Hugging
Face folders.

    merge_checkpoints(["runs/mntp", "ckpt/smollm2"], [0.7, 0.3], "runs/merged")        # a megamlm checkpoint
    merge_checkpoints(["hf/a", "hf/b"], [0.5, 0.5], "hf/merged")                        # an HF folder

Every input is read and compared before anything is written: the same tensors (names and shapes; the first one
that differs is named), the same vocabulary and the same tokenizer files, else one ConversionError. Each tensor is
summed in float64 and rounded once to its own dtype, so a merge of a model with itself is bitwise that model
(weights that sum to 1, rounded from within 1e-16 of each value). A megamlm output is a weights-only step-0
checkpoint (``pretrain.py --init-from``); an HF output keeps the first input's config and tokenizer files. An
output of the other kind goes through the converters (``export_checkpoint``, ``import_hf``).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file, save_file

from megamlm.hf.errors import ConversionError
from megamlm.hf.export import export_checkpoint
from megamlm.hf.hf_source import (
    WEIGHT_FILES,
    is_hf_model,
    open_source,
    torch_state,
    weight_files,
)
from megamlm.hf.importer import import_hf
from megamlm.hf.megamlm_checkpoint import (
    TOKENIZER_DIR,
    AtomicFolder,
    load_model,
    read_record,
    write_weights_checkpoint,
)
from megamlm.hf.model_card import training_facts
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer

Kind = Literal["megamlm", "hf"]
_KINDS = {"megamlm": "a megamlm checkpoint", "hf": "a Hugging Face folder"}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt")
"""An HF folder's tokenizer files whose bytes must agree (the vocabulary and how text becomes ids)."""
_NOT_IN_THE_WEIGHTS = {"max_seq_length", "max_position_embeddings"}
_HF_NOT_THE_MODEL = {"_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache",
                     "_attn_implementation", "_attn_implementation_autoset", "attn_implementation", "output_attentions",
                     "output_hidden_states", "return_dict", "vocab_size", "bos_token_id", "eos_token_id",
                     "pad_token_id", "mask_token_id"}
"""Keys of an HF config.json that do not change what the weights compute (software versions, output switches; the
vocabulary and special ids are compared as the vocabulary). Every other key (rope_theta, rms_norm_eps, rope_scaling,
sliding windows, ...) must agree between the inputs of a merge, else the merged tensors would be read two ways."""
"""Settings of a run, not of its weights: an adapted model trained at a shorter length merges with its source (the
output keeps the first input's)."""


@dataclass
class MergeInput:
    """One model to merge, read whole: its tensors and what must agree with the other inputs."""

    path: Path
    kind: Kind
    tensors: dict[str, torch.Tensor]
    vocabulary: dict
    """vocab size and special-token ids."""
    tokenizer_digest: str | None
    architecture: dict
    """megamlm: the model_args; HF: the config's model_type and architectures."""
    record: dict = field(default_factory=dict)
    """megamlm: the checkpoint's config.json."""
    tokenizer_file: Path | None = None
    """megamlm: the run's tokenizer file."""
    facts: dict = field(default_factory=dict)
    """megamlm: how it was trained (objective, steps, tokens seen, source), for the merge's record and model card."""


def parse_weights(text: str | None, count: int) -> list[float]:
    """``0.7,0.3`` -> one weight per input, finite and summing to 1; None: equal weights."""
    if text is None:
        return [1.0 / count] * count
    try:
        weights = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConversionError(f"--weights takes numbers joined by commas (e.g. 0.7,0.3), got {text!r}") from None
    if len(weights) != count:
        raise ConversionError(f"--weights {text} gives {len(weights)} weights for {count} inputs; give one weight per "
                              "--input, in the same order")
    if not all(math.isfinite(w) for w in weights) or abs(sum(weights) - 1.0) > 1e-6:
        raise ConversionError(f"--weights {text} must be finite numbers that sum to 1 (they sum to {sum(weights):g}); "
                              "a linear merge of models keeps their scale")
    return weights


def _file_digest(paths: list[Path]) -> str | None:
    digest, found = hashlib.sha256(), False
    for path in paths:
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
            found = True
    return digest.hexdigest() if found else None


def read_megamlm(path: str | Path) -> MergeInput:
    record = read_record(path)
    model = load_model(record)
    tokenizer = record.tokenizer
    vocabulary = {"vocab_size": record.model_args.vocab_size,
                  **{f"tokenizer {key}": tokenizer.get(key)
                     for key in ("vocab_size", "bos_id", "eos_id", "pad_id", "mask_id")}}
    facts = training_facts(record)
    facts = {key: facts[key] for key in ("objective", "steps", "tokens_seen", "seq_length", "init_from")}
    facts["imported_from"] = (record.config.get("imported_from") or {}).get("source")
    facts["imported_type"] = (record.config.get("imported_from") or {}).get("model_type")
    facts["merged_from"] = record.config.get("merged_from")
    facts["max_seq_length"] = record.model_args.max_seq_length
    return MergeInput(record.path, "megamlm", dict(model.state_dict()), vocabulary,
                      _file_digest([record.tokenizer_path()]), record.model_args.to_dict(), record.config,
                      record.tokenizer_path(), facts)


def read_hf(path: str | Path) -> MergeInput:
    source = open_source(path)
    if source.gguf_file:
        raise ConversionError(f"{source.describe()} is a GGUF file (quantized); import it with "
                              "tools/convert_from_hf.py and merge the megamlm checkpoints instead")
    config = json.loads((source.folder / "config.json").read_text())
    tensors: dict[str, torch.Tensor] = {}
    for weights in weight_files(source):
        if weights.suffix == ".safetensors":
            try:
                tensors.update(load_file(str(weights)))
            except Exception as error:  # safetensors raises its own error type for a truncated or damaged file
                detail = next(iter(str(error).splitlines()), "") or type(error).__name__
                raise ConversionError(f"cannot read {weights}: it is not a whole safetensors file ({detail}); "
                                      "download or copy it again") from None
        else:
            tensors.update(torch_state(weights))
    text = config.get("text_config") or {}
    vocabulary = {key: config.get(key, text.get(key))
                  for key in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "mask_token_id")}
    architecture = {key: value for key, value in {**config, **text}.items()
                    if key not in _HF_NOT_THE_MODEL and key != "text_config"}
    return MergeInput(source.folder, "hf", tensors, vocabulary,
                      _file_digest([source.folder / name for name in _TOKENIZER_FILES]), architecture)


def read_input(path: str | Path) -> MergeInput:
    """A megamlm checkpoint (a save folder or an iter_* folder) or an HF folder, by what the path holds."""
    if not Path(path).exists():
        raise ConversionError(f"--input {path} does not exist; pass megamlm checkpoints or Hugging Face folders")
    return read_hf(path) if is_hf_model(path) else read_megamlm(path)


def check_compatible(inputs: list[MergeInput]) -> None:
    """One ConversionError naming the first difference from the first input: kind, vocabulary, tokenizer, the first
    tensor missing, extra or of another shape or dtype, then any other architecture setting."""
    first = inputs[0]
    for other in inputs[1:]:
        where = f"{other.path} and {first.path}"
        if other.kind != first.kind:
            raise ConversionError(f"{other.path} is {_KINDS[other.kind]} and {first.path} {_KINDS[first.kind]}; merge "
                                  "models of one kind (convert one with tools/convert_from_hf.py or "
                                  "tools/convert_to_hf.py first)")
        differing = [key for key in first.vocabulary if first.vocabulary[key] != other.vocabulary.get(key)]
        if differing:
            key = differing[0]
            raise ConversionError(f"{where} have different vocabularies ({key} {other.vocabulary.get(key)!r} and "
                                  f"{first.vocabulary[key]!r}); merge models of one vocabulary")
        if other.tokenizer_digest != first.tokenizer_digest:
            raise ConversionError(f"{where} have different tokenizers (their tokenizer files differ); merge models "
                                  "that share one tokenizer")
        _check_tensors(first, other, where)
        keys = [*first.architecture, *(key for key in other.architecture if key not in first.architecture)]
        differing = [key for key in keys if first.architecture.get(key) != other.architecture.get(key)
                     and key not in _NOT_IN_THE_WEIGHTS]
        if differing:  # the same tensors, read differently (RoPE, norms, attention features)
            key = differing[0]
            raise ConversionError(f"{where} are different architectures ({key} {other.architecture.get(key)!r} and "
                                  f"{first.architecture.get(key)!r}); merge models of one architecture")


def _check_tensors(first: MergeInput, other: MergeInput, where: str) -> None:
    for name, tensor in first.tensors.items():
        theirs = other.tensors.get(name)
        if theirs is None:
            raise ConversionError(f"tensor {name!r} of {first.path} is missing from {other.path}; merge models of one "
                                  "architecture")
        if theirs.shape != tensor.shape or theirs.dtype != tensor.dtype:
            raise ConversionError(f"tensor {name!r} differs between {where}: {tuple(theirs.shape)} {theirs.dtype} and "
                                  f"{tuple(tensor.shape)} {tensor.dtype}; merge models of one shape")
    extra = next((name for name in other.tensors if name not in first.tensors), None)
    if extra is not None:
        raise ConversionError(f"tensor {extra!r} of {other.path} is missing from {first.path}; merge models of one "
                              "architecture")


def merge_tensors(inputs: list[MergeInput], weights: list[float]) -> dict[str, torch.Tensor]:
    """sum_k w_k x_k of every tensor, in float64, rounded once to the tensor's dtype; a tensor that is not floating
    point (an index buffer) must be equal in every input and is kept."""
    merged = {}
    for name, tensor in inputs[0].tensors.items():
        if not tensor.is_floating_point():
            if any(not torch.equal(tensor, x.tensors[name]) for x in inputs[1:]):
                raise ConversionError(f"tensor {name!r} holds integers that differ between the inputs; they cannot be "
                                      "averaged")
            merged[name] = tensor.clone()
            continue
        total = torch.zeros(tensor.shape, dtype=torch.float64)
        for weight, model in zip(weights, inputs):
            total += weight * model.tensors[name].to(torch.float64)
        merged[name] = total.to(tensor.dtype)
    return merged


def write_megamlm(inputs: list[MergeInput], weights: list[float], merged: dict[str, torch.Tensor],
                  output: Path) -> None:
    """A weights-only step-0 checkpoint in ``output`` (an AtomicFolder's temporary folder), the tokenizer beside."""
    first = inputs[0]
    # RoPE holds no position weights: the merge declares the longest context among its inputs (an adapted model
    # trained at 128 tokens merged with its source decoder made for 8,192 keeps 8,192; the model card says which
    # input brought which)
    longest = max(int(x.architecture["max_seq_length"]) for x in inputs)
    model = Transformer(ModelArgs(**{**first.architecture, "max_seq_length": longest}))
    model.load_state_dict(merged)  # through the model, so that tied weights stay one tensor
    tokenizer = first.tokenizer_file
    (output / TOKENIZER_DIR).mkdir()
    if tokenizer.parent.name == TOKENIZER_DIR:
        shutil.copytree(tokenizer.parent, output / TOKENIZER_DIR, dirs_exist_ok=True)
    else:
        shutil.copy2(tokenizer, output / TOKENIZER_DIR / tokenizer.name)
    record = {key: value for key, value in first.record.items() if key != "lineage"}
    record["tokenizer"] = {**first.record.get("tokenizer", {}), "path": f"{TOKENIZER_DIR}/{tokenizer.name}"}
    record["merged_from"] = [{"path": str(x.path), "weight": w, **x.facts} for x, w in zip(inputs, weights)]
    record["model_args"] = model.args.to_dict()
    write_weights_checkpoint(output, model.state_dict(), record, {"consumed_samples": 0})


def write_hf(inputs: list[MergeInput], merged: dict[str, torch.Tensor], output: Path) -> None:
    """The first input's folder with the merged weights: its config, tokenizer and other files copied, its weight
    files replaced by one model.safetensors (and its model card left out: it describes another model)."""
    skip = set(WEIGHT_FILES) | {"README.md"}
    for path in inputs[0].path.iterdir():
        if path.is_file() and path.name not in skip and path.suffix not in (".safetensors", ".bin"):
            shutil.copy2(path, output / path.name)
    save_file({name: t.contiguous() for name, t in merged.items()}, str(output / "model.safetensors"),
              metadata={"format": "pt"})


def merge_checkpoints(paths: list[str | Path], weights: list[float] | None, output: str | Path,
                      to: Kind | None = None, arch: str | None = None, force: bool = False, log=print) -> Path:
    """Merge ``paths`` with ``weights`` (None: equal) into ``output``: a megamlm checkpoint or an HF folder (``to``;
    default the inputs' kind; ``arch``: the HF architecture of a megamlm-to-HF merge). Returns the output folder."""
    if len(paths) < 2:
        raise ConversionError(f"a merge takes two or more --input models, got {len(paths)}")
    weights = weights if weights is not None else [1.0 / len(paths)] * len(paths)
    target = AtomicFolder(output, force)
    target.check()
    inputs = [read_input(path) for path in paths]
    check_compatible(inputs)
    kind = inputs[0].kind
    to = to or kind
    if arch is not None and (kind, to) != ("megamlm", "hf"):
        raise ConversionError("--arch picks the HF architecture of a megamlm merge written as an HF folder (--to hf); "
                              "drop --arch")
    merged = merge_tensors(inputs, weights)
    log(f"merged {len(inputs)} {kind} models ({', '.join(f'{w:g} x {x.path}' for x, w in zip(inputs, weights))}): "
        f"{len(merged)} tensors")
    if to == kind:
        with target as tmp:
            (write_megamlm(inputs, weights, merged, tmp) if kind == "megamlm" else write_hf(inputs, merged, tmp))
        log(f"wrote {target.destination}")
        return target.destination
    with tempfile.TemporaryDirectory(dir=Path(output).resolve().parent, prefix=".merge") as scratch:
        staged = Path(scratch) / "merged"
        staged.mkdir()
        if kind == "megamlm":
            write_megamlm(inputs, weights, merged, staged)
            return export_checkpoint(staged, output, arch=arch, force=force, log=log)
        write_hf(inputs, merged, staged)
        return import_hf(staged, output, force=force, log=log)

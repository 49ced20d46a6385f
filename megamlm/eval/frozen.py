"""Frozen models for the linear probe: any model megamlm's Transformer holds, run with the attention the probe asks
for, or a random initialisation of its shape.

A model is a megamlm checkpoint (an ``iter_*`` folder or a ``--save`` folder: its newest whole checkpoint), a
Hugging Face folder or a ``.gguf`` file of a family ``tools/convert_from_hf.py`` imports (Llama, Qwen2/3, Gemma 3,
EuroBERT, ...; a GGUF's weights are dequantized to float32). Its weights are read into megamlm's ``Transformer``,
whose forward takes the attention mode per call (``causal=True`` is the decoder as trained, ``causal=False`` the
same weights bidirectionally, as MLM and MNTP train them), so one model is probed in either mode without an export.
A random-init model is ``Transformer(args)`` with megamlm's own initialisation (``reset_parameters``, Megatron's
N(0, init_method_std)) from a seeded generator, with the tokenizer of the model whose shape it copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from megamlm.checkpoint.catalog import list_checkpoints, problem, step_of
from megamlm.errors import UserError
from megamlm.eval.model_io import prepare_tokenizer
from megamlm.eval.model_source import is_megamlm_checkpoint
from megamlm.hf.errors import ConversionError
from megamlm.hf.hf_source import iter_tensors
from megamlm.hf.importer import megamlm_state_dict, plan_import
from megamlm.hf.megamlm_checkpoint import load_model, read_record
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer

ATTENTIONS = ("causal", "bidirectional")
RANDOM_INIT_SEED = 0


class FrozenModelError(UserError, ValueError):
    """A model the probe cannot load; the message names the fix."""


@dataclass(frozen=True)
class ProbeModel:
    """One row of a probe: a model, the attention it runs with, and whether it is a random init of that shape."""

    name: str
    path: Path
    attention: str = "bidirectional"
    random_init: bool = False

    def __post_init__(self):
        if self.attention not in ATTENTIONS:
            raise FrozenModelError(f"attention {self.attention!r} of probe model {self.name}; use one of "
                                   f"{', '.join(ATTENTIONS)}")

    @property
    def causal(self) -> bool:
        return self.attention == "causal"

    def describe(self) -> str:
        what = f"a random init of {self.path}'s shape" if self.random_init else str(self.path)
        return f"{self.name} ({what}, {self.attention} attention)"


@dataclass
class FrozenModel:
    """The model in eval mode (float32, no gradients) and its fast tokenizer (with a pad token)."""

    model: Transformer
    tokenizer: object

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, causal: bool) -> torch.Tensor:
        """(batch, seq, hidden) final-layer states (after the final norm). Right padding (attention_mask 0) is its
        own document, so no token attends to it in either mode."""
        documents = None if bool(attention_mask.all()) else attention_mask.long()
        with torch.inference_mode():
            return self.model(input_ids, causal=causal, document_ids=documents)


def is_model_source(path: Path) -> bool:
    """A path the probe can read: a megamlm checkpoint or run folder, an HF folder, or a .gguf file."""
    path = Path(path)
    if path.is_file():
        return path.suffix == ".gguf"
    return path.is_dir() and (is_megamlm_checkpoint(path) or (path / "config.json").is_file()
                              or any(path.glob("*.gguf")))


def model_shape(path: Path) -> ModelArgs:
    """The shape of the model at ``path``, without reading its weights."""
    if is_megamlm_checkpoint(Path(path)):

        return read_record(path).model_args
    return _import_plan(Path(path), require_weights=False).model_args


def load_frozen(entry: ProbeModel) -> FrozenModel:
    """Read ``entry``'s model (weights, or a seeded random init of its shape) and tokenizer."""
    path = Path(entry.path)
    if not is_model_source(path):
        raise FrozenModelError(f"{path} is neither a megamlm checkpoint, a Hugging Face model folder nor a .gguf "
                               "file; pass one of those as --model")
    if is_megamlm_checkpoint(path):
        model, tokenizer = _megamlm_model(path, entry.random_init)
    else:
        model, tokenizer = _hf_model(path, entry.random_init)
    return FrozenModel(model.float().eval().requires_grad_(False), prepare_tokenizer(tokenizer, path))


def _megamlm_model(path: Path, random: bool):
    from transformers import AutoTokenizer


    record = read_record(path)
    tokenizer = AutoTokenizer.from_pretrained(str(record.tokenizer_path().parent), trust_remote_code=False)
    # A bare tokenizer.json (the bundled one) names no special tokens to transformers; the run recorded their ids
    for role in ("pad", "eos", "bos", "mask"):
        token_id = record.tokenizer.get(f"{role}_id")
        if getattr(tokenizer, f"{role}_token") is None and token_id is not None and 0 <= token_id < len(tokenizer):
            setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(int(token_id)))
    model = random_init(record.model_args) if random else load_model(record)
    return model, tokenizer


def _import_plan(path: Path, require_weights: bool):
    """What importing the HF folder or GGUF file at ``path`` takes (shape, tokenizer with its mask token)."""

    try:
        return plan_import(path, require_weights=require_weights)
    except ConversionError as error:
        raise FrozenModelError(f"{path}: {error} (the probe runs models in megamlm's Transformer, which chooses "
                               "their attention; fine-tune this one without --probe)") from None


def _hf_model(path: Path, random: bool):

    plan = _import_plan(path, require_weights=not random)
    if random:
        return random_init(plan.model_args), plan.tokenizer
    model = Transformer(plan.model_args)
    model.load_state_dict(megamlm_state_dict(iter_tensors(plan.source), plan), strict=True)
    return model, plan.tokenizer


def random_init(args: ModelArgs, seed: int = RANDOM_INIT_SEED) -> Transformer:
    """megamlm's initialisation of a model of shape ``args``, the same for the same seed."""
    model = Transformer(args)
    model.reset_parameters(torch.Generator().manual_seed(seed))
    return model


def probe_models(pairs: list[tuple[str, Path]], attentions: list[str], checkpoints: str = "all",
                 log=print) -> list[ProbeModel]:
    """One row per (model, attention): ``pairs`` from ``--model NAME=PATH``; a megamlm run folder stands for each
    whole checkpoint (rows NAME-stepN) or, with ``checkpoints`` "latest", its newest (row NAME)."""

    unknown = [a for a in attentions if a not in ATTENTIONS]
    if unknown or not attentions:
        raise FrozenModelError(f"attention {','.join(unknown) or '(none)'}; give --probe-attention as causal, "
                               "bidirectional or causal,bidirectional")
    sources = []
    for name, path in pairs:
        path = Path(path)
        if not is_model_source(path):
            raise FrozenModelError(f"--model {name}={path}: not a megamlm checkpoint, a Hugging Face model folder or "
                                   "a .gguf file; pass one of those")
        runs = list_checkpoints(path) if path.is_dir() and step_of(path) is None else []
        whole = sorted((step, folder) for step, folder in runs if problem(folder, deep=False) is None)
        if checkpoints == "latest" or len(whole) <= 1:
            sources.append((name, path))
        else:
            if len(whole) < len(runs):
                log(f"{path}: {len(runs) - len(whole)} incomplete checkpoint folders skipped")
            sources += [(f"{name}-step{step}", folder) for step, folder in whole]
    return [ProbeModel(name, path, attention) for name, path in sources for attention in attentions]

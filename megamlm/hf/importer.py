"""Hugging Face decoder or encoder -> megamlm, for continued pretraining.

Llama-family models (Llama, Mistral, SmolLM, TinyLlama), EuroBERT, and GGUF files are read; tied
embeddings are untied; the tokenizer gets a mask token (a reserved one when it has one, as EuroBERT
takes Llama 3's ``<|reserved_special_token_0|>``, else an added ``<|mask|>``) and the embedding and
LM head grow to a multiple of 128 rows when the vocabulary grew, new rows set to the mean row.

    import_hf("models/smollm2", "ckpt/smollm2")     # a step-0 megamlm checkpoint + its tokenizer
    args = model_args_from_hf("models/llama"); model = Transformer(args); load_hf_weights("models/llama", model)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from megamlm.config import Config
from megamlm.data import load_tokenizer as load_megamlm_tokenizer
from megamlm.hf.errors import ConversionError
from megamlm.hf.hf_config import check_importable, model_args_from_config
from megamlm.hf.hf_source import (
    HFSource,
    load_config,
    load_state_dict,
    load_tokenizer,
    open_source,
)
from megamlm.hf.keymaps import KeyMap
from megamlm.hf.megamlm_checkpoint import (
    TOKENIZER_DIR,
    AtomicFolder,
    write_weights_checkpoint,
)
from megamlm.hf.tokenizer_files import choose_mask_token
from megamlm.model.config import ModelArgs, pad_vocab_size
from megamlm.model.transformer import Transformer

VOCAB_MULTIPLE = 128
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some older checkpoints saved


@dataclass
class ImportPlan:
    source: HFSource
    config: object
    keymap: KeyMap
    tokenizer: object
    """transformers tokenizer, mask token already set."""
    model_args: ModelArgs
    """Shape after the vocabulary grew (if it had to)."""
    mask_added: bool


def plan_import(path: str | Path, max_seq_length: int | None = None) -> ImportPlan:
    """Read config and tokenizer, choose the mask token, size the vocabulary; no weights are read yet."""
    source = open_source(path)
    config = load_config(source)
    keymap = check_importable(config)
    args = model_args_from_config(config, max_seq_length)
    tokenizer = load_tokenizer(source)
    if len(tokenizer) > config.vocab_size:
        raise ConversionError(f"the tokenizer of {source.describe()} has {len(tokenizer)} ids but the model's "
                              f"embedding has {config.vocab_size} rows (config.json vocab_size); the tokenizer files "
                              "belong to another model")
    mask, added = choose_mask_token(tokenizer)
    tokenizer.add_special_tokens({"mask_token": mask})
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    if len(tokenizer) > args.vocab_size:
        args = replace(args, vocab_size=pad_vocab_size(len(tokenizer), VOCAB_MULTIPLE))
    return ImportPlan(source, config, keymap, tokenizer, args, added)


def model_args_from_hf(hf_dir: str | Path, max_seq_length: int | None = None) -> ModelArgs:
    """The shape of the megamlm model an HF folder imports into (vocabulary grown for a mask token if needed)."""
    return plan_import(hf_dir, max_seq_length).model_args


def _grow_rows(weight: torch.Tensor, rows: int) -> torch.Tensor:
    if weight.shape[0] == rows:
        return weight
    extra = weight.mean(dim=0, keepdim=True).expand(rows - weight.shape[0], -1)
    return torch.cat([weight, extra], dim=0)


def megamlm_state_dict(hf_state: dict[str, torch.Tensor], plan: ImportPlan) -> dict[str, torch.Tensor]:
    """HF tensors -> megamlm names, checked against the config's shapes, untied and vocabulary-grown."""
    hf_args = replace(plan.model_args, vocab_size=plan.config.vocab_size)
    with torch.device("meta"):
        expected = {name: tuple(t.shape) for name, t in Transformer(hf_args).state_dict().items()}
    hf_state = dict(hf_state)
    if "lm_head.weight" not in hf_state and "model.embed_tokens.weight" in hf_state:
        if not getattr(plan.config, "tie_word_embeddings", False):
            raise ConversionError(f"{plan.source.describe()} has no tensor 'lm_head.weight' and its config does not "
                                  "tie it to the embedding; the weight files are incomplete")
        hf_state["lm_head.weight"] = hf_state["model.embed_tokens.weight"]
    out = {}
    for hf_name, tensor in hf_state.items():
        if hf_name.endswith(_IGNORED_SUFFIXES):
            continue
        name = plan.keymap.from_hf(hf_name)
        if tuple(tensor.shape) != expected.get(name):
            raise ConversionError(f"tensor {hf_name!r} of {plan.source.describe()} has shape {tuple(tensor.shape)} "
                                  f"but its config implies {expected.get(name)}; the config and weights do not match")
        out[name] = tensor.detach().float().clone()  # clone unties a shared embedding/LM head
    missing = sorted(set(expected) - set(out))
    if missing:
        raise ConversionError(f"{plan.source.describe()} lacks tensor {plan.keymap.to_hf(missing[0])!r} "
                              f"({len(missing)} missing in all); the weight files are incomplete")
    rows = plan.model_args.vocab_size
    out["embed_tokens.weight"] = _grow_rows(out["embed_tokens.weight"], rows)
    out["lm_head.weight"] = _grow_rows(out["lm_head.weight"], rows)
    return out


def load_hf_weights(hf_dir: str | Path, model: torch.nn.Module) -> ImportPlan:
    """Load an HF model's weights into a megamlm Transformer built with ``model_args_from_hf(hf_dir)``."""
    plan = plan_import(hf_dir, model.args.max_seq_length)
    if plan.model_args != model.args:
        raise ConversionError(f"the model was built with {model.args} but {plan.source.describe()} needs "
                              f"{plan.model_args}; build it with model_args_from_hf()")
    state = megamlm_state_dict(load_state_dict(plan.source, plan.config), plan)
    model.load_state_dict(state, strict=True)
    return plan


def pretrain_flags(args: ModelArgs, checkpoint: Path) -> list[str]:
    """The pretrain.py flags that build this shape and load these weights."""
    return ["--init-from", str(checkpoint), "--num-layers", str(args.num_layers), "--hidden-size", str(args.hidden_size),
            "--ffn-hidden-size", str(args.ffn_hidden_size), "--num-attention-heads", str(args.num_attention_heads),
            "--num-query-groups", str(args.num_query_groups), "--vocab-size", str(args.vocab_size),
            "--rope-theta", repr(args.rope_theta), "--norm-epsilon", repr(args.norm_epsilon),
            "--tokenizer-model", str(checkpoint / TOKENIZER_DIR / "tokenizer.json")]


def _run_config(args: ModelArgs) -> dict:
    cfg = Config()
    m = cfg.model
    m.num_layers, m.hidden_size, m.ffn_hidden_size = args.num_layers, args.hidden_size, args.ffn_hidden_size
    m.num_attention_heads, m.num_query_groups = args.num_attention_heads, args.num_query_groups
    m.seq_length, m.vocab_size, m.rope_theta = args.max_seq_length, args.vocab_size, args.rope_theta
    m.norm_epsilon, m.init_method_std = args.norm_epsilon, args.init_method_std
    return cfg.to_dict()


def import_hf(input_path: str | Path, output: str | Path, force: bool = False, max_seq_length: int | None = None,
              log=print, hf_state: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a step-0 megamlm checkpoint (weights, config.json, tokenizer/) of an HF model; returns its folder.

    ``hf_state``: the model's tensors when the caller already holds them (``hf_model.state_dict()`` of the
    same ``input_path``), which saves reading and dequantizing the weights again.
    """
    target = AtomicFolder(output, force)
    target.check()
    plan = plan_import(input_path, max_seq_length)
    args = plan.model_args
    log(f"{plan.source.describe()}: {plan.config.model_type}, {args.num_layers} layers, hidden {args.hidden_size}, "
        f"vocabulary {plan.config.vocab_size} -> {args.vocab_size}, mask token {plan.tokenizer.mask_token!r} "
        f"({'added' if plan.mask_added else 'reserved'}, id {plan.tokenizer.mask_token_id})")
    state = megamlm_state_dict(hf_state if hf_state is not None else load_state_dict(plan.source, plan.config), plan)
    with target as tmp:
        plan.tokenizer.save_pretrained(str(tmp / TOKENIZER_DIR))
        ours = load_megamlm_tokenizer(tmp / TOKENIZER_DIR)
        ids = {"bos_id": plan.tokenizer.bos_token_id, "eos_id": plan.tokenizer.eos_token_id,
               "pad_id": plan.tokenizer.pad_token_id, "mask_id": plan.tokenizer.mask_token_id}
        if ours.mask_id != ids["mask_id"]:
            raise ConversionError(f"the saved tokenizer gives mask id {ours.mask_id}, transformers gave "
                                  f"{ids['mask_id']}; check the tokenizer files of {plan.source.describe()}")
        record = {
            "config": _run_config(args), "model_args": args.to_dict(), "switch_step": None, "data_path": [],
            "seq_length": args.max_seq_length,
            "tokenizer": {"path": f"{TOKENIZER_DIR}/tokenizer.json", "vocab_size": len(plan.tokenizer), **ids},
            "imported_from": {"source": plan.source.describe(), "model_type": plan.config.model_type,
                              "hf_vocab_size": plan.config.vocab_size, "mask_token": plan.tokenizer.mask_token,
                              "mask_added": plan.mask_added},
        }
        write_weights_checkpoint(tmp, state, record, {"consumed_samples": 0})
    log(f"wrote megamlm checkpoint {target.destination}; continue pretraining with:\n  python pretrain.py "
        + " ".join(pretrain_flags(args, target.destination)) + " --data-path <data tokenized with that tokenizer>")
    return target.destination

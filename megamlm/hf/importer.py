"""Hugging Face decoder or encoder -> megamlm, for continued pretraining.

The families of megamlm/hf/keymaps.py (``imported_families()``), and GGUF files of them, are read; attention
biases, head_dim, RoPE scaling and tied embeddings carry over (``untie=True`` gives the LM head its own copy).
The tokenizer gets a mask token (its own; else a reserved one, as EuroBERT takes Llama 3's
``<|reserved_special_token_0|>``; else an added ``<|mask|>``), and the embedding (and an untied LM head) grow
to a multiple of 128 rows when the vocabulary outgrows them; rows of added tokens start at the mean row.

Weights stream shard by shard, one tensor at a time, into the megamlm state dict that is saved: the peak
memory is about one float32 copy of the model plus one shard (tests/unit/hf/test_import_memory.py).

    import_hf("models/smollm2", "ckpt/smollm2")     # a step-0 megamlm checkpoint + its tokenizer
    args = model_args_from_hf("models/llama"); model = Transformer(args); load_hf_weights("models/llama", model)
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

import torch

from megamlm.config import Config, model_section_values
from megamlm.data import load_tokenizer as load_megamlm_tokenizer
from megamlm.hf.errors import ConversionError
from megamlm.hf.hf_config import (
    check_importable,
    describe_features,
    model_args_from_config,
    text_config,
)
from megamlm.hf.hf_source import (
    HFSource,
    check_gguf,
    iter_tensors,
    load_config,
    load_tokenizer,
    open_source,
)
from megamlm.hf.keymaps import KeyMap
from megamlm.hf.megamlm_checkpoint import (
    TOKENIZER_DIR,
    AtomicFolder,
    write_weights_checkpoint,
)
from megamlm.hf.modernbert import HEAD_PARTS, fresh_head, is_modernbert, kept_settings
from megamlm.hf.tokenizer_files import check_mask_token, choose_mask_token
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
    source_tokens: int
    """The tokenizer's size before the mask token: rows from here on belong to added tokens."""
    skipped: list[str] | None = None
    fresh: list[str] | None = None
    """The MLM head tensors a headless ModernBertModel folder lacked, started fresh (``modernbert.fresh_head``)."""
    """The parts of the checkpoint that were not imported (Gemma 3's vision tower), once the weights are read."""


def plan_import(path: str | Path, max_seq_length: int | None = None, untie: bool = False,
                mask_token: str | None = None, require_weights: bool = True) -> ImportPlan:
    """Read config and tokenizer, choose the mask token, size the vocabulary; no weights are read yet."""
    source = open_source(path, require_weights)
    if source.gguf_file:
        check_gguf(source)
    config = load_config(source)
    keymap = check_importable(config)
    args = model_args_from_config(config, max_seq_length, untie)
    config = text_config(config)  # Gemma 3's multimodal checkpoints: the text tower
    tokenizer = load_tokenizer(source)
    source_tokens = len(tokenizer)
    if source_tokens > config.vocab_size:
        raise ConversionError(f"the tokenizer of {source.describe()} has {source_tokens} ids but the model's "
                              f"embedding has {config.vocab_size} rows (config.json vocab_size); the tokenizer files "
                              "belong to another model")
    mask, added = choose_mask_token(tokenizer, mask_token)
    tokenizer.add_special_tokens({"mask_token": mask})
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    check_mask_token(tokenizer)
    if len(tokenizer) > args.vocab_size:
        args = replace(args, vocab_size=pad_vocab_size(len(tokenizer), VOCAB_MULTIPLE))
    return ImportPlan(source, config, keymap, tokenizer, args, added, source_tokens)


def model_args_from_hf(hf_dir: str | Path, max_seq_length: int | None = None, untie: bool = False) -> ModelArgs:
    """The shape of the megamlm model an HF folder imports into (vocabulary grown for a mask token if needed)."""
    return plan_import(hf_dir, max_seq_length, untie).model_args


def _fit_rows(weight: torch.Tensor, plan: ImportPlan) -> torch.Tensor:
    """``weight`` (embedding or LM head rows) grown to the model's vocabulary; the rows of added tokens and the
    grown rows start at the mean row of the source tokenizer's tokens, every other row is kept."""
    rows, source_rows, tokens = plan.model_args.vocab_size, weight.shape[0], len(plan.tokenizer)
    if rows != source_rows:
        grown = torch.empty((rows, *weight.shape[1:]), dtype=weight.dtype)
        grown[:source_rows] = weight
        weight = grown
    mean = weight[: plan.source_tokens].mean(dim=0)
    if plan.mask_added:
        weight[plan.source_tokens: tokens] = mean
    weight[source_rows:] = mean
    return weight


def megamlm_state_dict(hf_tensors: Iterable[tuple[str, torch.Tensor]], plan: ImportPlan) -> dict[str, torch.Tensor]:
    """HF tensors (name, tensor), consumed one at a time -> megamlm's float32 state dict, checked against the
    config's shapes, tied or untied as ``plan.model_args`` says, and vocabulary-grown.

    The tensors become the state dict's (modified in place): pass tensors nothing else holds.
    """
    args = plan.model_args
    with torch.device("meta"):
        expected = {name: tuple(t.shape) for name, t in
                    Transformer(replace(args, vocab_size=plan.config.vocab_size)).state_dict().items()}
    out: dict[str, torch.Tensor] = {}
    source_tied = bool(getattr(plan.config, "tie_word_embeddings", False))
    skipped: list[str] = []
    for stored_name, tensor in hf_tensors:
        hf_name = plan.keymap.source_name(stored_name)
        if hf_name is None:
            skipped.append(stored_name)
            continue
        if hf_name.endswith(_IGNORED_SUFFIXES):
            continue
        for name, part in plan.keymap.from_hf_tensors(hf_name, tensor):
            if name == "lm_head.weight" and source_tied:
                continue  # a tied head is the embedding (transformers ignores a stored copy too)
            out[name] = _checked(name, part, hf_name, expected, plan)
            if plan.keymap.norm_offset and name.endswith("norm.weight"):
                out[name] += plan.keymap.norm_offset  # Gemma's (1 + weight) norm as an ordinary one (exact in float32)
    if skipped:
        plan.skipped = sorted({".".join(n.split(".")[:2]) for n in skipped})
    if "embed_tokens.weight" in out and "lm_head.weight" not in out:
        if not source_tied:
            raise ConversionError(f"{plan.source.describe()} has no tensor 'lm_head.weight' and its config does not "
                                  "tie it to the embedding; the weight files are incomplete")
        out["lm_head.weight"] = out["embed_tokens.weight"]
    missing = sorted(set(expected) - set(out))
    if missing and is_modernbert(plan.config) and all(name.startswith(HEAD_PARTS) for name in missing):
        out.update(fresh_head(replace(args, vocab_size=plan.config.vocab_size), missing))
        plan.fresh, missing = missing, []
    if missing:
        raise ConversionError(f"{plan.source.describe()} lacks tensor {plan.keymap.to_hf(missing[0])!r} "
                              f"({len(missing)} missing in all); the weight files are incomplete")
    tied_source = out["lm_head.weight"] is out["embed_tokens.weight"]
    out["embed_tokens.weight"] = _fit_rows(out["embed_tokens.weight"], plan)
    if args.tie_word_embeddings:
        out["lm_head.weight"] = out["embed_tokens.weight"]
    elif tied_source:  # --untie-embeddings: the head starts as its own copy of the embedding
        out["lm_head.weight"] = out["embed_tokens.weight"].clone()
    else:
        out["lm_head.weight"] = _fit_rows(out["lm_head.weight"], plan)
    if "lm_head.bias" in out:  # ModernBERT's decoder bias: one entry per vocabulary row
        out["lm_head.bias"] = _fit_rows(out["lm_head.bias"], plan)
    return out


def _checked(name: str, tensor: torch.Tensor, hf_name: str, expected: dict, plan: ImportPlan) -> torch.Tensor:
    """``tensor`` (megamlm's ``name``, from the Hugging Face ``hf_name``) in float32, refused by name when the model
    its config describes has no such tensor or another shape."""
    if name not in expected:
        raise ConversionError(f"tensor {hf_name!r} of {plan.source.describe()} is not part of the model its config "
                              "describes (a bias the config does not enable?); the config and weights do not match")
    if tuple(tensor.shape) != expected[name]:
        raise ConversionError(f"tensor {hf_name!r} of {plan.source.describe()} has shape {tuple(tensor.shape)} "
                              f"but its config implies {expected[name]}; the config and weights do not match")
    return tensor.detach().to(torch.float32)  # the tensors are ours: no copy unless the dtype changes


def load_hf_weights(hf_dir: str | Path, model: torch.nn.Module) -> ImportPlan:
    """Load an HF model's weights into a megamlm Transformer built with ``model_args_from_hf(hf_dir)``."""
    plan = plan_import(hf_dir, model.args.max_seq_length)
    if plan.model_args != model.args:
        raise ConversionError(f"the model was built with {model.args} but {plan.source.describe()} needs "
                              f"{plan.model_args}; build it with model_args_from_hf()")
    state = megamlm_state_dict(iter_tensors(plan.source), plan)
    model.load_state_dict(state, strict=True)
    return plan


def model_flags(args: ModelArgs) -> list[str]:
    """The pretrain.py flags that build a model of shape ``args`` and train at its sequence length (features only
    where they are set)."""
    flags = ["--num-layers", str(args.num_layers), "--hidden-size", str(args.hidden_size),
             "--ffn-hidden-size", str(args.ffn_hidden_size), "--num-attention-heads", str(args.num_attention_heads),
             "--num-query-groups", str(args.num_query_groups), "--vocab-size", str(args.vocab_size),
             "--seq-length", str(args.max_seq_length),
             "--rope-theta", repr(args.rope_theta), "--norm-epsilon", repr(args.norm_epsilon)]
    if args.head_dim != args.hidden_size // args.num_attention_heads:
        flags += ["--head-dim", str(args.head_dim)]
    if args.rope_scaling is not None:
        flags += ["--rope-scaling", json.dumps(args.rope_scaling.to_dict())]
    for flag, on in (("--attention-bias", args.attention_bias), ("--attention-out-bias", args.attention_out_bias),
                     ("--tie-word-embeddings", args.tie_word_embeddings), ("--qk-norm", args.qk_norm),
                     ("--sublayer-output-norms", args.sublayer_output_norms),
                     ("--scale-embeddings", args.scale_embeddings)):
        flags += [flag] if on else []
    if args.mlp_activation != "swiglu":
        flags += ["--mlp-activation", args.mlp_activation]
    for flag, value in (("--query-pre-attn-scalar", args.query_pre_attn_scalar),
                        ("--sliding-window", args.sliding_window), ("--layer-types", args.layer_types),
                        ("--local-rope-theta", args.local_rope_theta)):
        flags += [flag, str(value)] if value is not None else []
    return flags + _block_flags(args)


_BLOCK_FIELDS = ("norm_type", "norm_bias", "embedding_norm", "prediction_head", "classifier_bias", "decoder_bias",
                 "mlp_bias", "attention_dropout", "mlp_dropout", "embedding_dropout", "init_method",
                 "initializer_cutoff_factor")
"""The ModernBERT block's ModelArgs fields: a flag each (pretrain.py's model flags are the field names), printed
where the value is not the default."""


def _block_flags(args: ModelArgs) -> list[str]:
    flags = []
    defaults = {f.name: f.default for f in dataclasses.fields(ModelArgs)}
    for name in _BLOCK_FIELDS:
        value = getattr(args, name)
        if value == defaults[name]:
            continue
        flag = "--" + name.replace("_", "-")
        flags += ([flag] if value else ["--no-" + name.replace("_", "-")]) if isinstance(value, bool) else \
            [flag, str(value)]
    return flags


def pretrain_flags(args: ModelArgs, checkpoint: Path) -> list[str]:
    """The pretrain.py flags that build this shape and load these weights."""
    return ["--init-from", str(checkpoint), *model_flags(args),
            "--tokenizer-model", str(checkpoint / TOKENIZER_DIR / "tokenizer.json")]


CPT_RECIPE = ("--lr", "1e-4", "--lr-warmup-fraction", "0.1", "--lr-wsd-decay-fraction", "0.2")
"""The schedule the printed command continues an imported model with. A pretrained model is not a random one: the
defaults (the tiny preset's LR 3e-3, no warmup) throw it far from its weights on step 1 (Qwen3's first grad-norm
was 41). A small peak LR, re-warmed and re-decayed: the rule of Ibrahim et al. 2024 ("Simple and Scalable Strategies
to Continually Pre-train Large Language Models", arXiv 2403.08763), at the peak and fractions of
examples/cpt_hf_decoder.py."""
CPT_RECIPE_SOURCE = ("LR 1e-4 after a 10% warmup, decayed over the last 20%: re-warm and re-decay, as Ibrahim et al. "
                     "2024, arXiv 2403.08763, continue pretrained models; not the from-scratch default 3e-3 "
                     "without warmup")


def _run_config(args: ModelArgs) -> dict:
    cfg = Config()
    return replace(cfg, model=replace(cfg.model, **model_section_values(args))).to_dict()


def import_hf(input_path: str | Path, output: str | Path, force: bool = False, max_seq_length: int | None = None,
              log=print, hf_state: dict[str, torch.Tensor] | None = None, untie: bool = False,
              mask_token: str | None = None) -> Path:
    """Write a step-0 megamlm checkpoint (weights, config.json, tokenizer/) of an HF model; returns its folder.

    ``hf_state``: the model's tensors when the caller already holds them (``hf_model.state_dict()`` of the
    same ``input_path``), which saves reading and dequantizing the weights again. ``untie``: give the LM head
    of a tied model its own copy (``--untie-embeddings``). ``mask_token``: use this token (``--mask-token``).
    """
    target = AtomicFolder(output, force)
    target.check()
    plan = plan_import(input_path, max_seq_length, untie, mask_token)
    args = plan.model_args
    log(f"{plan.source.describe()}: {plan.config.model_type}, {args.num_layers} layers, hidden {args.hidden_size}, "
        f"{describe_features(args)}, vocabulary {plan.config.vocab_size} -> {args.vocab_size}, mask token "
        f"{plan.tokenizer.mask_token!r} ({'added' if plan.mask_added else 'its own'}, id "
        f"{plan.tokenizer.mask_token_id})")
    tensors = ((name, t.clone()) for name, t in hf_state.items()) if hf_state is not None else iter_tensors(plan.source)
    state = megamlm_state_dict(tensors, plan)
    if plan.skipped:
        log(f"skipped the parts megamlm does not import: {', '.join(plan.skipped)} (the text tower was imported)")
    if plan.fresh:
        log(f"{plan.source.describe()} holds no MLM head (a ModernBertModel, such as an embedder): "
            f"{', '.join(plan.fresh)} start as megamlm's ModernBERT init starts them")
    with target as tmp:
        plan.tokenizer.save_pretrained(str(tmp / TOKENIZER_DIR))
        ours = load_megamlm_tokenizer(tmp / TOKENIZER_DIR)
        ids = {"bos_id": plan.tokenizer.bos_token_id, "eos_id": plan.tokenizer.eos_token_id,
               "pad_id": plan.tokenizer.pad_token_id, "mask_id": plan.tokenizer.mask_token_id}
        # A BERT-style tokenizer (ModernBERT's) has [CLS]/[SEP] and no bos/eos: megamlm's tokenizer takes those
        # as its bos/eos, and so does the record (an export writes them as ModernBERT's bos/cls and eos/sep ids).
        ids.update({key: getattr(ours, key) for key in ("bos_id", "eos_id") if ids[key] is None})
        if ours.mask_id != ids["mask_id"]:
            raise ConversionError(f"the saved tokenizer gives mask id {ours.mask_id}, transformers gave "
                                  f"{ids['mask_id']}; check the tokenizer files of {plan.source.describe()}")
        record = {
            "config": _run_config(args), "model_args": args.to_dict(), "switch_step": None, "data_path": [],
            "seq_length": args.max_seq_length,
            "tokenizer": {"path": f"{TOKENIZER_DIR}/tokenizer.json", "vocab_size": len(plan.tokenizer), **ids},
            "imported_from": {"source": plan.source.describe(), "model_type": plan.config.model_type,
                              "hf_vocab_size": plan.config.vocab_size, "mask_token": plan.tokenizer.mask_token,
                              "mask_added": plan.mask_added, "hf_settings": kept_settings(plan.config)},
        }
        write_weights_checkpoint(tmp, state, record, {"consumed_samples": 0})
    log(f"wrote megamlm checkpoint {target.destination}; continue pretraining with ({CPT_RECIPE_SOURCE}):\n"
        "  python pretrain.py " + shlex.join([*pretrain_flags(args, target.destination), *CPT_RECIPE])
        + " --data-path <data tokenized with that tokenizer>")
    return target.destination

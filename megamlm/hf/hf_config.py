"""ModelArgs <-> Hugging Face configs, with every shape megamlm's model cannot express refused by name."""

from __future__ import annotations

from dataclasses import dataclass

from megamlm.hf.errors import ConversionError
from megamlm.hf.keymaps import EXPORT_ARCHS, KeyMap, keymap_for_model_type
from megamlm.model.config import ModelArgs


@dataclass(frozen=True)
class SpecialIds:
    """Token ids written into an exported config (None: the tokenizer has no such token)."""

    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    mask_id: int | None


def hf_config_for(arch: str, args: ModelArgs, ids: SpecialIds):
    """The transformers config of an export; both architectures get untied embeddings and default RoPE."""
    from transformers import EuroBertConfig, LlamaConfig

    if arch not in EXPORT_ARCHS:
        raise ConversionError(f"unsupported --arch {arch!r}; choose one of {', '.join(EXPORT_ARCHS)}")
    common = dict(
        vocab_size=args.vocab_size, hidden_size=args.hidden_size, intermediate_size=args.ffn_hidden_size,
        num_hidden_layers=args.num_layers, num_attention_heads=args.num_attention_heads,
        num_key_value_heads=args.num_query_groups, head_dim=args.head_dim, hidden_act="silu",
        max_position_embeddings=args.max_seq_length, rms_norm_eps=args.norm_epsilon,
        initializer_range=args.init_method_std,
        rope_parameters={"rope_type": "default", "rope_theta": float(args.rope_theta)},
        attention_bias=False, mlp_bias=False, tie_word_embeddings=False,
        bos_token_id=ids.bos_id, eos_token_id=ids.eos_id, pad_token_id=ids.pad_id,
        architectures=[EXPORT_ARCHS[arch].architecture],
    )
    if arch == "eurobert":
        # EuroBERT's config defaults to Llama 3 ids (mask 128002); always write ours.
        return EuroBertConfig(mask_token_id=ids.mask_id if ids.mask_id is not None else -1, **common)
    return LlamaConfig(**common)


def _rope_parameters(config) -> dict:
    params = getattr(config, "rope_parameters", None)
    if params is None:  # older config objects
        scaling = getattr(config, "rope_scaling", None) or {}
        params = {"rope_type": scaling.get("rope_type", scaling.get("type", "default")),
                  "rope_theta": getattr(config, "rope_theta", 10_000.0)}
    return params


def check_importable(config) -> KeyMap:
    """The key map for ``config``, or one ConversionError naming what megamlm's model lacks."""
    model_type = getattr(config, "model_type", None)
    keymap = keymap_for_model_type(model_type)
    if model_type == "qwen2":
        raise ConversionError(
            "Qwen2 models carry biases on q_proj/k_proj/v_proj, and megamlm's attention has none, so the "
            "imported model would compute something else; to import Qwen2, add attention biases to "
            "megamlm.model (ModelArgs and Attention) and map them in megamlm/hf/keymaps.py")
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(config, flag, False):
            raise ConversionError(f"the config sets {flag}=true, but megamlm's model has no biases; "
                                  "only bias-free Llama-style checkpoints can be imported")
    act = getattr(config, "hidden_act", "silu")
    if act != "silu":
        raise ConversionError(f"hidden_act={act!r}: megamlm's MLP is SwiGLU (silu); this checkpoint cannot be imported")
    rope = _rope_parameters(config)
    if rope.get("rope_type", "default") != "default":
        raise ConversionError(
            f"RoPE type {rope.get('rope_type')!r} (e.g. Llama 3.1 frequency scaling) is not implemented by megamlm's "
            "rotary embedding (plain RoPE with a theta only); import a model with default RoPE")
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None)
    if head_dim is not None and head_dim * heads != config.hidden_size:
        raise ConversionError(f"head_dim {head_dim} x {heads} heads != hidden_size {config.hidden_size}; megamlm's "
                              "attention derives head_dim = hidden / heads and cannot hold this model")
    return keymap


def model_args_from_config(config, max_seq_length: int | None = None) -> ModelArgs:
    """The megamlm shape of a Hugging Face config (checked with check_importable first).

    ``max_seq_length`` (the run's sequence length) defaults to the model's context; a Mistral-style
    sliding window caps it, since up to the window full attention computes the same thing.
    """
    check_importable(config)
    context = config.max_position_embeddings
    window = getattr(config, "sliding_window", None)
    if window and (getattr(config, "use_sliding_window", True)):
        context = min(context, window)
    return ModelArgs(
        vocab_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        hidden_size=config.hidden_size,
        ffn_hidden_size=config.intermediate_size,
        num_attention_heads=config.num_attention_heads,
        num_query_groups=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        max_seq_length=max_seq_length or context,
        rope_theta=float(_rope_parameters(config)["rope_theta"]),
        norm_epsilon=float(config.rms_norm_eps),
        init_method_std=float(getattr(config, "initializer_range", 0.02)),
    )

"""ModelArgs <-> Hugging Face configs, with every feature megamlm's model cannot express refused by name.

Imported: Llama (1-3.2: attention/o biases, head_dim, llama3/linear/YaRN RoPE scaling, tied embeddings),
Mistral, Qwen2/Qwen2.5 (q/k/v biases), SmolLM (llama), EuroBERT, Qwen3 (q/k norms) and Gemma 3 (text models and
the text tower of the multimodal ones: q/k norms, four norms per block, GeGLU, scaled embeddings, the query
pre-attention scalar, sliding-window and full layers with their own RoPE bases). Exported: EuroBERT (the
encoder), a bidirectional Gemma 3 (the encoder of a Gemma 3 decoder), or the causal Llama, Qwen2, Mistral,
Qwen3 or Gemma 3 model, each config carrying the biases, head_dim, RoPE parameters and tying. The ModernBERT
family (ModernBertForMaskedLM, ModernBertDecoderForCausalLM) is translated both ways by megamlm/hf/modernbert.py,
to which this module hands it.
"""

from __future__ import annotations

from dataclasses import dataclass

from megamlm.hf.config_values import rope_parameters, source_float
from megamlm.hf.errors import ConversionError
from megamlm.hf.keymaps import EXPORT_ARCHS, MODERNBERT_ARCHS, KeyMap, keymap_for_model_type
from megamlm.hf.modernbert import (
    check_modernbert,
    is_modernbert,
    modernbert_export_problem,
    modernbert_hf_config,
    modernbert_model_args,
)
from megamlm.model.config import ModelArgs
from megamlm.model.rope_scaling import RopeScaling

# Architectures with a feature megamlm's blocks do not have: the import names the feature.
UNSUPPORTED_FEATURES = {
    "qwen3_moe": "a mixture-of-experts MLP and q/k norms (Qwen3-MoE)",
    "qwen2_moe": "a mixture-of-experts MLP (Qwen2-MoE)",
    "mixtral": "a mixture-of-experts MLP (Mixtral)",
    "gemma": "GELU MLPs, (1 + w) RMSNorm weights and a scaled embedding (Gemma)",
    "gemma2": "attention and final logit soft-capping, and sliding windows on alternate layers (Gemma 2)",
    "qwen3_next": "gated-delta (linear-attention) layers and a mixture-of-experts MLP (Qwen3-Next)",
    "qwen3_5": "gated-delta (linear-attention) layers (Qwen3.5)",
    "qwen3_5_moe": "gated-delta (linear-attention) layers and a mixture-of-experts MLP (Qwen3.5-MoE)",
    "olmo2": "q/k norms and norms after each sublayer (OLMo 2)",
    "phi3": "fused qkv/gate-up projections and longrope scaling (Phi-3)",
    "cohere": "parallel attention and MLP with LayerNorm (Cohere)",
}


@dataclass(frozen=True)
class SpecialIds:
    """Token ids written into an exported config (None: the tokenizer has no such token)."""

    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    mask_id: int | None


@dataclass(frozen=True)
class ExportBiases:
    """Which attention biases an exported architecture has: every one it has is written (zeros where the
    megamlm model has none), and a bias it cannot hold refuses the export."""

    qkv: bool
    out: bool


def export_biases(arch: str, args: ModelArgs) -> ExportBiases:
    if arch in ("eurobert", "llama", *MODERNBERT_ARCHS):  # one attention_bias flag for q, k, v and o
        any_bias = args.attention_bias or args.attention_out_bias
        return ExportBiases(any_bias, any_bias)
    if arch == "qwen2":
        if args.attention_out_bias:
            raise ConversionError("the model has an o_proj bias, which Qwen2 does not; export it with --arch llama "
                                  "or --arch eurobert")
        return ExportBiases(True, False)
    if args.attention_bias or args.attention_out_bias:
        raise ConversionError(f"the model has attention biases, which {arch} does not; export it with --arch llama "
                              "or --arch eurobert")
    return ExportBiases(False, False)


def describe_features(args: ModelArgs) -> str:
    """One line of the features beyond the plain shape (logs and model cards)."""
    features = [f"head_dim {args.head_dim}"]
    if args.attention_bias or args.attention_out_bias:
        features.append("biases on " + "/".join(["q/k/v"] * args.attention_bias + ["o"] * args.attention_out_bias))
    if args.rope_scaling is not None:
        features.append(f"RoPE {args.rope_scaling.rope_type} x{args.rope_scaling.factor:g}")
    features.append("tied embeddings" if args.tie_word_embeddings else "untied embeddings")
    features += [name for name, on in _features(args).items() if on]
    return ", ".join(features)


GEMMA3_ARCHS = ("gemma3", "gemma3_encoder")


def _features(args: ModelArgs) -> dict[str, bool]:
    """The decoder features of ``args`` beyond Llama's, by the words a refusal names them with."""
    return {
        "query/key norms (qk_norm)": args.qk_norm,
        "norms on the attention and MLP outputs (sublayer_output_norms)": args.sublayer_output_norms,
        "a GeGLU MLP": args.mlp_activation == "geglu",
        "scaled embeddings": args.scale_embeddings,
        "a query pre-attention scalar": args.query_pre_attn_scalar is not None,
        "sliding-window layers": args.has_sliding_layers(),
        "a local RoPE base": args.local_rope_theta is not None,
        "LayerNorm (norm_type layernorm)": args.norm_type == "layernorm",
        "an embedding norm (embedding_norm)": args.embedding_norm,
        "the prediction head (prediction_head)": args.prediction_head,
        "an LM head bias (decoder_bias)": args.decoder_bias,
        "MLP biases (mlp_bias)": args.mlp_bias,
        "a GeGLU MLP with exact GELU (geglu_erf)": args.mlp_activation == "geglu_erf",
    }


_MODERNBERT_FEATURES = ("LayerNorm (norm_type layernorm)", "an embedding norm (embedding_norm)",
                        "the prediction head (prediction_head)", "an LM head bias (decoder_bias)",
                        "MLP biases (mlp_bias)", "a GeGLU MLP with exact GELU (geglu_erf)")
"""The ModernBERT block's features: only --arch modernbert / modernbert-decoder hold them."""


def export_problem(arch: str, args: ModelArgs) -> str | None:
    """Why ``arch`` cannot hold ``args`` exactly (one line naming the feature and the alternatives), or None."""
    features = _features(args)
    if arch in MODERNBERT_ARCHS:
        return modernbert_export_problem(arch, args)
    block = [name for name in _MODERNBERT_FEATURES if features[name]]
    if block:
        return (f"--arch {arch} cannot hold {block[0]} of this model ({EXPORT_ARCHS[arch].architecture} has none); "
                "export it with --arch modernbert (or modernbert-decoder)")
    if arch in GEMMA3_ARCHS:
        needed = ("query/key norms (qk_norm)", "norms on the attention and MLP outputs (sublayer_output_norms)",
                  "a GeGLU MLP", "scaled embeddings")
        lacking = [name for name in needed if not features[name]]
        if lacking:
            return (f"--arch {arch}: the model lacks {lacking[0]}, which every Gemma 3 block has; export it with "
                    f"--arch {default_arch(args)}")
        return None
    present = unheld_features(arch, args)
    if arch == "qwen3" and not present and not args.qk_norm:
        return "--arch qwen3: the model lacks query/key norms (qk_norm), which every Qwen3 layer has; export it " \
               "with --arch llama"
    if not present:
        return None
    alternatives = []
    if args.qk_norm and not args.sublayer_output_norms and args.mlp_activation == "swiglu":
        alternatives.append("the causal Qwen3 export (--arch qwen3)")
    if args.sublayer_output_norms:
        alternatives.append("the bidirectional Gemma 3 export (--arch gemma3_encoder) or the causal one (--arch "
                            "gemma3)")
    alternatives.append("tools/evaluate.py on the run folder (it evaluates megamlm's own bidirectional model)")
    return (f"--arch {arch} cannot hold {present[0]} of this model ({EXPORT_ARCHS[arch].architecture} has none); "
            f"use {' or '.join(alternatives)}")


def unheld_features(arch: str, args: ModelArgs) -> list[str]:
    """The features of ``args`` that the Llama-shaped export ``arch`` (not Gemma 3) has no place for, named."""
    allowed = ("query/key norms (qk_norm)",) if arch == "qwen3" else ()
    return [name for name, on in _features(args).items() if on and name not in allowed]


def default_arch(args: ModelArgs) -> str:
    """The encoder export of a model: EuroBERT wherever it holds the model exactly; a Gemma 3-shaped model (its
    four norms per block) the native bidirectional Gemma 3; a ModernBERT block ModernBertForMaskedLM; otherwise
    EuroBERT, which then refuses by name."""
    if args.embedding_norm or args.prediction_head:
        return "modernbert"
    return "gemma3_encoder" if args.sublayer_output_norms else "eurobert"


def _gemma3_config(args: ModelArgs, ids: SpecialIds, common: dict, bidirectional: bool):
    import transformers

    kinds = [args.layer_type(i) for i in range(args.num_layers)]
    window = args.sliding_window or args.max_seq_length
    rope = {"full_attention": rope_parameters(args),
            "sliding_attention": {"rope_type": "default",
                                  "rope_theta": float(args.local_rope_theta or args.rope_theta)}}
    settings = {k: v for k, v in common.items() if k not in ("hidden_act", "rope_parameters")}
    config = transformers.Gemma3TextConfig(
        hidden_activation="gelu_pytorch_tanh", rope_parameters=rope,
        query_pre_attn_scalar=args.query_pre_attn_scalar or args.head_dim,
        # A bidirectional Gemma 3 config keeps sliding_window // 2 + 1 as its window (|i - j| < that): ask for
        # 2 * (W - 1) so that it attends |i - j| < W, as megamlm's bidirectional sliding layers do.
        sliding_window=(2 * (window - 1) if bidirectional else window),
        layer_types=[f"{kind}_attention" for kind in kinds],
        attention_bias=False, attn_logit_softcapping=None, final_logit_softcapping=None,
        use_bidirectional_attention=bidirectional, **settings)
    return config


def hf_config_for(arch: str, args: ModelArgs, ids: SpecialIds):
    """The transformers config of an export (raises ConversionError where ``arch`` cannot hold the model)."""
    import transformers

    if arch not in EXPORT_ARCHS:
        raise ConversionError(f"unsupported --arch {arch!r}; choose one of {', '.join(EXPORT_ARCHS)}")
    if arch in MODERNBERT_ARCHS:
        return modernbert_hf_config(arch, args, ids)
    problem = export_problem(arch, args)
    if problem:
        raise ConversionError(problem)
    biases = export_biases(arch, args)
    common = dict(
        vocab_size=args.vocab_size, hidden_size=args.hidden_size, intermediate_size=args.ffn_hidden_size,
        num_hidden_layers=args.num_layers, num_attention_heads=args.num_attention_heads,
        num_key_value_heads=args.num_query_groups, head_dim=args.head_dim, hidden_act="silu",
        max_position_embeddings=args.max_seq_length, rms_norm_eps=args.norm_epsilon,
        initializer_range=args.init_method_std, rope_parameters=rope_parameters(args),
        tie_word_embeddings=args.tie_word_embeddings,
        bos_token_id=ids.bos_id, eos_token_id=ids.eos_id, pad_token_id=ids.pad_id,
        architectures=[EXPORT_ARCHS[arch].architecture],
    )
    if arch == "eurobert":
        if args.hidden_size % args.num_attention_heads:
            raise ConversionError(f"EuroBERT needs hidden_size ({args.hidden_size}) divisible by the number of heads "
                                  f"({args.num_attention_heads}); export this model with --arch llama")
        # EuroBERT's config defaults to Llama 3 ids (mask 128002); always write ours.
        return transformers.EuroBertConfig(mask_token_id=ids.mask_id if ids.mask_id is not None else -1,
                                           attention_bias=biases.qkv, mlp_bias=False, **common)
    if arch == "llama":
        return transformers.LlamaConfig(attention_bias=biases.qkv, mlp_bias=False, **common)
    if arch == "qwen2":
        return transformers.Qwen2Config(use_sliding_window=False, **common)
    if arch == "qwen3":
        return transformers.Qwen3Config(use_sliding_window=False, attention_bias=False, **common)
    if arch in GEMMA3_ARCHS:
        return _gemma3_config(args, ids, common, bidirectional=arch == "gemma3_encoder")
    return transformers.MistralConfig(sliding_window=None, **common)


def _rope_dict(config) -> dict:
    params = getattr(config, "rope_parameters", None)
    if params is None:  # older config objects
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10_000.0))
    return params


def _attention_biases(config, model_type: str) -> tuple[bool, bool]:
    """(q/k/v biases, o_proj bias) of an importable architecture."""
    if model_type == "qwen2":
        return True, False  # Qwen2 always biases q, k and v, never o
    flag = bool(getattr(config, "attention_bias", False))
    return flag, flag


def text_config(config):
    """The text model's config: Gemma 3's multimodal config holds it as ``text_config``."""
    if getattr(config, "model_type", None) == "gemma3" and getattr(config, "text_config", None) is not None:
        return config.text_config
    return config


def check_importable(config) -> KeyMap:
    """The key map for ``config``, or one ConversionError naming the feature megamlm's model lacks."""
    outer_type = getattr(config, "model_type", None)
    if is_modernbert(config):
        check_modernbert(config)
        return keymap_for_model_type(outer_type)
    config = text_config(config)
    model_type = getattr(config, "model_type", None)
    if outer_type == "gemma3":
        model_type = "gemma3"
    if model_type in UNSUPPORTED_FEATURES:
        raise ConversionError(f"model_type={model_type!r} uses {UNSUPPORTED_FEATURES[model_type]}, which megamlm's "
                              "Llama-style blocks do not have; it cannot be imported")
    keymap = keymap_for_model_type(model_type)
    for flag in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(config, flag, None):
            raise ConversionError(f"the config sets {flag}={getattr(config, flag)} (logit soft-capping), which "
                                  "megamlm's model does not have; it cannot be imported")
    for flag in ("num_local_experts", "num_experts"):
        if getattr(config, flag, None):
            raise ConversionError(f"the config sets {flag}={getattr(config, flag)} (a mixture-of-experts MLP); "
                                  "megamlm's MLP is dense, so it cannot be imported")
    if getattr(config, "mlp_bias", False):
        raise ConversionError("the config sets mlp_bias=true (biases on the MLP projections), which megamlm's MLP "
                              "does not have; only bias-free MLPs can be imported")
    act = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", "silu")
    if act not in _ACTIVATIONS:
        raise ConversionError(f"hidden_act={act!r}: megamlm's MLP is SwiGLU (silu) or GeGLU (gelu_pytorch_tanh); "
                              "this checkpoint cannot be imported")
    kinds = set(getattr(config, "layer_types", None) or ())
    if kinds - {"full_attention", "sliding_attention"}:
        other = sorted(kinds - {"full_attention", "sliding_attention"})[0]
        raise ConversionError(f"the config has {other!r} layers (linear or other non-softmax attention), which "
                              "megamlm's model does not have; it cannot be imported")
    try:
        for params in _rope_dicts(config).values():
            RopeScaling.from_dict(params)
        local = _rope_dicts(config).get("sliding_attention")
        if local is not None and (local.get("rope_type") or "default") != "default":
            raise ValueError(f"RoPE type {local['rope_type']!r} on the sliding-window layers is not supported "
                             "(their RoPE is unscaled)")
    except ValueError as err:
        raise ConversionError(f"{err}; this checkpoint cannot be imported") from None
    return keymap


_ACTIVATIONS = {"silu": "swiglu", "gelu_pytorch_tanh": "geglu"}


def _rope_dicts(config) -> dict[str, dict]:
    """RoPE parameters by layer type (Gemma 3 keeps one dict per type); ``full_attention`` for the others."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "full_attention" in params:
        return {kind: dict(value) for kind, value in params.items() if value is not None}
    return {"full_attention": _rope_dict(config)}


def _windowed_layers(config) -> str | None:
    """megamlm's layer_types of a config whose sliding-window layers megamlm represents (Qwen3, Gemma 3)."""
    kinds = getattr(config, "layer_types", None)
    if config.model_type not in ("qwen3", "gemma3_text") or not kinds or not getattr(config, "sliding_window", None):
        return None
    if "sliding_attention" not in kinds:
        return None
    return ",".join("sliding" if kind == "sliding_attention" else "full" for kind in kinds)


def model_args_from_config(config, max_seq_length: int | None = None, untie: bool = False) -> ModelArgs:
    """The megamlm shape of a Hugging Face config (checked with check_importable first).

    ``max_seq_length`` (the run's sequence length) defaults to the model's context; a sliding window caps it
    (up to the window, full attention computes the same thing) and a longer one is refused. ``untie`` gives
    the LM head its own copy of a tied embedding.
    """
    check_importable(config)
    if is_modernbert(config):
        return modernbert_model_args(config, max_seq_length, untie)
    config = text_config(config)
    context = config.max_position_embeddings
    window = getattr(config, "sliding_window", None)
    layer_types = _windowed_layers(config)
    if layer_types is None and window and getattr(config, "use_sliding_window", True) \
            and config.model_type not in ("qwen3", "gemma3_text"):
        if max_seq_length and max_seq_length > window:
            raise ConversionError(f"the model attends within a sliding window of {window} tokens; megamlm's "
                                  f"attention covers the whole sequence, the same only up to {window} tokens: "
                                  f"import with --seq-length {window} or less (not {max_seq_length})")
        context = min(context, window)
    ropes = _rope_dicts(config)
    rope = ropes["full_attention"]
    local = ropes.get("sliding_attention")
    gemma = config.model_type == "gemma3_text"
    act = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", "silu")
    attention_bias, attention_out_bias = _attention_biases(config, config.model_type)
    return ModelArgs(
        vocab_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        hidden_size=config.hidden_size,
        ffn_hidden_size=config.intermediate_size,
        num_attention_heads=config.num_attention_heads,
        num_query_groups=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        max_seq_length=max_seq_length or context,
        rope_theta=source_float(rope["rope_theta"]),
        norm_epsilon=source_float(config.rms_norm_eps),
        init_method_std=source_float(getattr(config, "initializer_range", 0.02)),
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        attention_bias=attention_bias,
        attention_out_bias=attention_out_bias,
        rope_scaling=RopeScaling.from_dict(rope),
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)) and not untie,
        qk_norm=config.model_type in ("qwen3", "gemma3_text"),
        sublayer_output_norms=gemma,
        mlp_activation=_ACTIVATIONS[act],
        scale_embeddings=gemma,
        query_pre_attn_scalar=int(config.query_pre_attn_scalar) if gemma else None,
        sliding_window=int(window) if layer_types is not None else None,
        layer_types=layer_types,
        local_rope_theta=(float(local["rope_theta"]) if layer_types is not None and local is not None
                          and float(local["rope_theta"]) != float(rope["rope_theta"]) else None),
    )

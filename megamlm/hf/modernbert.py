"""The ModernBERT family (ModernBERT, Ettin's encoders and decoders, mmBERT) <-> megamlm's ModernBERT block.

transformers holds the encoders as ``ModernBertForMaskedLM`` (model_type ``modernbert``) and Ettin's decoders as
``ModernBertDecoderForCausalLM`` (``modernbert-decoder``). Their configs come in two forms: transformers 5 writes
``rope_parameters`` per layer type and ``layer_types``; the released files write ``global_rope_theta``,
``local_rope_theta``, ``global_attn_every_n_layers``, ``layer_norm_eps`` beside ``norm_eps`` and mmBERT's
``position_embedding_type: "sans_pos"`` (every form uses RoPE). transformers reads both into one config object, which
is what this module translates, so both forms import the same model.

The sliding window: transformers' encoder attends ``|i - j| <= local_attention // 2`` on its sliding layers (its
mask ``sliding_window_bidirectional_overlay`` with ``sliding_window = local_attention // 2``), megamlm's bidirectional
sliding layers ``|i - j| < W``: W = local_attention // 2 + 1. The decoder attends the last ``local_attention // 2``
tokens, itself included (``sliding_window_overlay``: ``j > i - local_attention // 2``), megamlm's causal sliding
layers the last W: W = local_attention // 2.

    fields = modernbert_fields(AutoConfig.from_pretrained(folder))    # ModelArgs keywords
    config = modernbert_hf_config("modernbert", args, ids)           # the export's ModernBertConfig
"""

from __future__ import annotations

import torch

from megamlm.hf.config_values import rope_parameters, source_float
from megamlm.hf.errors import ConversionError
from megamlm.hf.keymaps import EXPORT_ARCHS
from megamlm.hf.sentence_export import SENTENCE_POOLING
from megamlm.model.config import ModelArgs
from megamlm.model.init import init_weights
from megamlm.model.prediction_head import PredictionHead
from megamlm.model.rope_scaling import RopeScaling

ENCODER_TYPE = "modernbert"
DECODER_TYPE = "modernbert-decoder"
MODEL_TYPES = (ENCODER_TYPE, DECODER_TYPE)
ACTIVATIONS = {"gelu": "geglu_erf", "gelu_pytorch_tanh": "geglu", "silu": "swiglu"}
"""transformers' hidden_activation -> megamlm's gated MLP (the first half of ``mlp.Wi`` is activated)."""
_HF_ACTIVATION = {ours: hf for hf, ours in ACTIVATIONS.items()}
_HF_KINDS = {"full_attention": "full", "sliding_attention": "sliding"}


def is_modernbert(config) -> bool:
    return getattr(config, "model_type", None) in MODEL_TYPES


def _refuse(field: str, value, why: str) -> ConversionError:
    return ConversionError(f"the config sets {field}={value!r}: {why}; this ModernBERT checkpoint cannot be imported")


def _rope(config, kind: str) -> dict:
    params = (getattr(config, "rope_parameters", None) or {}).get(kind) or {}
    return {"rope_type": "default", **params}


def check_modernbert(config) -> None:
    """Refuse, in one line naming the field, a ModernBERT config megamlm's block cannot compute exactly."""
    act = config.hidden_activation
    if act not in ACTIVATIONS:
        raise _refuse("hidden_activation", act, "megamlm's gated MLP applies gelu (exact), gelu_pytorch_tanh or silu")
    if config.classifier_activation != "gelu":
        raise _refuse("classifier_activation", config.classifier_activation,
                      "megamlm's prediction head applies exact GELU ('gelu')")
    if getattr(config, "sparse_prediction", False):
        raise _refuse("sparse_prediction", True, "megamlm's MLM loss is always sparse, and an export writes false; "
                      "set it to false in config.json")
    if config.hidden_size % config.num_attention_heads:
        raise _refuse("num_attention_heads", config.num_attention_heads,
                      f"it does not divide hidden_size {config.hidden_size}")
    head_dim = getattr(config, "head_dim", None)
    if head_dim is not None and head_dim != config.hidden_size // config.num_attention_heads:
        raise _refuse("head_dim", head_dim, f"ModernBERT's heads are hidden_size / num_attention_heads = "
                      f"{config.hidden_size // config.num_attention_heads} wide")
    kv_heads = getattr(config, "num_key_value_heads", None)
    if kv_heads is not None and kv_heads != config.num_attention_heads:
        raise _refuse("num_key_value_heads", kv_heads, "ModernBERT has no grouped-query attention")
    legacy_eps = getattr(config, "layer_norm_eps", None)
    if legacy_eps is not None and float(legacy_eps) != float(config.norm_eps):
        raise _refuse("layer_norm_eps", legacy_eps, f"transformers uses norm_eps={config.norm_eps}; the two disagree, "
                      "so which epsilon the weights were trained with is unknown (make them equal)")
    kinds = set(config.layer_types)
    if kinds - set(_HF_KINDS):
        raise _refuse("layer_types", sorted(kinds - set(_HF_KINDS))[0], "megamlm's layers are full_attention or "
                      "sliding_attention")
    if "sliding_attention" in kinds and (config.local_attention is None or window_of(config) < 1):
        raise _refuse("local_attention", config.local_attention, "the config has sliding_attention layers, which "
                      "need a window of at least one token")
    for name in ("attention_dropout", "mlp_dropout", "embedding_dropout"):
        if not 0.0 <= float(getattr(config, name)) < 1.0:
            raise _refuse(name, getattr(config, name), "a dropout is in [0, 1)")
    sliding = _rope(config, "sliding_attention")
    if sliding["rope_type"] != "default":
        raise _refuse("rope_parameters.sliding_attention.rope_type", sliding["rope_type"],
                      "megamlm's sliding-window layers use plain RoPE")
    try:
        RopeScaling.from_dict(_rope(config, "full_attention"))
    except ValueError as err:
        raise _refuse("rope_parameters.full_attention", _rope(config, "full_attention"), str(err)) from None


def window_of(config) -> int:
    """megamlm's sliding_window W of a ModernBERT config (see the module's docstring)."""
    half = int(config.local_attention) // 2
    return half if config.model_type == DECODER_TYPE else half + 1


def modernbert_fields(config, max_seq_length: int | None = None, untie: bool = False) -> dict:
    """The ModelArgs keywords of a ModernBERT or ModernBERT-decoder config (checked with check_modernbert first)."""
    check_modernbert(config)
    kinds = [_HF_KINDS[kind] for kind in config.layer_types]
    sliding = "sliding" in kinds
    full = _rope(config, "full_attention")
    local = source_float(_rope(config, "sliding_attention").get("rope_theta", full["rope_theta"]))
    heads = config.num_attention_heads
    return dict(
        vocab_size=config.vocab_size, num_layers=config.num_hidden_layers, hidden_size=config.hidden_size,
        ffn_hidden_size=config.intermediate_size, num_attention_heads=heads, num_query_groups=heads,
        max_seq_length=max_seq_length or config.max_position_embeddings,
        rope_theta=source_float(full["rope_theta"]), norm_epsilon=source_float(config.norm_eps),
        init_method_std=source_float(config.initializer_range), head_dim=config.hidden_size // heads,
        attention_bias=bool(config.attention_bias), attention_out_bias=bool(config.attention_bias),
        rope_scaling=RopeScaling.from_dict(full),
        tie_word_embeddings=bool(config.tie_word_embeddings) and not untie,
        mlp_activation=ACTIVATIONS[config.hidden_activation],
        sliding_window=window_of(config) if sliding else None,
        layer_types=",".join(kinds) if sliding else None,
        local_rope_theta=local if sliding and local != source_float(full["rope_theta"]) else None,
        norm_type="layernorm", norm_bias=bool(config.norm_bias), embedding_norm=True, prediction_head=True,
        classifier_bias=bool(config.classifier_bias), decoder_bias=bool(config.decoder_bias),
        mlp_bias=bool(config.mlp_bias), attention_dropout=float(config.attention_dropout),
        mlp_dropout=float(config.mlp_dropout), embedding_dropout=float(config.embedding_dropout),
        init_method="modernbert", initializer_cutoff_factor=source_float(config.initializer_cutoff_factor or 3.0),
    )


def modernbert_model_args(config, max_seq_length: int | None = None, untie: bool = False) -> ModelArgs:
    """The megamlm shape of a ModernBERT-family config."""
    return ModelArgs(**modernbert_fields(config, max_seq_length, untie))


_REQUIRED = (("a LayerNorm block (norm_type layernorm)", lambda a: a.norm_type == "layernorm"),
             ("an embedding norm (embedding_norm)", lambda a: a.embedding_norm),
             ("the prediction head (prediction_head)", lambda a: a.prediction_head))
_UNHELD = (("query/key norms (qk_norm)", lambda a: a.qk_norm),
           ("norms on the attention and MLP outputs (sublayer_output_norms)", lambda a: a.sublayer_output_norms),
           ("scaled embeddings (scale_embeddings)", lambda a: a.scale_embeddings),
           ("a query pre-attention scalar", lambda a: a.query_pre_attn_scalar is not None),
           ("grouped-query attention (num_query_groups < num_attention_heads)",
            lambda a: a.num_query_groups != a.num_attention_heads),
           ("heads of another width than hidden / heads (head_dim)",
            lambda a: a.head_dim * a.num_attention_heads != a.hidden_size))


def modernbert_export_problem(arch: str, args: ModelArgs) -> str | None:
    """Why ``--arch modernbert`` / ``modernbert-decoder`` cannot hold ``args`` (one line naming what is missing or
    what it has no place for), or None."""
    lacking = [name for name, has in _REQUIRED if not has(args)]
    if lacking:
        return (f"--arch {arch}: the model lacks {', '.join(lacking)}, which every ModernBERT block has; export it "
                "with --arch eurobert (or the decoder family it came from)")
    present = [name for name, has in _UNHELD if has(args)]
    if present:
        return f"--arch {arch} cannot hold {present[0]} of this model (ModernBERT has none); export it with --arch " \
               "eurobert or llama"
    return None


def _hf_window(arch: str, args: ModelArgs) -> int:
    """transformers' local_attention for megamlm's window (module docstring); 128, its default, without one."""
    if not args.has_sliding_layers():
        return 128
    return 2 * args.sliding_window if arch == DECODER_TYPE else 2 * (args.sliding_window - 1)


def modernbert_hf_config(arch: str, args: ModelArgs, ids, extra: dict | None = None):
    """The ModernBertConfig (``arch`` modernbert) or ModernBertDecoderConfig (modernbert-decoder) of ``args``;
    ``extra``: settings kept from an imported source that megamlm's model does not use (classifier_pooling...)."""
    import transformers

    problem = modernbert_export_problem(arch, args)
    if problem:
        raise ConversionError(problem)
    kinds = [args.layer_type(i) for i in range(args.num_layers)]
    local = {"rope_type": "default", "rope_theta": float(args.local_rope_theta or args.rope_theta)}
    token_ids = {"pad_token_id": ids.pad_id, "bos_token_id": ids.bos_id, "eos_token_id": ids.eos_id,
                 "cls_token_id": ids.bos_id, "sep_token_id": ids.eos_id}
    settings = dict(
        vocab_size=args.vocab_size, hidden_size=args.hidden_size, intermediate_size=args.ffn_hidden_size,
        num_hidden_layers=args.num_layers, num_attention_heads=args.num_attention_heads,
        hidden_activation=_HF_ACTIVATION[args.mlp_activation], max_position_embeddings=args.max_seq_length,
        initializer_range=args.init_method_std, initializer_cutoff_factor=args.initializer_cutoff_factor,
        norm_eps=args.norm_epsilon, norm_bias=args.norm_bias,
        attention_bias=args.attention_bias or args.attention_out_bias, attention_dropout=args.attention_dropout,
        layer_types=[f"{kind}_attention" for kind in kinds], local_attention=_hf_window(arch, args),
        rope_parameters={"full_attention": rope_parameters(args), "sliding_attention": local},
        embedding_dropout=args.embedding_dropout, mlp_bias=args.mlp_bias, mlp_dropout=args.mlp_dropout,
        decoder_bias=args.decoder_bias, classifier_bias=args.classifier_bias,
        tie_word_embeddings=args.tie_word_embeddings, architectures=[EXPORT_ARCHS[arch].architecture],
        **{key: value for key, value in token_ids.items() if value is not None}, **(extra or {}),
    )
    if arch == DECODER_TYPE:
        return transformers.ModernBertDecoderConfig(**settings)
    return transformers.ModernBertConfig(**settings)


KEPT_SETTINGS = {ENCODER_TYPE: ("classifier_pooling", "classifier_dropout"), DECODER_TYPE: ("classifier_dropout",)}
"""Settings of a source config that megamlm's model does not use but transformers' fine-tuning heads do: an import
records them (``imported_from.hf_settings``) and an export of the same family writes them back, so that import then
export is the same model."""


def kept_settings(config) -> dict:
    """The KEPT_SETTINGS of an imported ModernBERT-family config ({} for another family)."""
    names = KEPT_SETTINGS.get(getattr(config, "model_type", None), ())
    return {name: getattr(config, name) for name in names if hasattr(config, name)}


EXPORT_DEFAULTS = {ENCODER_TYPE: {"classifier_pooling": "mean"}, DECODER_TYPE: {}}
"""What an export writes where no import kept a value: the released ModernBERT's mean pooling for its sequence
classifier (transformers' default is cls)."""


def kept_settings_of(record, arch: str) -> dict:
    """The kept settings a megamlm checkpoint's import recorded, those the ``arch`` export's config has (else
    EXPORT_DEFAULTS)."""
    kept = ((record.config.get("imported_from") or {}).get("hf_settings") or {})
    return {**EXPORT_DEFAULTS[arch], **{name: value for name, value in kept.items() if name in KEPT_SETTINGS[arch]}}


def modernbert_use(arch: str, args: ModelArgs) -> str:
    """The model card's "Use" section of a ModernBERT-family export: the classes it loads as, and its window."""
    window = ""
    if args.has_sliding_layers():
        reach = (f"attend the last {args.sliding_window} tokens" if arch == DECODER_TYPE
                 else f"attend |i - j| < {args.sliding_window}")
        window = (f"\n\nIts sliding-window layers {reach} as megamlm trained them; config.json writes "
                  f"`local_attention: {_hf_window(arch, args)}`, which transformers' "
                  f"{'decoder' if arch == DECODER_TYPE else 'encoder'} reads as that same window.")
    if arch == DECODER_TYPE:
        return f"""## Use

`ModernBertDecoderForCausalLM` (transformers, no remote code): `pipeline("text-generation", model=path)`.{window}
"""
    return f"""## Use

`ModernBertForMaskedLM` (transformers, no remote code):

```python
from transformers import AutoModel, AutoModelForSequenceClassification, pipeline
fill = pipeline("fill-mask", model=path)                      # ModernBertForMaskedLM
encoder = AutoModel.from_pretrained(path)                     # ModernBertModel: hidden states
classifier = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
```

sentence-transformers loads it too (`SentenceTransformer(path)`, {SENTENCE_POOLING} pooling of the hidden states);
loading the encoder alone reports the MLM head's tensors (`head.*`, `decoder.bias`) as unexpected, as for any
masked-LM checkpoint (`convert_to_hf.py --sentence-transformers` writes the encoder alone, which loads without
them).{window}
"""


HEAD_PARTS = ("head.", "lm_head.bias")
"""The MLM head's tensors, which a ModernBertModel folder (an embedder built on ModernBERT) does not hold."""


def fresh_head(args: ModelArgs, names: list[str], seed: int = 0) -> dict[str, torch.Tensor]:
    """The MLM head tensors ``names`` as megamlm's ModernBERT init starts them (the prediction head's dense layer a
    truncated normal, its norm 1 and biases 0, the LM head's bias 0), for an import of a model without its head."""
    holder = torch.nn.ModuleDict({"head": PredictionHead(args)})
    init_weights(holder, args, torch.Generator().manual_seed(seed))
    state = {**holder.state_dict(), "lm_head.bias": torch.zeros(args.vocab_size)}
    return {name: state[name].detach().clone() for name in names}

"""Model shapes, the backends a model computes with, and the named presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, get_args

from megamlm.kernel_backends import KernelBackend
from megamlm.model.attention_table import ATTENTION_BACKENDS
from megamlm.model.rope_scaling import RopeScaling

MLPActivation = Literal["swiglu", "geglu", "geglu_erf"]
"""The gated MLP's activation: silu (SwiGLU), tanh-approximated gelu (GeGLU, Gemma) or exact erf gelu (ModernBERT)."""
NormType = Literal["rmsnorm", "layernorm"]
"""Every norm of the model: RMSNorm (Llama) or LayerNorm (ModernBERT; with or without a bias, ``norm_bias``)."""
InitMethod = Literal["megatron", "modernbert"]
"""The weight init: Megatron's normal init, or ModernBERT's truncated normal (transformers' ``_init_weights``)."""
LAYER_TYPES = ("full", "sliding")
"""The attention of a layer: over the whole sequence, or a sliding window of ``sliding_window`` tokens."""
AttentionBackend = Literal[ATTENTION_BACKENDS]
"""``auto`` and the names of ``megamlm.model.attention_table.ATTENTION_TABLE``; ``auto`` is resolved per attention
mode before the model is built."""


@dataclass(frozen=True)
class ModelArgs:
    """The resolved shape of a EuroBERT/Llama-style encoder (compared on resume, so every field is part of it).

    The fields after ``init_method_std`` are features of imported decoders, each off by default; a run record
    written before a field existed reads as its default (``shape_record``).
    """

    vocab_size: int
    """Embedding rows (the tokenizer's ids, padded)."""
    num_layers: int
    """Transformer blocks."""
    hidden_size: int
    """Hidden width."""
    ffn_hidden_size: int
    """SwiGLU inner width."""
    num_attention_heads: int
    """Query heads."""
    num_query_groups: int
    """Key/value heads for grouped-query attention."""
    max_seq_length: int
    """Tokens per sample; also the longest sequence the model accepts."""
    rope_theta: float = 10_000.0
    """Rotary embedding base."""
    norm_epsilon: float = 1e-5
    """Epsilon of every norm (RMSNorm or LayerNorm)."""
    init_method_std: float = 0.02
    """Std of the normal weight init (output projections scaled by 1/sqrt(2*layers))."""
    head_dim: int | None = None
    """Width of one attention head; None: hidden_size / num_attention_heads (resolved on construction)."""
    attention_bias: bool = False
    """Biases on q_proj, k_proj and v_proj (Qwen2)."""
    attention_out_bias: bool = False
    """A bias on o_proj (with attention_bias: Llama's and EuroBERT's attention_bias=true)."""
    rope_scaling: RopeScaling | None = None
    """RoPE frequency scaling (Llama 3.1/3.2's llama3, linear, YaRN); None: plain RoPE. A dict is converted."""
    tie_word_embeddings: bool = False
    """The LM head is the embedding matrix (one parameter)."""
    qk_norm: bool = False
    """RMSNorm over each query and key head (a head_dim weight each, shared by the heads) before RoPE (Qwen3,
    Gemma 3, OLMo 2)."""
    sublayer_output_norms: bool = False
    """RMSNorm on the attention output and on the MLP output before each residual add, beside the input norms
    (Gemma 3's four norms per block)."""
    mlp_activation: MLPActivation = "swiglu"
    """The gated MLP: swiglu (silu(gate) * up, Llama) or geglu (tanh-approximated gelu(gate) * up, Gemma)."""
    scale_embeddings: bool = False
    """Multiply the embeddings by sqrt(hidden size), rounded to the model's precision (Gemma)."""
    query_pre_attn_scalar: int | None = None
    """Attention scale 1/sqrt(this) (Gemma 3's query_pre_attn_scalar); None: 1/sqrt(head_dim)."""
    sliding_window: int | None = None
    """Tokens a sliding-window layer sees: bidirectional |i - j| < W, causal the last W (Gemma 3); None: none."""
    layer_types: str | None = None
    """Comma-separated attention type of each layer, full or sliding (needs --sliding-window); None: all full."""
    local_rope_theta: float | None = None
    """RoPE base of the sliding-window layers (Gemma 3's local base, without scaling); None: --rope-theta."""
    norm_type: NormType = "rmsnorm"
    """Every norm of the model (block norms, final norm, embedding norm, prediction head norm): rmsnorm or layernorm
    (ModernBERT)."""
    norm_bias: bool = False
    """A bias on every LayerNorm (ModernBERT's norm_bias; its released models have none)."""
    embedding_norm: bool = False
    """A norm after the embedding (``embed_norm``, ModernBERT); layer 0 then has no input norm."""
    prediction_head: bool = False
    """ModernBERT's prediction head (``head``: dense, exact GELU, norm) on the final hidden states before the LM
    head; the sparse loss applies it to the predicted positions only."""
    classifier_bias: bool = False
    """A bias on the prediction head's dense layer (ModernBERT's classifier_bias)."""
    decoder_bias: bool = False
    """A bias on the LM head (``lm_head.bias``: ModernBERT's decoder_bias, true in its released models)."""
    mlp_bias: bool = False
    """Biases on the MLP's projections (ModernBERT's mlp_bias)."""
    attention_dropout: float = 0.0
    """Dropout on the attention probabilities and on the attention output, in training (ModernBERT's)."""
    mlp_dropout: float = 0.0
    """Dropout on the MLP's activated hidden before its down projection, in training (ModernBERT's)."""
    embedding_dropout: float = 0.0
    """Dropout after the embedding (and its norm), in training (ModernBERT's)."""
    init_method: InitMethod = "megatron"
    """The weight init: megatron (normal, output projections scaled by 1/sqrt(2*layers)) or modernbert (its truncated
    normal: stds in/out/embedding as transformers' ModernBERT, cut at initializer_cutoff_factor stds)."""
    initializer_cutoff_factor: float = 2.0
    """ModernBERT's init: the truncated normal is cut at this many stds."""

    def __post_init__(self) -> None:
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", RopeScaling.from_dict(self.rope_scaling))
        if isinstance(self.layer_types, (list, tuple)):
            object.__setattr__(self, "layer_types", ",".join(self.layer_types))
        for name, what, literal in (("mlp_activation", "MLP activation", MLPActivation),
                                    ("norm_type", "norm type", NormType), ("init_method", "init method", InitMethod)):
            if getattr(self, name) not in get_args(literal):
                raise ValueError(f"unknown {what} {getattr(self, name)!r}; choose one of "
                                 f"{', '.join(get_args(literal))}")
        for name in ("attention_dropout", "mlp_dropout", "embedding_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.layer_types is not None:
            kinds = self.layer_types.split(",")
            unknown = sorted(set(kinds) - set(LAYER_TYPES))
            if unknown:
                raise ValueError(f"unknown layer type {unknown[0]!r} in layer_types; each layer is one of "
                                 f"{', '.join(LAYER_TYPES)}")
            if "sliding" in kinds and not self.sliding_window:
                raise ValueError("layer_types has sliding layers but sliding_window is not set")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"sliding_window must be at least 1, got {self.sliding_window}")

    def layer_type(self, index: int) -> str:
        """``full`` or ``sliding``: the attention of layer ``index`` (with a window and no layer_types: sliding)."""
        if self.layer_types is None:
            return "sliding" if self.sliding_window else "full"
        kinds = self.layer_types.split(",")
        if len(kinds) != self.num_layers:
            raise ValueError(f"layer_types names {len(kinds)} layers, the model has {self.num_layers}")
        return kinds[index]

    def has_input_norm(self, index: int) -> bool:
        """Whether layer ``index`` normalises its input (not layer 0 after an embedding norm: ModernBERT's Identity)."""
        return not (self.embedding_norm and index == 0)

    def has_sliding_layers(self) -> bool:
        return any(self.layer_type(i) == "sliding" for i in range(self.num_layers))

    def to_dict(self) -> dict:
        out = asdict(self)
        out["rope_scaling"] = self.rope_scaling.to_dict() if self.rope_scaling is not None else None
        return out


def global_every_layer_types(num_layers: int, every: int) -> str:
    """``layer_types`` with a full-attention layer every ``every`` layers and sliding ones between (ModernBERT's
    global_attn_every_n_layers: layer i is full iff i % every == 0)."""
    return ",".join("full" if i % every == 0 else "sliding" for i in range(num_layers))


def shape_record(record: dict) -> dict:
    """A recorded ``ModelArgs.to_dict()`` with every field this version knows (absent: the default), for comparing
    a checkpoint's shape with a launch's; a record that does not describe a shape is returned as it is."""
    try:
        return ModelArgs(**record).to_dict()
    except (TypeError, ValueError):
        return dict(record)


@dataclass(frozen=True)
class Backends:
    """How a model computes, not what it is: kept out of ``ModelArgs`` (the shape, compared on resume).

    A model is built with its backends (``Transformer(args, backends=Backends(...))``) and hands them to
    every block, norm, attention and MLP call, so models with different backends can share a process.
    Building a ``Backends`` checks both names, and that the packages they need import, before any work.
    """

    attention: AttentionBackend = "sdpa"
    kernels: KernelBackend = "auto"
    auto_attention: tuple[str, str] = ("sdpa", "sdpa")
    """With ``attention="auto"``: the backends measured fastest for (bidirectional, causal) attention, set by
    ``megamlm.model.attention_probe.resolve_auto_attention`` (sdpa for both until then, and on CPU)."""

    def __post_init__(self) -> None:
        for kind, value, literal in (("attention", self.attention, AttentionBackend),
                                     ("kernel", self.kernels, KernelBackend),
                                     ("attention", self.auto_attention[0], AttentionBackend),
                                     ("attention", self.auto_attention[1], AttentionBackend)):
            if value not in get_args(literal):
                raise ValueError(f"unknown {kind} backend {value!r}; choose one of {', '.join(get_args(literal))}")
        if "auto" in self.auto_attention:
            raise ValueError("auto_attention holds concrete backends, not 'auto'")

    def attention_for(self, causal: bool) -> str:
        """The concrete attention backend of a causal or bidirectional call."""
        return self.auto_attention[int(causal)] if self.attention == "auto" else self.attention


# The paper's sizes (arXiv 2507.00994, Table 5) with the Llama 3 vocabulary, and a CPU-sized `tiny`
# whose heads, KV heads and layers divide by 2 and 4 so that parallel tests can split it.
# `vocab_size: None` means "the tokenizer's size, padded to --make-vocab-size-divisible-by".
PRESETS: dict[str, dict] = {
    "tiny": dict(vocab_size=None, num_layers=4, hidden_size=128, ffn_hidden_size=384,
                 num_attention_heads=8, num_query_groups=4, max_seq_length=128),
    "210m": dict(vocab_size=128_256, num_layers=12, hidden_size=768, ffn_hidden_size=3072,
                 num_attention_heads=12, num_query_groups=12, max_seq_length=2048),
    "610m": dict(vocab_size=128_256, num_layers=26, hidden_size=1152, ffn_hidden_size=4096,
                 num_attention_heads=18, num_query_groups=6, max_seq_length=2048),
    "1b": dict(vocab_size=128_256, num_layers=26, hidden_size=1728, ffn_hidden_size=4096,
               num_attention_heads=18, num_query_groups=6, max_seq_length=2048),
}

MODERNBERT_BLOCK: dict = dict(
    norm_type="layernorm", embedding_norm=True, prediction_head=True, decoder_bias=True, mlp_activation="geglu_erf",
    tie_word_embeddings=True, init_method="modernbert", rope_theta=160_000.0, local_rope_theta=10_000.0,
    sliding_window=65)
"""ModernBERT's block as its released configs set it (answerdotai/ModernBERT-base/-large config.json): LayerNorm
without bias, embedding norm, prediction head, tied decoder with a bias, erf GeGLU, its init, a global layer every 3
(RoPE base 160k) and sliding ones between (local_attention 128: |i - j| <= 64, megamlm's window 65, base 10k)."""


def _modernbert(num_layers: int, every: int = 3, **shape) -> dict:
    return dict(MODERNBERT_BLOCK, num_layers=num_layers, layer_types=global_every_layer_types(num_layers, every),
                **shape)


# ModernBERT's released shapes (vocabulary 50,368, 8,192 tokens), and a CPU-sized block whose heads and layers divide
# by 2 and 4, with a window (|i - j| <= 16) smaller than its sequence and a global layer every 2.
PRESETS.update({
    "modernbert-base": _modernbert(22, vocab_size=50_368, hidden_size=768, ffn_hidden_size=1152,
                                   num_attention_heads=12, num_query_groups=12, max_seq_length=8192),
    "modernbert-large": _modernbert(28, vocab_size=50_368, hidden_size=1024, ffn_hidden_size=2624,
                                    num_attention_heads=16, num_query_groups=16, max_seq_length=8192),
    "modernbert-tiny": _modernbert(4, every=2, vocab_size=None, hidden_size=128, ffn_hidden_size=192,
                                   num_attention_heads=8, num_query_groups=8, max_seq_length=128,
                                   sliding_window=17),
})


def pad_vocab_size(size: int, multiple: int) -> int:
    """Round ``size`` up to a multiple of ``multiple`` (Megatron's --make-vocab-size-divisible-by)."""
    return ((size + multiple - 1) // multiple) * multiple

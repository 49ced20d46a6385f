"""Model shapes, the backends a model computes with, and the named presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, get_args

from megamlm.kernel_backends import KernelBackend
from megamlm.model.attention_table import ATTENTION_BACKENDS
from megamlm.model.rope_scaling import RopeScaling

MLPActivation = Literal["swiglu", "geglu"]
"""The gated MLP's activation: silu (SwiGLU) or tanh-approximated gelu (GeGLU)."""
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
    """RMSNorm epsilon."""
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

    def __post_init__(self) -> None:
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", RopeScaling.from_dict(self.rope_scaling))
        if isinstance(self.layer_types, (list, tuple)):
            object.__setattr__(self, "layer_types", ",".join(self.layer_types))
        if self.mlp_activation not in get_args(MLPActivation):
            raise ValueError(f"unknown MLP activation {self.mlp_activation!r}; choose one of "
                             f"{', '.join(get_args(MLPActivation))}")
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

    def has_sliding_layers(self) -> bool:
        return any(self.layer_type(i) == "sliding" for i in range(self.num_layers))

    def to_dict(self) -> dict:
        out = asdict(self)
        out["rope_scaling"] = self.rope_scaling.to_dict() if self.rope_scaling is not None else None
        return out


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


def pad_vocab_size(size: int, multiple: int) -> int:
    """Round ``size`` up to a multiple of ``multiple`` (Megatron's --make-vocab-size-divisible-by)."""
    return ((size + multiple - 1) // multiple) * multiple

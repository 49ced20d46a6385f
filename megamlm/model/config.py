"""Model shapes, the backends a model computes with, and the named presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, get_args

from megamlm.model.attention_backends import ATTENTION_BACKENDS
from megamlm.model.rope import RopeScaling

KernelBackend = Literal["auto", "triton", "chunked", "reference"]
"""auto: Triton on GPU tensors, the chunked LM-head loss on CPU; see ``megamlm.kernels``."""
AttentionBackend = Literal[ATTENTION_BACKENDS]
"""``auto`` and the names of ``megamlm.model.attention_backends.ATTENTION_TABLE``; ``auto`` is resolved per attention
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

    def __post_init__(self) -> None:
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", RopeScaling.from_dict(self.rope_scaling))

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

"""The EuroBERT/Llama-style transformer, single-device.

Module names follow Hugging Face's Llama/EuroBERT (``embed_tokens``, ``layers.N.self_attn.q_proj``,
``input_layernorm``, ``mlp.gate_proj``, ``norm``, ``lm_head``) so that conversion is one-to-one.
Parallelism is applied to a built model from outside (``megamlm.parallel``); ``layers`` is a
ModuleDict so that a pipeline stage can drop the layers it does not own and keep stable names,
and ``embed_tokens``/``norm``/``lm_head`` may be set to None on stages that do not own them.

The model is built with its ``Backends`` (attention and kernel implementations); each block, norm,
attention and MLP keeps them and passes them on every call, so nothing is read from process state.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from megamlm import kernels
from megamlm.model.attention_backends import attention
from megamlm.model.attention_dropout import attention_mask, dropout_attention
from megamlm.model.config import Backends, ModelArgs
from megamlm.model.init import init_weights
from megamlm.model.norms import DEFAULT_BACKENDS, RMSNorm, build_norm
from megamlm.model.prediction_head import PredictionHead
from megamlm.model.rope import rotary_tables

_ACTIVATIONS = {"swiglu": kernels.swiglu, "geglu": kernels.geglu, "geglu_erf": kernels.geglu_erf}
"""The gated MLP's activation(gate, up) by ``ModelArgs.mlp_activation``."""


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, backends: Backends = DEFAULT_BACKENDS, window: int | None = None):
        super().__init__()
        self.backends = backends
        self.n_heads = args.num_attention_heads
        self.n_kv_heads = args.num_query_groups
        self.head_dim = args.head_dim
        self.q_proj = nn.Linear(args.hidden_size, self.n_heads * self.head_dim, bias=args.attention_bias)
        self.k_proj = nn.Linear(args.hidden_size, self.n_kv_heads * self.head_dim, bias=args.attention_bias)
        self.v_proj = nn.Linear(args.hidden_size, self.n_kv_heads * self.head_dim, bias=args.attention_bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, args.hidden_size, bias=args.attention_out_bias)
        if args.qk_norm:  # one head_dim weight each, applied to every head before RoPE
            self.q_norm = RMSNorm(self.head_dim, args.norm_epsilon, backends)
            self.k_norm = RMSNorm(self.head_dim, args.norm_epsilon, backends)
        else:
            self.q_norm = self.k_norm = None
        self.window = window
        self.scale = args.query_pre_attn_scalar ** -0.5 if args.query_pre_attn_scalar else None
        self.dropout = args.attention_dropout

    def forward(self, x, cos, sin, causal: bool, document_ids=None):
        batch, seq, _ = x.shape
        # -1 instead of the head count: under tensor parallelism the projections hold a shard of heads.
        q = self.q_proj(x).view(batch, seq, -1, self.head_dim)
        k = self.k_proj(x).view(batch, seq, -1, self.head_dim)
        v = self.v_proj(x).view(batch, seq, -1, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = kernels.apply_rotary(q, cos, sin, backend=self.backends.kernels)
        k = kernels.apply_rotary(k, cos, sin, backend=self.backends.kernels)
        if self.training and self.dropout > 0:
            mask = attention_mask(seq, causal, document_ids, self.window, x.device)
            out = dropout_attention(q, k, v, mask, self.scale, self.dropout)
        else:
            out = attention(q, k, v, causal=causal, document_ids=document_ids,
                            backend=self.backends.attention_for(causal), window=self.window, scale=self.scale)
        out = self.o_proj(out.reshape(batch, seq, -1))
        return F.dropout(out, self.dropout, self.training) if self.dropout else out


class MLP(nn.Module):
    def __init__(self, args: ModelArgs, backends: Backends = DEFAULT_BACKENDS):
        super().__init__()
        self.backends = backends
        # gate_proj is the activated half (ModernBERT's Wi is [gate_proj | up_proj]).
        self.gate_proj = nn.Linear(args.hidden_size, args.ffn_hidden_size, bias=args.mlp_bias)
        self.up_proj = nn.Linear(args.hidden_size, args.ffn_hidden_size, bias=args.mlp_bias)
        self.down_proj = nn.Linear(args.ffn_hidden_size, args.hidden_size, bias=args.mlp_bias)
        self.activation = _ACTIVATIONS[args.mlp_activation]
        self.dropout = args.mlp_dropout

    def forward(self, x):
        hidden = self.activation(self.gate_proj(x), self.up_proj(x), backend=self.backends.kernels)
        return self.down_proj(F.dropout(hidden, self.dropout, self.training) if self.dropout else hidden)


class TransformerBlock(nn.Module):
    """Pre-norm block; ``post_attention_layernorm`` is the MLP's input norm (Llama's name). With
    ``sublayer_output_norms`` the attention and MLP outputs are normalised too before each residual add
    (``attn_output_layernorm``, ``mlp_output_layernorm``: Gemma 3's post_attention/post_feedforward norms).
    A sliding-window layer (``sliding``) attends within ``args.sliding_window`` tokens with the local RoPE tables.
    After an embedding norm, layer 0 has no input norm (``input_layernorm`` None: ModernBERT's Identity)."""

    def __init__(self, args: ModelArgs, backends: Backends = DEFAULT_BACKENDS, layer_index: int = 0):
        super().__init__()
        self.backends = backends
        self.sliding = args.layer_type(layer_index) == "sliding"
        self.input_layernorm = build_norm(args, backends) if args.has_input_norm(layer_index) else None
        self.self_attn = Attention(args, backends, window=args.sliding_window if self.sliding else None)
        self.post_attention_layernorm = build_norm(args, backends)
        self.mlp = MLP(args, backends)
        if args.sublayer_output_norms:
            self.attn_output_layernorm = build_norm(args, backends)
            self.mlp_output_layernorm = build_norm(args, backends)
        else:
            self.attn_output_layernorm = self.mlp_output_layernorm = None

    def forward(self, x, cos, sin, causal: bool, document_ids=None):
        normed = self.input_layernorm(x) if self.input_layernorm is not None else x
        out = self.self_attn(normed, cos, sin, causal, document_ids)
        x = x + (self.attn_output_layernorm(out) if self.attn_output_layernorm is not None else out)
        out = self.mlp(self.post_attention_layernorm(x))
        return x + (self.mlp_output_layernorm(out) if self.mlp_output_layernorm is not None else out)


class Transformer(nn.Module):
    """Embedding (-> ``embed_norm``) -> blocks -> final norm; ``head`` (ModernBERT's prediction head) and
    ``lm_head`` are applied by the loss (sparse prediction), or by ``logits`` for dense logits.

    With ``args.tie_word_embeddings`` the LM head's weight is the embedding's parameter (listed once by
    ``parameters()``, under both names in ``state_dict()``).

    ``backends`` (default ``Backends()``: sdpa attention, auto kernels) is kept as ``model.backends``;
    the loss outside the model takes ``model.backends.kernels``.
    """

    def __init__(self, args: ModelArgs, backends: Backends = DEFAULT_BACKENDS):
        super().__init__()
        if not isinstance(backends, Backends):
            raise TypeError(f"backends must be a megamlm.model.config.Backends, got {type(backends).__name__}")
        self.args = args
        self.backends = backends
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.embed_norm = build_norm(args, backends) if args.embedding_norm else None
        self.layers = nn.ModuleDict({str(i): TransformerBlock(args, backends, i) for i in range(args.num_layers)})
        self.norm = build_norm(args, backends)
        self.head = PredictionHead(args, backends) if args.prediction_head else None
        self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=args.decoder_bias)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        cos, sin = rotary_tables(args.head_dim, args.max_seq_length, args.rope_theta, args.rope_scaling)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        if args.local_rope_theta is not None:  # the sliding-window layers' own base, unscaled (Gemma 3)
            cos, sin = rotary_tables(args.head_dim, args.max_seq_length, args.local_rope_theta)
        self.register_buffer("rope_cos_local", cos, persistent=False)
        self.register_buffer("rope_sin_local", sin, persistent=False)
        # sqrt(hidden) rounded to the embedding's precision, as Gemma multiplies (see embed()).
        self.embed_scale = ({dtype: torch.tensor(math.sqrt(args.hidden_size), device="cpu").to(dtype).item()
                             for dtype in (torch.float32, torch.bfloat16, torch.float16)}
                            if args.scale_embeddings else None)
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """``args.init_method``'s init (megamlm/model/init.py): Megatron's normal or ModernBERT's truncated normal."""
        init_weights(self, self.args, generator)

    def forward(self, input_ids: torch.Tensor, causal: bool, document_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None):
        """input_ids (batch, seq) -> final hidden states (batch, seq, hidden).

        On a pipeline stage without ``embed_tokens`` the input is already a hidden-state tensor.
        ``causal`` picks the attention mode for this call (CLM: True, MLM: False). ``position_ids`` (batch, seq):
        each token's RoPE position (positions restarting at every document); None: 0..seq-1.
        """
        h = self.embed_input(input_ids) if self.embed_tokens is not None else input_ids
        seq = h.shape[1]
        if seq > self.args.max_seq_length:
            raise ValueError(f"sequence of {seq} tokens exceeds the model's {self.args.max_seq_length}")
        at = slice(None, seq) if position_ids is None else position_ids
        tables = ((self.rope_cos[at], self.rope_sin[at]), (self.rope_cos_local[at], self.rope_sin_local[at]))
        for layer in self.layers.values():
            h = layer(h, *tables[layer.sliding], causal, document_ids)
        return self.norm(h) if self.norm is not None else h

    def embed_input(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The embedding, then the embedding norm and dropout where the model has them (ModernBERT)."""
        h = self.embed(input_ids)
        if self.embed_norm is not None:
            h = self.embed_norm(h)
        return F.dropout(h, self.args.embedding_dropout, self.training) if self.args.embedding_dropout else h

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The embedding rows, times sqrt(hidden) rounded to their dtype with ``scale_embeddings``."""
        h = self.embed_tokens(input_ids)
        if self.embed_scale is None:
            return h
        return h * self.embed_scale[h.dtype]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Dense logits (the prediction head first where there is one), for inference and parity tests (training
        uses the sparse loss)."""
        return self.lm_head(self.head(hidden) if self.head is not None else hidden)


def count_parameters(model: nn.Module, include_lm_head: bool = True, local: bool = False) -> int:
    """Parameter count; ``local``: only what this rank holds (the local shard of a tensor-parallel or FSDP
    DTensor, whose ``numel`` is the whole tensor's)."""
    def numel(p) -> int:
        return p.to_local().numel() if local and hasattr(p, "to_local") else p.numel()

    return sum(numel(p) for n, p in model.named_parameters() if include_lm_head or not n.startswith("lm_head"))

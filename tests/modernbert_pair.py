"""A tiny ModernBERT (encoder or decoder) built by transformers from a config, and megamlm's model with its weights.

Imported by module name from every test folder (tests/conftest.py puts this folder on sys.path). The weights go
through megamlm/hf's key map and config translation (megamlm/hf/modernbert.py, keymaps.py), as an import does.
The configs have sliding and global layers, a window smaller than the sequence, distinct RoPE bases, and the norms
and biases are perturbed away from their init so that a misplaced one shows.
"""

from __future__ import annotations

import torch

VOCAB, HIDDEN, FFN, LAYERS, HEADS, MAX_SEQ = 96, 32, 48, 4, 4, 64
LOCAL_ATTENTION = 8
"""transformers' local_attention: the encoder's sliding layers see |i - j| <= 4, the decoder's the last 4 tokens."""
PAD, BOS, EOS, MASK = 0, 1, 2, 3
FIRST_WORD = 4
"""Token ids below this are special (never drawn as words)."""


def _config_kwargs() -> dict:
    return dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, max_position_embeddings=MAX_SEQ, local_attention=LOCAL_ATTENTION,
                global_attn_every_n_layers=2, global_rope_theta=160_000.0, local_rope_theta=10_000.0,
                pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, cls_token_id=BOS, sep_token_id=EOS,
                decoder_bias=True, tie_word_embeddings=True, attn_implementation="sdpa")


def hf_model(decoder: bool = False, seed: int = 0):
    """A random tiny ``ModernBertForMaskedLM`` (or ``ModernBertDecoderForCausalLM``), fp32."""
    import transformers

    torch.manual_seed(seed)
    if decoder:
        model = transformers.ModernBertDecoderForCausalLM(transformers.ModernBertDecoderConfig(**_config_kwargs()))
    else:
        model = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**_config_kwargs()))
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "bias")):
                p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return model


def megamlm_twin(hf, backends=None):
    """megamlm's Transformer with ``hf``'s weights (its shape from the config, as an import reads it)."""
    from megamlm.hf.keymaps import MODERNBERT, MODERNBERT_DECODER
    from megamlm.hf.modernbert import DECODER_TYPE, modernbert_model_args
    from megamlm.model.transformer import Transformer

    args = modernbert_model_args(hf.config)
    model = Transformer(args, **({"backends": backends} if backends is not None else {}))
    keymap = MODERNBERT_DECODER if hf.config.model_type == DECODER_TYPE else MODERNBERT
    state = {}
    for name, tensor in hf.state_dict().items():
        for ours, part in keymap.from_hf_tensors(name, tensor.detach().clone()):
            state[ours] = part
    model.load_state_dict(state, strict=True)
    return model

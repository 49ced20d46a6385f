"""Tiny random ModernBERT-family folders built with transformers' own classes, as a user's downloaded model.

The released models' values, read from their config.json files (answerdotai/ModernBERT-base, jhu-clsp/mmBERT-small,
the Ettin encoders and decoders): vocabulary 50,368 (mmBERT 256,000), global RoPE base 160,000 and local 10,000
(mmBERT: 160,000 for both), a 128-token local window, a global layer every 3, LayerNorm eps 1e-5 without biases, tied
embeddings with a decoder bias. RELEASED holds them tiny-fied in width and depth only; SMALL_WINDOW is a CPU-cheap
shape whose window (8) is shorter than a 32-token test sequence. ``legacy=True`` writes the released files' older
keys (global_rope_theta, local_rope_theta, global_attn_every_n_layers, layer_norm_eps, position_embedding_type)
instead of transformers 5's rope_parameters and layer_types.

Imported by name from any test folder: tests/conftest.py puts this folder on sys.path.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from decoder_families import WORDS

SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
TINY = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            pad_token_id=3, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)

RELEASED = {
    # answerdotai/ModernBERT-base (and the Ettin encoders): 22 layers of 768 there.
    "modernbert-base": dict(vocab_size=50368, global_rope_theta=160000.0, local_rope_theta=10000.0,
                            local_attention=128, global_attn_every_n_layers=3, norm_eps=1e-5, norm_bias=False,
                            max_position_embeddings=8192, position_embedding_type="absolute"),
    # jhu-clsp/mmBERT-small: the Gemma 2 vocabulary, RoPE 160k on the local layers too.
    "mmbert-small": dict(vocab_size=256000, global_rope_theta=160000.0, local_rope_theta=160000.0,
                         local_attention=128, global_attn_every_n_layers=3, norm_eps=1e-5, norm_bias=False,
                         max_position_embeddings=8192, position_embedding_type="sans_pos"),
    # jhu-clsp/ettin-decoder-*: ModernBertDecoderForCausalLM, the same block and values.
    "ettin-decoder": dict(vocab_size=50368, global_rope_theta=160000.0, local_rope_theta=10000.0,
                          local_attention=128, global_attn_every_n_layers=3, norm_eps=1e-5, norm_bias=False,
                          max_position_embeddings=8192, position_embedding_type="sans_pos", decoder=True),
}
SMALL_WINDOW = dict(vocab_size=64, global_rope_theta=1000.0, local_rope_theta=100.0, local_attention=8,
                    global_attn_every_n_layers=3, norm_eps=1e-6, max_position_embeddings=64)
"""A CPU-cheap shape with every bias on: window 8 (encoder W = 5, decoder W = 4) inside a 32-token sequence."""
BIASES = dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True, decoder_bias=True)
_LEGACY_KEYS = ("global_rope_theta", "local_rope_theta", "global_attn_every_n_layers", "position_embedding_type")


def word_tokenizer():
    """A whitespace word-level tokenizer with ModernBERT's special tokens ([CLS]=1, [SEP]=2, [PAD]=3, [MASK]=4)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS)}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.add_special_tokens(SPECIALS)
    raw.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                       special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]")


def hf_config(settings: dict):
    """The transformers config of ``settings`` (RELEASED/SMALL_WINDOW-style keys, ``decoder`` picking the class)."""
    import transformers

    settings = dict(settings)
    decoder = settings.pop("decoder", False)
    cls = transformers.ModernBertDecoderConfig if decoder else transformers.ModernBertConfig
    return cls(**{**TINY, **settings})


def save_modernbert(folder: Path, settings: dict, legacy: bool = False, seed: int = 0):
    """A random ModernBertForMaskedLM (or ModernBertDecoderForCausalLM) of ``settings`` saved with its tokenizer;
    norms and biases are perturbed so that none is trivial, and every matrix so that attention is far from uniform
    (at the init's std 0.02 a window or RoPE base off by one moves the logits by under 1e-5). Returns the model
    (eval mode)."""
    import transformers

    config = hf_config(settings)
    cls = (transformers.ModernBertDecoderForCausalLM if config.model_type == "modernbert-decoder"
           else transformers.ModernBertForMaskedLM)
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    if legacy:
        write_legacy_config(folder / "config.json", settings)
    return model


def write_legacy_config(path: Path, settings: dict) -> None:
    """Rewrite a saved config.json in the released files' older form (module docstring)."""
    config = json.loads(path.read_text())
    for key in ("rope_parameters", "layer_types", "sliding_window"):
        config.pop(key, None)
    config.update({key: settings[key] for key in _LEGACY_KEYS if key in settings})
    config["layer_norm_eps"] = config["norm_eps"]
    path.write_text(json.dumps(config, indent=2))

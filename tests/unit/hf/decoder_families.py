"""Tiny random decoders shaped like the ones people continue from, built with transformers in the test.

Each family has the features of its real configuration, at CPU size: Llama 3.2 (llama3 RoPE scaling, tied
embeddings, the Llama 3 special tokens with their reserved ones), Qwen2.5 (q/k/v biases, tied embeddings,
embedding rows beyond the tokenizer, YaRN as in its long-context setting), Mistral (a head_dim apart from
hidden / heads as in Mistral NeMo, v0.3's [control_N] tokens, untied) and SmolLM2 (tied, no mask token
and no spare rows, so the vocabulary grows). RoPE contexts are shrunk so that the scaling changes the
rotary angles of a 24-token test sequence.

Imported by name from any test folder: tests/conftest.py puts this folder on sys.path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

WORDS = ["the", "a", "house", "was", "of", "and", "to", "she", "he", "said", "not", "be", "her", "his", "it", "in",
         "that", "had", "with", "you", "for", "as", "at", "by", "on", "Elinor", "Marianne", "Emma", "Darcy", "sister"]


@dataclass(frozen=True)
class Family:
    name: str
    model_type: str
    specials: tuple[str, ...]
    roles: dict
    """bos/eos/unk token of the tokenizer (None where the family has none)."""
    config: dict
    export_arch: str
    """The causal family an export goes back to."""
    expected_mask: str
    mask_added: bool


COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)

FAMILIES = {
    "llama3.2": Family(
        "llama3.2", "llama",
        ("<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
         "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
        dict(COMMON, vocab_size=64, tie_word_embeddings=True,
             rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
        "llama", "<|reserved_special_token_0|>", False),
    "qwen2.5": Family(
        "qwen2.5", "qwen2", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        {"eos_token": "<|endoftext|>"},
        dict(COMMON, vocab_size=64, tie_word_embeddings=True, use_sliding_window=False,
             rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                              "original_max_position_embeddings": 16}),
        "qwen2", "<|mask|>", True),
    "mistral": Family(
        "mistral", "mistral", ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[control_8]", "[control_9]"),
        {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"},
        dict(COMMON, vocab_size=64, head_dim=32, tie_word_embeddings=False, sliding_window=None,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        "mistral", "[control_8]", False),
    "smollm2": Family(
        "smollm2", "llama", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        dict(COMMON, vocab_size=None, tie_word_embeddings=True,
             rope_parameters={"rope_type": "default", "rope_theta": 100000.0}),
        "llama", "<|mask|>", True),
}


# Qwen3 (q/k norms, head_dim apart from hidden / heads as in Qwen3-0.6B, tied) and Gemma 3 (q/k norms, four norms
# per block, GeGLU, scaled embeddings, query_pre_attn_scalar, sliding layers with a window of 5 < the 24-token
# test sequence and their own RoPE base, full layers, tied, a <mask> token of its own as Gemma 3's vocabulary has).
# Not in FAMILIES: their encoders do not export as EuroBERT (tests/unit/hf/test_qwen3_gemma3.py).
QK_NORM_FAMILIES = {
    "qwen3": Family(
        "qwen3", "qwen3", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        {"eos_token": "<|endoftext|>"},
        dict(COMMON, vocab_size=64, head_dim=32, tie_word_embeddings=True, attention_bias=False,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        "qwen3", "<|mask|>", True),
    "gemma3": Family(
        "gemma3", "gemma3_text", ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"),
        {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
         "mask_token": "<mask>"},
        dict(COMMON, vocab_size=64, head_dim=16, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
             query_pre_attn_scalar=24, sliding_window=5,
             layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
             rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                              "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0}}),
        "gemma3", "<mask>", False),
}


def tokenizer_of(family: Family):
    """A whitespace word-level PreTrainedTokenizerFast: the family's special tokens, then WORDS."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(family.specials + tuple(WORDS))}
    unk = family.roles.get("unk_token", family.specials[0])
    raw = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.add_special_tokens(list(family.specials))
    return PreTrainedTokenizerFast(tokenizer_object=raw, **family.roles)


def build(family: Family, folder: Path, seed: int = 0):
    """Save a random model of ``family`` with its tokenizer into ``folder``; returns the transformers model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tokenizer = tokenizer_of(family)
    settings = dict(family.config)
    settings["vocab_size"] = settings["vocab_size"] or len(tokenizer)
    settings.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if tokenizer.pad_token_id is not None:
        settings["pad_token_id"] = tokenizer.pad_token_id
    config = AutoConfig.for_model(family.model_type, **settings)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # non-trivial norms and biases, so a dropped or swapped one shows in the logits,
        for name, p in model.named_parameters():  # and large q/k weights, so that attention is far from uniform
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.5)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.normal_(0.0, 0.3)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return model


def word_ids(family: Family, count: int, length: int, seed: int) -> torch.Tensor:
    """(count, length) ids of random words (no special tokens)."""
    generator = torch.Generator().manual_seed(seed)
    first = len(family.specials)
    return torch.randint(first, first + len(WORDS), (count, length), generator=generator)

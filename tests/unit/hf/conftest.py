"""Tiny megamlm checkpoints written the way the trainer writes them, and tiny random Hugging Face models
and tokenizers created in the test (never downloaded). Helpers reach tests through the `kit` fixture."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import helpers
import pytest
import torch
from decoder_families import WORDS
from helpers import tiny_args

from megamlm.checkpoint import save_checkpoint
from megamlm.config import config_from_settings
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer

REPO = Path(__file__).resolve().parents[3]
AUSTEN_TOKENIZER = REPO / "megamlm" / "assets" / "austen" / "tokenizer.json"
AUSTEN_IDS = {"vocab_size": 8192, "bos_id": 0, "eos_id": 1, "pad_id": 2, "mask_id": 3}

TINY = tiny_args(vocab_size=8192, hidden_size=64, ffn_hidden_size=160, max_seq_length=64, rope_theta=5000.0,
                 norm_epsilon=1e-6)


def random_model(args: ModelArgs = TINY, seed: int = 0) -> Transformer:
    """helpers.random_model (non-trivial norms), of TINY unless told."""
    return helpers.random_model(args, seed)


def write_checkpoint(save_dir: Path, model: Transformer, step: int = 7, consumed: int = 56,
                     tokenizer: dict | None = None, objective: str = "clm_then_mlm", **record_overrides) -> Path:
    """A checkpoint as the trainer saves it; ``record_overrides`` replace entries of its config.json."""
    cfg = config_from_settings({"objective": {"objective": objective}, "training": {"train_iters": 10}})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    record = {
        "config": cfg.to_dict(), "model_args": model.args.to_dict(), "switch_step": 2,
        "data_path": ["/data/austen_text_document"], "seq_length": model.args.max_seq_length,
        "tokenizer": {"path": str(AUSTEN_TOKENIZER), **(tokenizer or AUSTEN_IDS)},
        **record_overrides,
    }
    return save_checkpoint(save_dir, step, model, optimizer, {"consumed_samples": consumed}, record)


SPECIALS = ["<unk>", "<s>", "</s>"]


def word_tokenizer(with_mask: bool = False):
    """A whitespace word-level PreTrainedTokenizerFast: specials, then WORDS (mask token optional)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = SPECIALS + (["<mask>"] if with_mask else [])
    vocab = {token: i for i, token in enumerate(specials + WORDS)}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.add_special_tokens(specials)
    extra = {"mask_token": "<mask>"} if with_mask else {}
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>", **extra)


def save_tiny_llama(folder: Path, tie: bool = True, seed: int = 0, model_type: str = "llama", **overrides):
    """A random LlamaForCausalLM (or Mistral/Qwen2) with the word tokenizer; returns the model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tokenizer = word_tokenizer()
    settings = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                    rope_parameters={"rope_type": "default", "rope_theta": 500.0}, tie_word_embeddings=tie,
                    bos_token_id=1, eos_token_id=2)
    settings.update(overrides)
    config = AutoConfig.for_model(model_type, **settings)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return model


@pytest.fixture(scope="session")
def kit():
    return SimpleNamespace(TINY=TINY, WORDS=WORDS, AUSTEN_TOKENIZER=AUSTEN_TOKENIZER, AUSTEN_IDS=AUSTEN_IDS,
                           random_model=random_model,
                           write_checkpoint=write_checkpoint, word_tokenizer=word_tokenizer,
                           save_tiny_llama=save_tiny_llama)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """(save folder, the model it holds)."""
    save_dir = tmp_path_factory.mktemp("ckpt")
    model = random_model()
    write_checkpoint(save_dir, model)
    return save_dir, model

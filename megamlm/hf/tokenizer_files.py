"""Tokenizer files carried both ways: an export gets a `tokenizer.json` + `tokenizer_config.json` that
`AutoTokenizer` and `pipeline("fill-mask")` read; an import gets a mask token (its own, a reserved one, or added)."""

from __future__ import annotations

import re
from pathlib import Path

from tokenizers import Tokenizer

from megamlm.hf.errors import ConversionError

# Names a vocabulary's own mask token goes by.
MASK_NAMES = ("<|mask|>", "<mask>", "[MASK]")
# Unused special tokens of decoder vocabularies, lowest id taken: Llama 3's <|reserved_special_token_N|> (as
# EuroBERT does: id 128002), Mistral v0.3's [control_N], Gemma-style <unusedN>. Qwen2.5 and SmolLM2 have none.
RESERVED_PATTERN = re.compile(r"<\|reserved_special_token_\d+\|>|\[control_\d+\]|<unused\d+>")
ADDED_MASK_TOKEN = "<|mask|>"
_ROLES = ("bos", "eos", "pad", "unk")

def find_tokenizer_json(path: str | Path) -> Path:
    """A tokenizer.json file, or the one inside a folder; anything else is refused by name."""
    path = Path(path)
    candidate = path / "tokenizer.json" if path.is_dir() else path
    if not candidate.is_file():
        raise ConversionError(f"tokenizer file {candidate} not found; the export needs the Hugging Face "
                              "tokenizer.json the checkpoint was trained with (see its config.json 'tokenizer.path')")
    if candidate.suffix != ".json":
        raise ConversionError(f"{candidate} is not a Hugging Face tokenizer.json; exporting tiktoken or "
                              "sentencepiece tokenizers is not supported: convert it to tokenizer.json first")
    return candidate


def write_export_tokenizer(tokenizer_json: Path, out_dir: Path, ids: dict, vocab_size: int,
                           model_max_length: int) -> dict[str, str | None]:
    """Write the tokenizer files of an export; returns the token string of each role."""
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer.from_file(str(tokenizer_json))
    size = raw.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise ConversionError(f"tokenizer {tokenizer_json} has {size} ids but the checkpoint's embedding has "
                              f"{vocab_size} rows; export with the tokenizer the checkpoint was trained with")
    roles = {}
    for role in ("bos", "eos", "pad", "mask", "cls", "sep"):
        token_id = ids.get(f"{role}_id")
        token = raw.id_to_token(token_id) if token_id is not None else None
        if token_id is not None and token is None:
            raise ConversionError(f"the checkpoint's {role} id {token_id} is not in {tokenizer_json}; "
                                  "export with the tokenizer the checkpoint was trained with")
        if token is not None or role not in ("cls", "sep"):  # cls/sep: only exports that name them (ModernBERT)
            roles[role] = token
    fast = PreTrainedTokenizerFast(
        tokenizer_object=raw, model_max_length=model_max_length,
        **{f"{role}_token": token for role, token in roles.items() if token is not None})
    for role, token in roles.items():
        if token is not None and getattr(fast, f"{role}_token_id") != ids[f"{role}_id"]:
            raise ConversionError(f"{role} token {token!r} maps to another id once loaded by transformers; "
                                  f"check {tokenizer_json}")
    fast.save_pretrained(str(out_dir))
    return roles


def choose_mask_token(tokenizer, requested: str | None = None) -> tuple[str, bool]:
    """(mask token, whether it must be added) for a transformers tokenizer about to be imported: ``requested``
    (--mask-token), else the tokenizer's own mask token, else a reserved/unused special token, else an added one."""
    vocab = tokenizer.get_vocab()
    if requested is not None:
        return requested, requested not in vocab
    if tokenizer.mask_token is not None and tokenizer.mask_token in vocab:
        return tokenizer.mask_token, False
    for name in MASK_NAMES:
        if name in vocab:
            return name, False
    taken = {getattr(tokenizer, f"{role}_token") for role in _ROLES}
    for _, token in sorted(tokenizer.added_tokens_decoder.items()):
        if RESERVED_PATTERN.fullmatch(token.content) and token.content not in taken:
            return token.content, False
    return ADDED_MASK_TOKEN, True


def check_mask_token(tokenizer) -> None:
    """Refuse a mask token that is also the bos/eos/pad/unk token (masked positions would be indistinguishable)."""
    for role in _ROLES:
        if getattr(tokenizer, f"{role}_token_id") == tokenizer.mask_token_id:
            raise ConversionError(f"mask token {tokenizer.mask_token!r} (id {tokenizer.mask_token_id}) is also the "
                                  f"tokenizer's {role} token, so MLM could not tell masked positions from {role} "
                                  "tokens; pass --mask-token with an unused token")

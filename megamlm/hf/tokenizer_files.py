"""Tokenizer files carried both ways: an export gets a `tokenizer.json` + `tokenizer_config.json` that
`AutoTokenizer` and `pipeline("fill-mask")` read; an import gets a mask token, reserved or added."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from megamlm.hf.errors import ConversionError

# Reserved tokens a mask can take over, most preferred first (EuroBERT uses Llama 3's first reserved token).
RESERVED_MASK_CANDIDATES = ("<|mask|>", "<mask>", "[MASK]", "<|reserved_special_token_0|>")
ADDED_MASK_TOKEN = "<|mask|>"


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
    for role in ("bos", "eos", "pad", "mask"):
        token_id = ids.get(f"{role}_id")
        token = raw.id_to_token(token_id) if token_id is not None else None
        if token_id is not None and token is None:
            raise ConversionError(f"the checkpoint's {role} id {token_id} is not in {tokenizer_json}; "
                                  "export with the tokenizer the checkpoint was trained with")
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


def choose_mask_token(tokenizer) -> tuple[str, bool]:
    """(mask token, whether it must be added) for a transformers tokenizer about to be imported."""
    vocab = tokenizer.get_vocab()
    if tokenizer.mask_token is not None and tokenizer.mask_token in vocab:
        return tokenizer.mask_token, False
    for candidate in RESERVED_MASK_CANDIDATES:
        if candidate in vocab:
            return candidate, False
    return ADDED_MASK_TOKEN, True


def save_import_tokenizer(tokenizer, out_dir: Path) -> dict:
    """Give ``tokenizer`` a mask token (reserved if it has one, else added), save it, return its ids."""
    mask, _ = choose_mask_token(tokenizer)
    tokenizer.add_special_tokens({"mask_token": mask})
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.save_pretrained(str(out_dir))
    return {"vocab_size": len(tokenizer), "bos_id": tokenizer.bos_token_id, "eos_id": tokenizer.eos_token_id,
            "pad_id": tokenizer.pad_token_id, "mask_id": tokenizer.mask_token_id}

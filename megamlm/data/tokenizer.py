"""One small tokenizer interface over Hugging Face `tokenizer.json`, tiktoken BPE files and
sentencepiece models.

Every tokenizer exposes `encode(text) -> list[int]` (no special tokens added), `decode(ids)`,
`vocab_size`, `bos_id`, `eos_id`, `pad_id`, `mask_id` (None when the vocabulary has none) and
`special_ids` (sorted ids that MLM masking never selects).
"""

from __future__ import annotations

import abc
import base64
import hashlib
import json
import os
from pathlib import Path

from tokenizers import Tokenizer as RustTokenizer

from megamlm import extras
from megamlm.data.indexed import DataError

# Candidate token strings, most specific first; a tokenizer_config.json beside the file wins.
_BOS_NAMES = ("<|bos|>", "<|begin_of_text|>", "<s>", "[CLS]", "<bos>", "<|startoftext|>")
_EOS_NAMES = ("<|eos|>", "<|end_of_text|>", "</s>", "[SEP]", "<eos>", "<|endoftext|>")
_PAD_NAMES = ("<|pad|>", "<pad>", "[PAD]", "<|finetune_right_pad_id|>")
# EuroBERT uses Llama 3's first reserved special token as its mask token.
_MASK_NAMES = ("<|mask|>", "<mask>", "[MASK]", "<MASK>", "<|reserved_special_token_0|>")

# Pre-tokenization regex of cl100k_base and Llama 3 (tiktoken files carry no pattern).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_BASE_VOCAB = 128000


def llama3_special_tokens(base: int = LLAMA3_BASE_VOCAB) -> dict[str, int]:
    """The 256 special tokens Llama 3 places after its 128,000 BPE ranks (Llama 3.0 layout)."""
    names = ["<|begin_of_text|>", "<|end_of_text|>"]
    names += [f"<|reserved_special_token_{i}|>" for i in range(4)]
    names += ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
    names += [f"<|reserved_special_token_{i}|>" for i in range(5, 251)]
    return {name: base + i for i, name in enumerate(names)}


class Tokenizer(abc.ABC):
    """Common interface; subclasses (HF, tiktoken, sentencepiece) implement the three abstract methods."""

    kind = "base"

    def __init__(self, path: str, vocab_size: int, special_tokens: dict[str, int], overrides: dict[str, str | None]):
        self.path = path
        self.vocab_size = vocab_size
        self.special_tokens = dict(special_tokens)
        self.bos_id = self._pick("bos", _BOS_NAMES, overrides)
        self.eos_id = self._pick("eos", _EOS_NAMES, overrides)
        self.mask_id = self._pick("mask", _MASK_NAMES, overrides)
        pad = self._pick("pad", _PAD_NAMES, overrides)
        self.pad_id = pad if pad is not None else self.eos_id
        ids = set(self.special_tokens.values())
        ids.update(i for i in (self.bos_id, self.eos_id, self.pad_id, self.mask_id) if i is not None)
        self.special_ids = sorted(ids)

    @abc.abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """The id of ``token``, or None when the vocabulary has no such token."""

    def _pick(self, role: str, candidates, overrides) -> int | None:
        name = overrides.get(role)
        if name is not None:
            token_id = self.token_to_id(name)
            if token_id is None:
                raise DataError(f"{role} token {name!r} is not in the vocabulary of {self.path}; pass a token it has")
            return token_id
        for candidate in candidates:
            token_id = self.token_to_id(candidate)
            if token_id is not None:
                return token_id
        return None

    @abc.abstractmethod
    def tokens_by_id(self) -> dict[int, str | bytes]:
        """Every id of the vocabulary with its token (text, or bytes for tiktoken ranks)."""

    def fingerprint(self) -> str:
        """A hash of the vocabulary (every id with its token): the same vocabulary gives the same fingerprint
        whatever file holds it, another vocabulary (size, order, tokens) another one."""
        digest = hashlib.sha256()
        for token_id, token in sorted(self.tokens_by_id().items()):
            digest.update(b"%d\0%s\0" % (token_id, token if isinstance(token, bytes) else token.encode("utf-8")))
        return digest.hexdigest()[:32]

    @abc.abstractmethod
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. `add_special_tokens` applies a tokenizer.json post-processor
        (what Megatron's HuggingFaceTokenizer does); tiktoken and sentencepiece files have none."""

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        return [self.encode(text, add_special_tokens) for text in texts]

    @abc.abstractmethod
    def decode(self, ids) -> str:
        """Text of ``ids``."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.path!r}, vocab_size={self.vocab_size}, bos={self.bos_id}, "
            f"eos={self.eos_id}, pad={self.pad_id}, mask={self.mask_id})"
        )


def _config_token(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


class HFTokenizer(Tokenizer):
    """A Hugging Face `tokenizer.json` run by the `tokenizers` library."""

    kind = "huggingface"

    def __init__(self, path: str, **overrides):
        self._tok = RustTokenizer.from_file(path)
        added = self._tok.get_added_tokens_decoder()
        special = {token.content: token_id for token_id, token in added.items() if token.special}
        vocab = self._tok.get_vocab(with_added_tokens=True)
        vocab_size = max(vocab.values()) + 1 if vocab else 0
        config_file = Path(path).with_name("tokenizer_config.json")
        if config_file.is_file():
            config = json.loads(config_file.read_text())
            for role in ("bos", "eos", "pad", "mask"):
                if overrides.get(role) is None:
                    overrides[role] = _config_token(config.get(f"{role}_token"))
        super().__init__(path, vocab_size, special, overrides)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def tokens_by_id(self) -> dict[int, str | bytes]:
        return {token_id: token for token, token_id in self._tok.get_vocab(with_added_tokens=True).items()}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE file (lines of `<base64 token> <rank>`), e.g. Llama 3's `tokenizer.model`.

    A file of exactly 128,000 ranks gets Llama 3's special tokens unless `special_tokens` is given.
    """

    kind = "tiktoken"

    def __init__(self, path: str, special_tokens: dict[str, int] | None = None, pattern: str | None = None,
                 **overrides):
        tiktoken = extras.require("tiktoken", f"the tiktoken tokenizer {path}")

        ranks = read_tiktoken_ranks(path)
        if special_tokens is None:
            special_tokens = llama3_special_tokens(len(ranks)) if len(ranks) == LLAMA3_BASE_VOCAB else {}
        self._enc = tiktoken.Encoding(
            name=Path(path).name,
            pat_str=pattern or LLAMA3_PATTERN,
            mergeable_ranks=ranks,
            special_tokens=special_tokens,
        )
        self._ranks = ranks
        vocab_size = max([len(ranks) - 1, *special_tokens.values()]) + 1
        super().__init__(path, vocab_size, special_tokens, overrides)

    def token_to_id(self, token: str) -> int | None:
        if token in self.special_tokens:
            return self.special_tokens[token]
        return self._ranks.get(token.encode("utf-8"))

    def tokens_by_id(self) -> dict[int, str | bytes]:
        return {**{rank: token for token, rank in self._ranks.items()},
                **{token_id: token for token, token_id in self.special_tokens.items()}}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        return self._enc.encode_ordinary_batch(texts, num_threads=1)

    def decode(self, ids) -> str:
        return self._enc.decode([int(i) for i in ids])


def read_tiktoken_ranks(path: str) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
            except ValueError:
                raise DataError(f"{path} line {number} is not '<base64 token> <rank>'; "
                                "is it a tiktoken BPE file?") from None
    return ranks


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece `.model` file."""

    kind = "sentencepiece"

    def __init__(self, path: str, **overrides):
        sentencepiece = extras.require("sentencepiece", f"the sentencepiece tokenizer {path}")

        self._sp = sentencepiece.SentencePieceProcessor(model_file=path)
        n = self._sp.get_piece_size()
        special = {
            self._sp.id_to_piece(i): i
            for i in range(n)
            if self._sp.is_control(i) or self._sp.is_unknown(i) or self._sp.is_unused(i)
        }
        super().__init__(path, n, special, overrides)
        # sentencepiece knows its own bos/eos/pad ids (-1 when absent).
        for role in ("bos", "eos", "pad"):
            if overrides.get(role) is None:
                own = getattr(self._sp, f"{role}_id")()
                if own >= 0:
                    setattr(self, f"{role}_id", own)
        if self.pad_id is None:
            self.pad_id = self.eos_id
        ids = set(self.special_ids)
        ids.update(i for i in (self.bos_id, self.eos_id, self.pad_id, self.mask_id) if i is not None)
        self.special_ids = sorted(ids)

    def tokens_by_id(self) -> dict[int, str | bytes]:
        return {i: self._sp.id_to_piece(i) for i in range(self._sp.get_piece_size())}

    def token_to_id(self, token: str) -> int | None:
        token_id = self._sp.piece_to_id(token)
        if token_id == self._sp.unk_id() and token != self._sp.id_to_piece(token_id):
            return None
        return token_id

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._sp.encode(text)

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        return self._sp.encode(texts)

    def decode(self, ids) -> str:
        return self._sp.decode([int(i) for i in ids])


def _sniff_kind(path: Path) -> str:
    if path.suffix == ".json":
        return "huggingface"
    with open(path, "rb") as f:
        head = f.read(256)
    first_line = head.split(b"\n", 1)[0].split()
    if len(first_line) == 2 and first_line[1].isdigit():
        try:
            base64.b64decode(first_line[0], validate=True)
            return "tiktoken"
        except ValueError:
            pass
    return "sentencepiece"


def load_tokenizer(path: str | os.PathLike, kind: str | None = None, **overrides) -> Tokenizer:
    """Open a tokenizer file or folder.

    `path`: a `tokenizer.json`, a folder holding one (or a `tokenizer.model`), a tiktoken BPE file
    or a sentencepiece model. `kind` forces 'huggingface', 'tiktoken' or 'sentencepiece' (detected
    from the file otherwise). Keyword overrides `bos`, `eos`, `pad`, `mask` name tokens explicitly;
    tiktoken also takes `special_tokens` and `pattern`.
    """
    path = Path(path)
    if path.is_dir():
        for name in ("tokenizer.json", "tokenizer.model"):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise DataError(f"{path} holds neither tokenizer.json nor tokenizer.model; pass the tokenizer file itself")
    if not path.is_file():
        raise DataError(f"tokenizer file {path} not found; pass a tokenizer.json, tiktoken BPE file or sentencepiece "
                        "model")
    kind = kind or _sniff_kind(path)
    classes = {"huggingface": HFTokenizer, "tiktoken": TiktokenTokenizer, "sentencepiece": SentencePieceTokenizer}
    if kind not in classes:
        raise DataError(f"unknown tokenizer kind {kind!r}; use one of {sorted(classes)}")
    try:
        return classes[kind](str(path), **overrides)
    except DataError:
        raise
    except Exception as error:  # the libraries raise many types for a file of the wrong kind
        raise DataError(f"could not read {path} as a {kind} tokenizer ({error}); "
                        "check the file and its kind") from error

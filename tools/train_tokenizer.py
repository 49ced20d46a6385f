"""Train a byte-level BPE tokenizer (Hugging Face `tokenizers`) on the text of jsonl files.

    python tools/train_tokenizer.py --input corpus.jsonl --output tokenizer.json --vocab-size 8192

Special tokens <|bos|> <|eos|> <|pad|> <|mask|> get ids 0-3. Input may be plain or .gz jsonl; --json-keys names the
fields to learn from, as tools/preprocess_data.py's --json-keys names the fields it tokenizes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.errors import UserError, exit_line  # noqa: E402

SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|mask|>"]


def read_texts(paths: list[str], keys: str | list[str]):
    """The text of each ``keys`` field of every record of the jsonl files ``paths``."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    texts = [record[key] for key in keys]
                except (ValueError, KeyError, TypeError) as error:
                    raise UserError(f"{path} line {number} is not JSON with the field(s) "
                                     f"{', '.join(keys)} (--json-keys; {error!r})") from None
                yield from texts


def train(paths: list[str], vocab_size: int, keys: str | list[str] = "text", min_frequency: int = 2):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(read_texts(paths, keys), trainer=trainer)
    return tokenizer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--input", nargs="+", required=True, help="jsonl files (plain or .gz)")
    parser.add_argument("--output", required=True, help="tokenizer.json to write")
    parser.add_argument("--vocab-size", type=int, default=8192)
    # --json-key (one field) was this flag's name before; kept as its alias.
    parser.add_argument("--json-keys", "--json-key", dest="json_keys", nargs="+", default=["text"],
                        help="fields of each record to learn from (default: text), as preprocess_data.py's")
    parser.add_argument("--min-frequency", type=int, default=2)
    args = parser.parse_args(argv)
    for path in args.input:
        if not os.path.isfile(path):
            parser.error(f"input {path} not found")
    if args.vocab_size < 256 + len(SPECIAL_TOKENS):
        parser.error(f"--vocab-size must be at least {256 + len(SPECIAL_TOKENS)} (bytes plus special tokens)")
    try:
        tokenizer = train(args.input, args.vocab_size, args.json_keys, args.min_frequency)
        output = Path(args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = output.with_name(output.name + ".tmp")
        tokenizer.save(str(tmp))
        os.replace(tmp, output)
    except (UserError, OSError) as error:
        return exit_line(error)
    print(f"wrote {output}: {tokenizer.get_vocab_size()} ids", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

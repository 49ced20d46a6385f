"""Tokenize a corpus into Megatron's .bin/.idx format, with Megatron's command line.

    python tools/preprocess_data.py --input corpus.jsonl --output-prefix out/corpus \\
        --tokenizer-type HuggingFaceTokenizer --tokenizer-model path/to/tokenizer.json \\
        --workers 8 --append-eod

writes out/corpus_text_document.bin/.idx (one pair per --json-keys key), the same bytes Megatron's
tool writes for the same tokenizer, and out/corpus_text_document.megamlm.json beside them (the tokenizer's
fingerprint and vocabulary size, the settings; pretrain.py refuses the data with another tokenizer).
Input: jsonl (plain, .gz or .zst) or parquet, UTF-8; an input without any text is an error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.data.preprocess import TOKENIZER_TYPES, PreprocessSettings, preprocess  # noqa: E402
from megamlm.errors import UserError, exit_line  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    group = parser.add_argument_group("input data")
    group.add_argument("--input", nargs="+", required=True, help="jsonl(.gz/.zst) or parquet files")
    group.add_argument("--json-keys", nargs="+", default=["text"], help="fields (columns) to tokenize")
    group = parser.add_argument_group("tokenizer")
    group.add_argument(
        "--tokenizer-type", default="HuggingFaceTokenizer",
        help=f"one of {', '.join(TOKENIZER_TYPES)} (see megamlm/data/preprocess.py for what each does)",
    )
    group.add_argument(
        "--tokenizer-model", required=True,
        help="tokenizer.json or its folder, tiktoken BPE file, or sentencepiece model",
    )
    group.add_argument("--append-eod", action="store_true", help="end every document with the eos token")
    group.add_argument("--prepend-bos", action="store_true", help="start every document with the bos token")
    group = parser.add_argument_group("output data")
    group.add_argument("--output-prefix", required=True, help="writes <prefix>_<key>_document.bin/.idx")
    group.add_argument(
        "--shard-documents", type=int, default=None,
        help="start a new <prefix>_<shard>_<key>_document pair every N documents (one pair if unset)",
    )
    group = parser.add_argument_group("runtime")
    group.add_argument("--workers", type=int, default=1, help="tokenizer processes")
    group.add_argument("--log-interval", type=int, default=1000, help="documents between updates of the rates shown")
    group.add_argument("--no-progress", action="store_true", help="no progress bar (the summary is still printed)")
    group.add_argument("--force", action="store_true",
                       help="replace an existing dataset at --output-prefix (refused otherwise)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    settings = PreprocessSettings(
        inputs=args.input,
        output_prefix=args.output_prefix,
        tokenizer_model=args.tokenizer_model,
        tokenizer_type=args.tokenizer_type,
        json_keys=args.json_keys,
        append_eod=args.append_eod,
        prepend_bos=args.prepend_bos,
        workers=args.workers,
        shard_documents=args.shard_documents,
        log_interval=args.log_interval,
        progress=not args.no_progress,
        force=args.force,
    )
    try:
        summary = preprocess(settings)
    except (UserError, OSError) as error:
        return exit_line(error)
    print(summary.line())
    for prefix in summary.outputs:
        print(f"  {prefix}.bin / .idx")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Look inside datasets and check which samples a run sees.

    python tools/inspect_data.py stats out/corpus_text_document
    python tools/inspect_data.py sample --data-path out/corpus_text_document --seq-length 2048 \\
        --seed 1234 --index 0 1 2 --tokenizer path/to/tokenizer.json
    python tools/inspect_data.py digest --data-path 0.7 a 0.3 b --seq-length 2048 \\
        --seed 1234 --first 0 --count 1024

`sample` prints global sample k of the run's order (ids, the documents it was cut from, and the
text when --tokenizer is given); `digest` prints one sha256 over a range of samples, so two runs
(or machines) can confirm they saw the same data. --data-path, --seq-length and --seed must be
the run's; sample k does not depend on the run's length. --num-samples (the samples a run
consumes: train iterations x global batch size) is optional and only bounds the indexes asked for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import get_args

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.config.sections import SampleMode  # noqa: E402
from megamlm.data import DataError, IndexedDataset, StreamSpec, build_train_dataset, load_tokenizer  # noqa: E402
from megamlm.data.inspection import dataset_statistics, sample_digest  # noqa: E402
from megamlm.errors import UserError, exit_line  # noqa: E402


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-path", nargs="+", required=True, help="as given to the run (Megatron syntax)")
    parser.add_argument("--seq-length", type=int, required=True)
    parser.add_argument("--num-samples", type=int, default=None,
                        help="the run's length (train iterations x global batch size): refuse indexes beyond it")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--cache-dir", default=None, help="the run's index cache folder (built there if absent)")
    parser.add_argument("--sample-mode", default="windows", choices=get_args(SampleMode),
                        help="as given to the run: windows of the packed stream, or whole documents (default windows)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    stats = commands.add_parser("stats", allow_abbrev=False, help="sizes, lengths and token range of .bin/.idx pairs")
    stats.add_argument("prefixes", nargs="+")
    stats.add_argument("--no-scan", action="store_true", help="skip reading every token for the max token id")
    stats.add_argument("--json", action="store_true", help="print JSON")
    sample = commands.add_parser("sample", allow_abbrev=False, help="decode global samples of a run's order")
    add_run_arguments(sample)
    sample.add_argument("--index", type=int, nargs="+", required=True, help="global sample numbers")
    sample.add_argument("--tokenizer", default=None, help="tokenizer file to decode the text with")
    digest = commands.add_parser("digest", allow_abbrev=False, help="sha256 over a range of a run's samples")
    add_run_arguments(digest)
    digest.add_argument("--first", type=int, default=0)
    digest.add_argument("--count", type=int, default=1024)
    return parser


def print_stats(args) -> None:
    for prefix in args.prefixes:
        stats = dataset_statistics(IndexedDataset(prefix), scan_tokens=not args.no_scan)
        if args.json:
            print(json.dumps(stats))
            continue
        print(f"{stats['prefix']}: {stats['dtype']}, {stats['sequences']:,} sequences in {stats['documents']:,} "
              f"documents ({stats['empty_documents']:,} empty), {stats['tokens']:,} tokens, "
              f"{(stats['bin_bytes'] + stats['idx_bytes']) / 1e6:,.1f} MB")
        if "sequence_length" in stats:
            lengths = stats["sequence_length"]
            print("  sequence length: " + ", ".join(f"{k} {v:,}" for k, v in lengths.items()))
        if "max_token_id" in stats:
            print(f"  max token id: {stats['max_token_id']:,} (the model vocabulary must be larger)")


def check_range(args, first: int, end: int, what: str) -> None:
    """Samples [first, end) must exist: non-negative, and inside the run when --num-samples is given."""
    if first < 0 or end <= first:
        raise DataError(f"{what} must select samples at or after 0")
    if args.num_samples is not None and end > args.num_samples:
        raise DataError(f"{what} is outside the run's {args.num_samples} samples")


def run_dataset(args, end: int):
    """The run's stream with (at least) samples [0, end) available; sample k does not depend on `end`."""
    return build_train_dataset(StreamSpec(args.data_path, args.seq_length, end, args.seed, cache_dir=args.cache_dir,
                                          sample_mode=args.sample_mode))


def print_samples(args) -> None:
    for k in args.index:
        check_range(args, k, k + 1, f"--index {k}")
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    dataset = run_dataset(args, max(args.index) + 1)
    for k in args.index:
        tokens = dataset[k]
        fingerprint = hashlib.sha256(np.ascontiguousarray(tokens, dtype=np.int64).tobytes()).hexdigest()[:16]
        padding = int(np.count_nonzero(dataset.document_ids(k) < 0))
        print(f"sample {k}: {len(tokens)} tokens{f' ({padding} of them padding)' if padding else ''}, sha256 "
              f"{fingerprint}")
        pieces = dataset.sample_documents(k)
        print("  documents: " + ", ".join(f"{d}[{o}:{o + n}]" for d, o, n in pieces))
        print(f"  ids: {tokens[:16].tolist()}{' ...' if len(tokens) > 16 else ''}")
        if tokenizer is not None:
            print("  text: " + repr(tokenizer.decode(tokens)))


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "stats":
            print_stats(args)
        elif args.command == "sample":
            print_samples(args)
        else:
            check_range(args, args.first, args.first + args.count, "--first/--count")
            dataset = run_dataset(args, args.first + args.count)
            print(f"samples [{args.first}, {args.first + args.count}): sha256 "
                  f"{sample_digest(dataset, args.first, args.count)}")
    except (UserError, OSError) as error:
        return exit_line(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())

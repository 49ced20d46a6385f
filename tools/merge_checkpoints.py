"""Merge two or more models of one architecture linearly: sum_k w_k x_k of every tensor (BidirLM's merge of an
adapted encoder with its source decoder).

    python tools/merge_checkpoints.py --input runs/mntp ckpt/smollm2 --weights 0.7,0.3 --output runs/merged
    python pretrain.py --init-from runs/merged ...                  # a weights-only megamlm checkpoint
    python tools/merge_checkpoints.py --input hf/a hf/b --weights 0.5,0.5 --output hf/merged   # HF folders

Inputs are megamlm checkpoints (a --save folder or an iter_* folder) or Hugging Face folders, all of one kind;
they must share every tensor's name and shape, the vocabulary and the tokenizer files (else one line names the
first difference, exit 2, nothing written). The output is of the inputs' kind unless --to says otherwise (a megamlm
merge written as an HF folder takes --arch like tools/convert_to_hf.py). A merge of a model with itself is bitwise
that model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.errors import UserError, exit_line  # noqa: E402
from megamlm.hf.merge import merge_checkpoints, parse_weights  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--input", nargs="+", required=True,
                        help="two or more megamlm checkpoints or Hugging Face folders of one architecture")
    parser.add_argument("--weights", help="one weight per --input, in order, summing to 1, e.g. 0.7,0.3 "
                                          "(default: equal weights)")
    parser.add_argument("--output", required=True, help="folder to write: a megamlm checkpoint or an HF folder")
    parser.add_argument("--to", choices=("megamlm", "hf"),
                        help="what to write (default: the inputs' kind; converted through the converters otherwise)")
    parser.add_argument("--arch", help="the HF architecture of a megamlm merge written with --to hf (default: the "
                                       "model's encoder export, as tools/convert_to_hf.py)")
    parser.add_argument("--force", action="store_true", help="replace an existing --output folder")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if len(args.input) < 2:
            raise UserError(f"a merge takes two or more --input models, got {len(args.input)}")
        weights = parse_weights(args.weights, len(args.input))
        merge_checkpoints(args.input, weights, args.output, to=args.to, arch=args.arch, force=args.force)
    except (UserError, OSError) as error:
        return exit_line(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())

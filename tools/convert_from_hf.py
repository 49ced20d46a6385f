"""Import a Hugging Face model (the families megamlm/hf/keymaps.py declares, or a GGUF file) as a megamlm checkpoint.

    python tools/convert_from_hf.py --input models/SmolLM2-135M --output ckpt/smollm2
    python tools/convert_from_hf.py --input models/ModernBERT-base --output ckpt/modernbert --seq-length 1024
    python pretrain.py --init-from ckpt/smollm2 ...      # the flags to use are printed at the end

The checkpoint is at step 0, holds the tokenizer (with a mask token) in `tokenizer/`, and can be
exported back with tools/convert_to_hf.py. Tied embeddings stay tied (also under pipeline parallelism)
unless --untie-embeddings gives the LM head its own copy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.checkpoint import CheckpointError  # noqa: E402
from megamlm.errors import UserError, exit_line  # noqa: E402
from megamlm.hf.importer import import_hf  # noqa: E402
from megamlm.hf.keymaps import imported_families  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    # The supported families come from the key maps the importer uses, so --help cannot drift from them.
    description = (f"Import a Hugging Face model as a megamlm checkpoint: {imported_families()}; from a model "
                   "folder or a GGUF file.\n\n" + __doc__.split("\n\n", 1)[1])
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--input", required=True,
                        help="Hugging Face model folder (config.json + weights + tokenizer), or a .gguf file / a "
                             "folder holding one")
    parser.add_argument("--output", required=True, help="megamlm checkpoint folder to write")
    parser.add_argument("--seq-length", type=int,
                        help="sequence length recorded in the checkpoint (default: the model's context)")
    parser.add_argument("--untie-embeddings", action="store_true",
                        help="give the LM head of a model with tied embeddings its own copy of the matrix")
    parser.add_argument("--mask-token",
                        help="the token MLM masks with (default: the tokenizer's own, else a reserved one such as "
                             "Llama 3's <|reserved_special_token_0|>, else an added <|mask|>)")
    parser.add_argument("--force", action="store_true", help="replace an existing --output folder")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.seq_length is not None and args.seq_length <= 0:
            raise CheckpointError(f"--seq-length must be positive, got {args.seq_length}")
        import_hf(args.input, args.output, force=args.force, max_seq_length=args.seq_length,
                  untie=args.untie_embeddings, mask_token=args.mask_token)
    except (UserError, OSError) as error:
        return exit_line(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())

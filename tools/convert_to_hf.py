"""Export a megamlm checkpoint (any parallel layout) as a Hugging Face model folder.

    python tools/convert_to_hf.py --input runs/mlm --output hf/mlm                 # EuroBertForMaskedLM
    python tools/convert_to_hf.py --input runs/clm --output hf/clm --arch llama    # LlamaForCausalLM

--arch qwen2 / mistral / qwen3 / gemma3 export a causal model continued from that family as its own family;
an encoder continued from Gemma 3 exports by default as a native bidirectional Gemma 3 (--arch gemma3_encoder), a
ModernBERT block (an imported ModernBERT, Ettin or mmBERT) as ModernBertForMaskedLM (--arch modernbert, or
modernbert-decoder for ModernBertDecoderForCausalLM). The
folder holds config.json (with the model's attention biases, head_dim, RoPE parameters and embedding tying),
model.safetensors, the tokenizer (with its mask token) and a model card. --sentence-transformers writes an
encoder's bare model (no MLM head) with sentence-transformers' files instead: SentenceTransformer(path) loads it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.errors import UserError, exit_line  # noqa: E402
from megamlm.hf.export import export_checkpoint  # noqa: E402
from megamlm.hf.keymaps import EXPORT_ARCHS  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="megamlm --save folder or one of its iter_NNNNNNN folders")
    parser.add_argument("--output", required=True, help="Hugging Face folder to write")
    parser.add_argument("--arch", default=None, choices=list(EXPORT_ARCHS),
                        help="eurobert: EuroBertForMaskedLM (the default for Llama-shaped encoders); "
                             "gemma3_encoder: a bidirectional Gemma 3 (Gemma3TextModel; the default for Gemma 3 "
                             "models); modernbert: ModernBertForMaskedLM (the default for a ModernBERT block); "
                             "modernbert-decoder: ModernBertDecoderForCausalLM (Ettin's decoders); llama, qwen2, "
                             "mistral, qwen3, gemma3: the causal model of that family")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="dtype of model.safetensors")
    parser.add_argument("--tokenizer", help="tokenizer.json to ship, when the one the checkpoint records has moved")
    parser.add_argument("--force", action="store_true", help="replace an existing --output folder")
    parser.add_argument("--sentence-transformers", action="store_true",
                        help="write the bare encoder (EuroBertModel, ModernBertModel, Gemma3TextModel: no MLM head) "
                             "with sentence-transformers' files and the model card's mean pooling, so "
                             "SentenceTransformer(path) and AutoModel load it with no unexpected weight")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        export_checkpoint(args.input, args.output, arch=args.arch, dtype=args.dtype, force=args.force,
                          tokenizer=args.tokenizer, sentence_transformers=args.sentence_transformers)
    except (UserError, OSError) as error:
        return exit_line(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Continued pretraining of a decoder into an encoder, end to end, on a CPU: SmolLM2-135M-Instruct.

    python examples/cpt_smollm2.py --workdir /tmp/cpt-smollm2 [--report report.json]

examples/cpt_hf_decoder.py on the Llama-architecture GGUF in ../shared/models/: import (a mask token is added
and the vocabulary grows to a multiple of 128; the tied embedding stays tied), the causal loss against
transformers', 20 MLM steps with `pretrain.py --init-from`, export as EuroBERT and `pipeline("fill-mask")`.
The weights are 4-bit quantized and dequantized on load, so this shows the plumbing, not quality.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The steps are examples/cpt_hf_decoder.py's (examples/paper_recipe reuses them through this module).
from cpt_hf_decoder import REPO, build_parser, continued_pretraining, run, tokenize_corpus  # noqa: E402

MODEL_DIR = REPO / ".." / "shared" / "models" / "smollm2-135m-instruct"
__all__ = ["MODEL_DIR", "continued_pretraining", "main", "tokenize_corpus"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser(__doc__.split("\n\n")[0], model=False).parse_args(argv)
    gguf = next(MODEL_DIR.glob("*.gguf"), None)
    if gguf is None:
        raise SystemExit(f"no GGUF model in {MODEL_DIR}; see ../shared/ASSETS.md")
    run(gguf, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

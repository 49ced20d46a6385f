"""Values as Hugging Face configs write them, shared by every family's translation (megamlm/hf/hf_config.py,
megamlm/hf/modernbert.py)."""

from __future__ import annotations

import numpy as np

from megamlm.model.config import ModelArgs


def rope_parameters(args: ModelArgs) -> dict:
    """Hugging Face's ``rope_parameters`` of ``args``."""
    scaling = args.rope_scaling.to_dict() if args.rope_scaling is not None else {"rope_type": "default"}
    return {**scaling, "rope_theta": float(args.rope_theta)}


def source_float(value) -> float:
    """A float setting as its source writes it: a value that is exactly a float32 (a GGUF file's metadata, read
    back through float32: 9.999999747378752e-06) is the shortest decimal that float32 spells (1e-05); any other
    value (config.json's float64) is kept."""
    x = float(value)
    if np.isfinite(x) and float(np.float32(x)) == x:
        return float(str(np.float32(x)))
    return x

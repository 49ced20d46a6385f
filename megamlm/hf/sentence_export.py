"""``tools/convert_to_hf.py --sentence-transformers``: an encoder export as sentence-transformers ships one.

The folder holds the bare encoder (the ``*Model`` class: every tensor of the masked-LM export but its MLM head,
under the base model's own names, config.json's ``architectures`` naming it), so ``AutoModel.from_pretrained`` and
``SentenceTransformer(path)`` load it with nothing missing or unexpected, and sentence-transformers' own files
(modules.json, sentence_bert_config.json, 1_Pooling/config.json) with the pooling the model card states
(``SENTENCE_POOLING``, the line eval/mteb_run.py reads the pooling from).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from megamlm.hf.errors import ConversionError

SENTENCE_POOLING = "mean"
"""The pooling megamlm's exports state for sentence-transformers: the hidden states' mean over the tokens."""

ENCODER_CLASSES = {"eurobert": "EuroBertModel", "modernbert": "ModernBertModel", "gemma3_encoder": "Gemma3TextModel"}
"""The bare encoder class of each encoder export (--arch), which a sentence-transformers export names."""

BASE_PREFIX = "model."
"""Where the masked-LM (or Gemma 3's causal-LM) class keeps its base model: the bare class's names lack it."""


def sentence_problem(arch: str) -> str | None:
    """Why ``arch`` cannot be exported for sentence-transformers (None when it can)."""
    if arch in ENCODER_CLASSES:
        return None
    return (f"--sentence-transformers exports an encoder; --arch {arch} is a causal LM (choose one of "
            f"{', '.join(ENCODER_CLASSES)})")


def encoder_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The base model's tensors of an LM export under the bare class's names (the LM head's are left out)."""
    encoder = {name[len(BASE_PREFIX):]: t for name, t in tensors.items() if name.startswith(BASE_PREFIX)}
    if not encoder:
        raise ConversionError(f"no tensor under {BASE_PREFIX!r} in the export; cannot write the bare encoder")
    return encoder


def write_sentence_files(folder: Path, hidden_size: int, max_seq_length: int) -> None:
    """sentence-transformers' files: the encoder at the folder's root, then the card's pooling."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    pooling = {"word_embedding_dimension": hidden_size,
               **{f"pooling_mode_{mode}": mode == f"{SENTENCE_POOLING}_tokens" for mode in modes},
               "include_prompt": True}
    (folder / "1_Pooling").mkdir()
    for path, value in ((folder / "modules.json", modules),
                        (folder / "sentence_bert_config.json", {"max_seq_length": max_seq_length,
                                                                "do_lower_case": False}),
                        (folder / "1_Pooling" / "config.json", pooling)):
        path.write_text(json.dumps(value, indent=2) + "\n")


def sentence_card(card: str, encoder_class: str) -> str:
    """The export's model card with how to load it as an embedder (the pooling in eval/mteb_run.py's form)."""
    front, _, rest = card.partition("library_name: transformers")
    return (front + "library_name: sentence-transformers" + rest.replace("tags: [megamlm, fill-mask]",
                                                                         "tags: [megamlm, feature-extraction]")
            + f"""
## Use

The bare encoder (`{encoder_class}`, no MLM head) with sentence-transformers' files: `SentenceTransformer(path)`,
{SENTENCE_POOLING} pooling of the hidden states; `AutoModel.from_pretrained(path)` gives the hidden states. An
MLM-only encoder needs contrastive training before its embeddings mean much.
""")

"""The corpus that ships inside megamlm (Jane Austen's novels), tokenized once into a cache folder."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
from pathlib import Path

from megamlm.data.indexed import (
    DataError,
    IndexedDataset,
    IndexedDatasetWriter,
    best_dtype,
)
from megamlm.data.tokenizer import load_tokenizer

ASSET_DIR = Path(__file__).resolve().parents[1] / "assets" / "austen"
CORPUS_FILE = ASSET_DIR / "austen.jsonl.gz"
TOKENIZER_FILE = ASSET_DIR / "tokenizer.json"
MINIATURE_TOKENIZER_FILE = ASSET_DIR / "tokenizer-2048.json"
"""The same BPE with 2,048 ids: the CPU miniature's vocabulary (examples/studies/cpu_miniature.yaml)."""
SHIPPED_TOKENIZERS = {8192: TOKENIZER_FILE, 2048: MINIATURE_TOKENIZER_FILE}
"""Vocabulary size -> the shipped tokenizer of that size (tools/train_tokenizer.py gives the same bytes)."""
DATASET_NAME = "austen_text_document"
_LAYOUT_VERSION = 1  # bump when the way documents are written changes


def default_cache_root() -> Path:
    return Path(os.environ.get("MEGAMLM_CACHE") or Path.home() / ".cache" / "megamlm")


def _fingerprint(tokenizer_file: Path = TOKENIZER_FILE) -> str:
    digest = hashlib.sha256(f"layout{_LAYOUT_VERSION}".encode())
    for path in (CORPUS_FILE, tokenizer_file):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _is_complete(folder: Path) -> bool:
    try:
        summary = json.loads((folder / "summary.json").read_text())
        dataset = IndexedDataset(folder / DATASET_NAME)
    except (OSError, ValueError):
        return False
    return summary.get("documents") == len(dataset) and summary.get("tokens") == dataset.num_tokens


def _tokenize_into(folder: Path, tokenizer_file: Path = TOKENIZER_FILE) -> None:
    tokenizer = load_tokenizer(tokenizer_file)
    with gzip.open(CORPUS_FILE, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    tokens = 0
    with IndexedDatasetWriter(folder / DATASET_NAME, best_dtype(tokenizer.vocab_size)) as writer:
        for ids in tokenizer.encode_batch(texts):
            ids.append(tokenizer.eos_id)
            writer.add_document(ids)
            tokens += len(ids)
    (folder / "summary.json").write_text(json.dumps({"documents": len(texts), "tokens": tokens}))


def prepare_embedded_corpus(cache_dir: str | os.PathLike | None = None,
                            tokenizer_file: str | os.PathLike = TOKENIZER_FILE) -> tuple[str, str]:
    """(data prefix, tokenizer.json path) of the bundled corpus, tokenized on first use.

    The cache folder (default `$MEGAMLM_CACHE` or `~/.cache/megamlm`, then `austen-<hash>`) is
    built under a temporary name and renamed when complete; an incomplete or corrupt folder is
    rebuilt. Each document is one paragraph followed by the eos token. ``tokenizer_file`` tokenizes
    the corpus with another vocabulary (e.g. a smaller one from tools/train_tokenizer.py); the hash
    covers it, so each vocabulary has its own folder.
    """
    tokenizer_file = Path(tokenizer_file)
    for path in (CORPUS_FILE, tokenizer_file):
        if not path.is_file():
            raise DataError(f"bundled asset {path} is missing; reinstall megamlm (pip install -e .)")
    root = Path(cache_dir) if cache_dir is not None else default_cache_root()
    folder = root / f"austen-{_fingerprint(tokenizer_file)}"
    if not _is_complete(folder):
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f"{folder.name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            _tokenize_into(tmp, tokenizer_file)
            try:
                os.rename(tmp, folder)  # fails when the folder exists (another process, or a leftover)
            except OSError:
                if not _is_complete(folder):
                    shutil.rmtree(folder, ignore_errors=True)  # an incomplete or corrupt leftover
                    os.rename(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(folder / DATASET_NAME), str(tokenizer_file)

"""Statistics of indexed datasets and fingerprints of a run's samples (used by tools/inspect_data.py)."""

from __future__ import annotations

import hashlib
import os

import numpy as np

from megamlm.data.indexed import IndexedDataset


def dataset_statistics(dataset: IndexedDataset, scan_tokens: bool = True) -> dict:
    lengths = dataset.sequence_lengths.astype(np.int64)
    cumulative = np.concatenate([[0], np.cumsum(lengths)])
    document_tokens = cumulative[dataset.document_indices[1:]] - cumulative[dataset.document_indices[:-1]]
    stats = {
        "prefix": dataset.prefix,
        "dtype": str(dataset.dtype),
        "sequences": int(len(dataset)),
        "documents": int(dataset.num_documents),
        "empty_documents": int(np.count_nonzero(document_tokens == 0)),
        "tokens": int(lengths.sum()),
        "bin_bytes": os.path.getsize(dataset.prefix + ".bin"),
        "idx_bytes": os.path.getsize(dataset.prefix + ".idx"),
    }
    if len(lengths):
        stats["sequence_length"] = {
            "min": int(lengths.min()),
            "mean": round(float(lengths.mean()), 2),
            "p50": int(np.percentile(lengths, 50)),
            "p99": int(np.percentile(lengths, 99)),
            "max": int(lengths.max()),
        }
    if scan_tokens and stats["tokens"]:
        stats["max_token_id"] = dataset.max_token_id()
    return stats


def sample_digest(dataset, first: int, count: int) -> str:
    """sha256 over samples [first, first + count) of a run's order: equal digests, equal data."""
    digest = hashlib.sha256()
    for k in range(first, first + count):
        digest.update(np.ascontiguousarray(dataset[k], dtype=np.int64).tobytes())
    return digest.hexdigest()

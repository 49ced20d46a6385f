"""Held-out documents: each corpus split into contiguous document ranges, as Megatron's ``--split`` does.

With normalised weights (train, validation, test), the bookends are the cumulative weights and part i holds the
documents ``[round(b_i x D), round(b_{i+1} x D))`` of the corpus's D documents, in file order (Megatron's
``convert_split_vector_to_split_matrix`` and its dataset builder). The parts never share a document, so a
training sample, cut only from training documents, never holds a validation token. megamlm splits by document
(a Megatron document may hold several sequences); for files with one sequence per document, which
``tools/preprocess_data.py`` writes, that is exactly Megatron's GPT split.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from megamlm.data.indexed import IndexedDataset

TRAIN, VALIDATION, TEST = 0, 1, 2
PART_NAMES = ("training", "validation", "test")


def split_document_ranges(num_documents: int, weights: Sequence[float]) -> list[tuple[int, int]]:
    """(first, end) document range of each part for normalised ``weights``."""
    bookends = [0.0]
    for weight in weights:
        bookends.append(bookends[-1] + weight)
    return [(int(round(a * num_documents)), int(round(b * num_documents))) for a, b in zip(bookends, bookends[1:])]


def document_starts(datasets: Sequence[IndexedDataset]) -> np.ndarray:
    """The first sequence of every document of ``datasets`` concatenated, then the total number of sequences."""
    starts, offset = [], 0
    for dataset in datasets:
        starts.append(np.asarray(dataset.document_indices[:-1], dtype=np.int64) + offset)
        offset += len(dataset)
    return np.concatenate([*starts, np.array([offset], dtype=np.int64)])


def part_sequences(datasets: Sequence[IndexedDataset], weights: Sequence[float], part: int) -> tuple[int, int]:
    """The (first, end) sequence range holding the documents of ``part`` of these files (one corpus)."""
    starts = document_starts(datasets)
    first, end = split_document_ranges(len(starts) - 1, weights)[part]
    return int(starts[first]), int(starts[end])

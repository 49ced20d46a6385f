"""The three arrays that place every training sample, in Megatron's GPTDataset style.

- document index: the document ids of every epoch, concatenated and shuffled with the seed;
- sample index: row i = (position in the document index, token offset) where window i starts
  in the packed token stream; window i covers stream tokens [i * seq_length, (i + 1) * seq_length);
- shuffle index: a seeded permutation of the windows.

All of them are pure functions of (document sizes, seq_length, num_samples, seed).
"""

from __future__ import annotations

import math

import numpy as np

from megamlm.data.indexed import DataError


def num_epochs_needed(tokens_per_epoch: int, seq_length: int, num_samples: int) -> int:
    """Fewest passes over the corpus that hold `num_samples` windows of `seq_length` tokens."""
    if tokens_per_epoch <= 0:
        raise DataError("the dataset has no tokens; check the --data-path files (tools/inspect_data.py shows their content)")
    return max(1, math.ceil(num_samples * seq_length / tokens_per_epoch))


def build_document_index(num_documents: int, num_epochs: int, rng: np.random.RandomState) -> np.ndarray:
    document_index = np.tile(np.arange(num_documents, dtype=np.int32), num_epochs)
    rng.shuffle(document_index)
    return document_index


def sample_index_dtype(document_index_length: int) -> type:
    return np.int32 if document_index_length < 2**31 - 1 else np.int64


def build_sample_index_numpy(sizes: np.ndarray, document_index: np.ndarray, seq_length: int, num_windows: int) -> np.ndarray:
    """Rows (position in document_index, offset in that document) of each window start.

    A window starting exactly where a document ends starts at offset 0 of the next non-empty
    document; empty documents never hold a window start.
    """
    ends = np.cumsum(sizes[document_index], dtype=np.int64)
    starts = np.arange(num_windows, dtype=np.int64) * seq_length
    position = np.searchsorted(ends, starts, side="right")
    sample_index = np.empty((num_windows, 2), dtype=sample_index_dtype(len(document_index)))
    sample_index[:, 0] = position
    document_start = ends[position] - sizes[document_index[position]]
    sample_index[:, 1] = starts - document_start
    return sample_index


def build_sample_index(sizes: np.ndarray, document_index: np.ndarray, seq_length: int, num_windows: int, use_cpp: bool | None = None) -> np.ndarray:
    """Sample index from the C++ helper when it is built (and `use_cpp` is not False), else numpy."""
    if use_cpp is not False:
        from megamlm.data import _helpers_loader

        helpers = _helpers_loader.load()
        if helpers is not None:
            out = np.empty((num_windows, 2), dtype=sample_index_dtype(len(document_index)))
            helpers.build_sample_index(
                np.ascontiguousarray(sizes, dtype=np.int32),
                np.ascontiguousarray(document_index, dtype=np.int32),
                int(seq_length),
                out,
            )
            return out
        if use_cpp:
            raise DataError("the C++ index helper is not built; run `pip install -e .` (needs a C++ compiler) or drop use_cpp")
    return build_sample_index_numpy(sizes, document_index, seq_length, num_windows)


def build_shuffle_index(num_windows: int, rng: np.random.RandomState) -> np.ndarray:
    dtype = np.uint32 if num_windows < 2**32 - 1 else np.int64
    shuffle_index = np.arange(num_windows, dtype=dtype)
    rng.shuffle(shuffle_index)
    return shuffle_index


def build_indices(sizes: np.ndarray, seq_length: int, num_samples: int, seed: int, use_cpp: bool | None = None):
    """(document_index, sample_index, shuffle_index) for `num_samples` windows."""
    sizes = np.asarray(sizes)
    tokens_per_epoch = int(sizes.sum(dtype=np.int64))
    num_epochs = num_epochs_needed(tokens_per_epoch, seq_length, num_samples)
    rng = np.random.RandomState(seed)
    document_index = build_document_index(len(sizes), num_epochs, rng)
    num_windows = num_epochs * tokens_per_epoch // seq_length
    sample_index = build_sample_index(sizes, document_index, seq_length, num_windows, use_cpp)
    shuffle_index = build_shuffle_index(num_windows, rng)
    return document_index, sample_index, shuffle_index

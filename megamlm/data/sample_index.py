"""The three arrays that place every training sample, in Megatron's GPTDataset style.

- document index: the document ids of every epoch, in one seeded random order;
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


def seeded_permutation(n: int, seed: int, purpose: int, dtype=np.int64) -> np.ndarray:
    """A uniformly random permutation of range(n), a pure function of (n, seed, purpose).

    Large n uses Rao-Sandelius: every element draws one of ~n/64Ki buckets, then each bucket is
    shuffled on its own. The result is still uniform, and the per-bucket shuffles stay in cache,
    which makes 50M elements about twice as fast as one Fisher-Yates pass over the whole array.
    """
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, purpose])))
    buckets = min(4096, n // 65536)
    if buckets < 2:
        permutation = np.arange(n, dtype=dtype)
        generator.shuffle(permutation)
        return permutation
    bucket_of = generator.integers(0, buckets, n, dtype=np.uint16)
    permutation = group_by_bucket(bucket_of, dtype)
    start = 0
    for count in np.bincount(bucket_of, minlength=buckets):
        generator.shuffle(permutation[start : start + count])
        start += count
    return permutation


def group_by_bucket(bucket_of: np.ndarray, dtype, use_cpp: bool | None = None) -> np.ndarray:
    """np.argsort(bucket_of, kind="stable") as `dtype`; a C++ counting sort when the helper is built."""
    if use_cpp is not False:
        from megamlm.data import _helpers_loader

        helpers = _helpers_loader.load()
        if helpers is not None:
            out = np.empty(len(bucket_of), dtype=dtype)
            helpers.group_by_bucket(np.ascontiguousarray(bucket_of, dtype=np.uint16), out)
            return out
    return np.argsort(bucket_of, kind="stable").astype(dtype, copy=False)


def build_document_index(num_documents: int, num_epochs: int, seed: int) -> np.ndarray:
    """Every document id num_epochs times, in a seeded random order."""
    n = num_documents * num_epochs
    permutation = seeded_permutation(n, seed, purpose=0, dtype=np.int32 if n < 2**31 else np.int64)
    if num_epochs > 1:
        permutation %= num_documents
    return permutation.astype(np.int32, copy=False)


def sample_index_dtype(document_index_length: int) -> type:
    return np.int32 if document_index_length < 2**31 - 1 else np.int64


def build_sample_index_numpy(sizes: np.ndarray, document_index: np.ndarray, seq_length: int, num_windows: int) -> np.ndarray:
    """Rows (position in document_index, offset in that document) of each window start.

    A window starting exactly where a document ends starts at offset 0 of the next non-empty
    document; empty documents never hold a window start.
    """
    sizes_in_order = sizes[document_index].astype(np.int64)
    ends = np.cumsum(sizes_in_order)
    # Window starts before the end of each document: ceil(end / seq_length). Their differences
    # count the starts inside each document, and repeating each position that often lists the
    # document of every window in order (a linear pass instead of a binary search per window).
    starts_inside = np.diff((ends + seq_length - 1) // seq_length, prepend=0)
    position = np.repeat(np.arange(len(ends), dtype=np.int64), starts_inside)[:num_windows]
    if len(position) < num_windows:
        raise DataError(f"the documents hold fewer tokens than {num_windows} windows of {seq_length} need")
    sample_index = np.empty((num_windows, 2), dtype=sample_index_dtype(len(document_index)))
    sample_index[:, 0] = position
    starts = np.arange(num_windows, dtype=np.int64) * seq_length
    sample_index[:, 1] = starts - (ends[position] - sizes_in_order[position])
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


def build_shuffle_index(num_windows: int, seed: int) -> np.ndarray:
    dtype = np.uint32 if num_windows < 2**32 - 1 else np.int64
    return seeded_permutation(num_windows, seed, purpose=1, dtype=dtype)


def build_indices(sizes: np.ndarray, seq_length: int, num_samples: int, seed: int, use_cpp: bool | None = None):
    """(document_index, sample_index, shuffle_index) for `num_samples` windows."""
    sizes = np.asarray(sizes)
    tokens_per_epoch = int(sizes.sum(dtype=np.int64))
    num_epochs = num_epochs_needed(tokens_per_epoch, seq_length, num_samples)
    document_index = build_document_index(len(sizes), num_epochs, seed)
    num_windows = num_epochs * tokens_per_epoch // seq_length
    sample_index = build_sample_index(sizes, document_index, seq_length, num_windows, use_cpp)
    shuffle_index = build_shuffle_index(num_windows, seed)
    return document_index, sample_index, shuffle_index

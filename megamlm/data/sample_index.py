"""The arrays that place every training sample of one corpus, built one epoch at a time.

For epoch e = 0, 1, 2, ... of a corpus whose documents hold T tokens in all:

- document order: a seeded permutation of the document ids, a function of (seed, e);
- sample index: row i = (position in that order, token offset in that document) where window i
  starts in the epoch's packed token stream; window i covers the epoch's tokens
  [i * seq_length, (i + 1) * seq_length). The epoch has W = floor(T / seq_length) windows: the
  tail that does not fill a window is dropped, so no window spans two epochs;
- shuffle index: a seeded permutation of the W windows, a function of (seed, e).

Global sample k is window shuffle_index[k % W] of epoch k // W. It is a pure function of
(document sizes, seq_length, seed, k): it does not depend on how many samples a run asks for,
every epoch covers each of its windows exactly once, and a shorter run's samples are the first
samples of a longer run's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from megamlm.data._helpers_loader import helpers_for
from megamlm.data.indexed import DataError

# The `purpose` of each seeded permutation: one stream of random numbers per (seed, purpose, epoch).
DOCUMENT_ORDER = 0
WINDOW_ORDER = 1


class EpochIndex(NamedTuple):
    """The three arrays of one epoch (see the module docstring)."""

    document_order: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray


def windows_per_epoch(tokens_per_epoch: int, seq_length: int) -> int:
    """W = floor(tokens_per_epoch / seq_length); a DataError when the corpus cannot fill one window."""
    if seq_length < 1:
        raise DataError(f"seq_length ({seq_length}) must be positive")
    if tokens_per_epoch <= 0:
        raise DataError("the dataset has no tokens; check the --data-path files (tools/inspect_data.py shows their "
                        "content)")
    windows = int(tokens_per_epoch) // int(seq_length)
    if windows == 0:
        raise DataError(
            f"the dataset holds {tokens_per_epoch} tokens, fewer than one sample of seq_length {seq_length}; "
            f"use a larger corpus or a shorter --seq-length"
        )
    return windows


def num_epochs_needed(windows: int, num_samples: int) -> int:
    """Fewest epochs of `windows` windows each that hold `num_samples` samples (at least one)."""
    return max(1, -(-int(num_samples) // int(windows)))


def seeded_permutation(
    n: int, seed: int, purpose: int, dtype=np.int64, epoch: int = 0, use_cpp: bool | None = None
) -> np.ndarray:
    """A uniformly random permutation of range(n), a pure function of (n, seed, purpose, epoch).

    Large n uses Rao-Sandelius: every element draws one of ~n/64Ki buckets, then each bucket is
    shuffled on its own. The result is still uniform, and the per-bucket shuffles stay in cache,
    which makes 50M elements about twice as fast as one Fisher-Yates pass over the whole array.
    The grouping into buckets is a C++ counting sort when the helper is built (`use_cpp`), else
    numpy's stable argsort: the same permutation either way.
    """
    if seed < 0 or epoch < 0:
        raise DataError(f"seed ({seed}) and epoch ({epoch}) must be non-negative")
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, purpose, epoch])))
    buckets = min(4096, n // 65536)
    if buckets < 2:
        permutation = np.arange(n, dtype=dtype)
        generator.shuffle(permutation)
        return permutation
    bucket_of = generator.integers(0, buckets, n, dtype=np.uint16)
    counts = np.bincount(bucket_of, minlength=buckets)
    permutation = group_by_bucket(bucket_of, dtype, use_cpp)
    del bucket_of
    start = 0
    for count in counts:
        generator.shuffle(permutation[start : start + count])
        start += count
    return permutation


def group_by_bucket(bucket_of: np.ndarray, dtype, use_cpp: bool | None = None) -> np.ndarray:
    """np.argsort(bucket_of, kind="stable") as `dtype`; a C++ counting sort when the helper is built."""
    helpers = helpers_for(use_cpp)
    if helpers is not None:
        out = np.empty(len(bucket_of), dtype=dtype)
        helpers.group_by_bucket(np.ascontiguousarray(bucket_of, dtype=np.uint16), out)
        return out
    return np.argsort(bucket_of, kind="stable").astype(dtype, copy=False)



def build_document_order(num_documents: int, seed: int, epoch: int, use_cpp: bool | None = None) -> np.ndarray:
    """Every document id once, in the seeded random order of `epoch` (int32)."""
    if num_documents >= 2**31:
        raise DataError(f"{num_documents} documents: at most 2**31 - 1 fit the int32 document order")
    return seeded_permutation(num_documents, seed, DOCUMENT_ORDER, np.int32, epoch, use_cpp)


def sample_index_dtype(num_documents: int) -> type:
    """int32 rows while positions (< num_documents) and offsets (< a document's int32 size) fit."""
    return np.int32 if num_documents < 2**31 - 1 else np.int64


def build_sample_index_numpy(sizes: np.ndarray, document_order: np.ndarray, seq_length: int,
                             num_windows: int) -> np.ndarray:
    """Rows (position in document_order, offset in that document) of each window start.

    A window starting exactly where a document ends starts at offset 0 of the next non-empty
    document; empty documents never hold a window start.
    """
    sizes_in_order = sizes[document_order].astype(np.int64)
    ends = np.cumsum(sizes_in_order)
    # Window starts before the end of each document: ceil(end / seq_length). Their differences
    # count the starts inside each document, and repeating each position that often lists the
    # document of every window in order (a linear pass instead of a binary search per window).
    starts_inside = np.diff((ends + seq_length - 1) // seq_length, prepend=0)
    position = np.repeat(np.arange(len(ends), dtype=np.int64), starts_inside)[:num_windows]
    del starts_inside
    if len(position) < num_windows:
        raise DataError(f"the documents hold fewer tokens than {num_windows} windows of {seq_length} need")
    sample_index = np.empty((num_windows, 2), dtype=sample_index_dtype(len(document_order)))
    sample_index[:, 0] = position
    starts = np.arange(num_windows, dtype=np.int64) * seq_length
    starts -= ends[position] - sizes_in_order[position]
    sample_index[:, 1] = starts
    return sample_index


def build_sample_index(sizes: np.ndarray, document_order: np.ndarray, seq_length: int, num_windows: int,
                       use_cpp: bool | None = None) -> np.ndarray:
    """Sample index from the C++ helper when it is built (and `use_cpp` is not False), else numpy."""
    helpers = helpers_for(use_cpp)
    if helpers is not None:
        out = np.empty((num_windows, 2), dtype=sample_index_dtype(len(document_order)))
        helpers.build_sample_index(
            np.ascontiguousarray(sizes, dtype=np.int32),
            np.ascontiguousarray(document_order, dtype=np.int32),
            int(seq_length),
            out,
        )
        return out
    return build_sample_index_numpy(sizes, document_order, seq_length, num_windows)


def build_shuffle_index(num_windows: int, seed: int, epoch: int, use_cpp: bool | None = None) -> np.ndarray:
    """The seeded order in which `epoch` visits its windows (uint32 below 2**32 - 1 windows, else int64)."""
    dtype = np.uint32 if num_windows < 2**32 - 1 else np.int64
    return seeded_permutation(num_windows, seed, WINDOW_ORDER, dtype, epoch, use_cpp)


def build_epoch(sizes: np.ndarray, seq_length: int, seed: int, epoch: int, use_cpp: bool | None = None) -> EpochIndex:
    """The (document order, sample index, shuffle index) of one epoch of the corpus with these document sizes."""
    sizes = np.ascontiguousarray(sizes, dtype=np.int32)
    windows = windows_per_epoch(int(sizes.sum(dtype=np.int64)), seq_length)
    document_order = build_document_order(len(sizes), seed, epoch, use_cpp)
    sample_index = build_sample_index(sizes, document_order, seq_length, windows, use_cpp)
    shuffle_index = build_shuffle_index(windows, seed, epoch, use_cpp)
    return EpochIndex(document_order, sample_index, shuffle_index)

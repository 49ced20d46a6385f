"""Cache of the sample index arrays as .npy files named by a hash of everything that determines them.

The process whose `rank()` is 0 builds (or validates) the cache; every process then waits at
`barrier()` and memory-maps the files. A cache entry whose description disagrees with the
requested settings, or whose arrays are malformed, is rebuilt, never reused.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from megamlm.data.indexed import DataError
from megamlm.data.sample_index import build_indices

# Bump when the way the arrays are built changes: old cache entries then get new names.
INDEX_FORMAT_VERSION = 2
ARRAY_NAMES = ("document_index", "sample_index", "shuffle_index")


def describe(sizes: np.ndarray, prefixes: Sequence[str], seq_length: int, num_samples: int, seed: int) -> dict:
    digest = hashlib.blake2b(np.ascontiguousarray(sizes, dtype=np.int32).tobytes(), digest_size=16).hexdigest()
    return {
        "format_version": INDEX_FORMAT_VERSION,
        "document_sizes_blake2b": digest,
        "num_documents": int(len(sizes)),
        "num_tokens": int(np.asarray(sizes).sum(dtype=np.int64)),
        "seq_length": int(seq_length),
        "num_samples": int(num_samples),
        "seed": int(seed),
        "datasets": [os.path.basename(p) for p in prefixes],
    }


def cache_key(description: dict) -> str:
    text = json.dumps(description, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _paths(cache_dir: str, kind: str, key: str, names: Sequence[str]) -> dict[str, Path]:
    base = Path(cache_dir)
    paths = {name: base / f"{kind}-{key}-{name}.npy" for name in names}
    paths["description"] = base / f"{kind}-{key}-description.json"
    return paths


def _load(paths: dict[str, Path], names: Sequence[str], description: dict, valid: Callable[[tuple], bool]):
    """The arrays memory-mapped, or None when the entry is absent, stale or malformed."""
    try:
        stored = json.loads(paths["description"].read_text())
    except (OSError, ValueError):
        return None
    if stored != description:
        return None
    try:
        arrays = tuple(np.load(paths[name], mmap_mode="r") for name in names)
    except (OSError, ValueError):
        return None
    return arrays if valid(arrays) else None


def _save(paths: dict[str, Path], names: Sequence[str], description: dict, arrays) -> None:
    paths["description"].parent.mkdir(parents=True, exist_ok=True)
    # The description goes last: its presence means the arrays are complete.
    for name, array in zip(names, arrays):
        tmp = paths[name].with_name(paths[name].name + f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            np.save(f, array)
        os.replace(tmp, paths[name])
    tmp = paths["description"].with_name(paths["description"].name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(description, indent=1, sort_keys=True))
    os.replace(tmp, paths["description"])


def cached_arrays(
    cache_dir: str | None,
    kind: str,
    names: Sequence[str],
    description: dict,
    build: Callable[[], tuple],
    valid: Callable[[tuple], bool],
    rank: Callable[[], int] | None = None,
    barrier: Callable[[], None] | None = None,
):
    """Arrays from `build()`, cached under a name hashed from `description` when `cache_dir` is set.

    Rank 0 (or the only process, when `rank` is None) validates the entry and rebuilds it if
    it is missing, stale or malformed; all ranks then pass `barrier()` and memory-map it.
    """
    if cache_dir is None:
        return build()
    paths = _paths(cache_dir, kind, cache_key(description), names)
    if rank is None or rank() == 0:
        if _load(paths, names, description, valid) is None:
            arrays = build()
            try:
                _save(paths, names, description, arrays)
            except OSError as error:
                raise DataError(
                    f"cannot write the index cache in {cache_dir} ({error.strerror or error}); "
                    f"pass a writable folder as the data cache path"
                ) from error
    if barrier is not None:
        barrier()
    arrays = _load(paths, names, description, valid)
    if arrays is None:
        raise DataError(
            f"index cache {paths['description']} is missing or malformed after rank 0 built it; "
            f"the cache folder must be one every rank can read (a shared file system)"
        )
    return arrays


def load_or_build_indices(
    sizes: np.ndarray,
    prefixes: Sequence[str],
    seq_length: int,
    num_samples: int,
    seed: int,
    cache_dir: str | None = None,
    rank: Callable[[], int] | None = None,
    barrier: Callable[[], None] | None = None,
    use_cpp: bool | None = None,
):
    """(document_index, sample_index, shuffle_index), from the cache when a valid entry exists."""

    def valid(arrays) -> bool:
        document_index, sample_index, shuffle_index = arrays
        return (
            document_index.ndim == 1
            and sample_index.ndim == 2
            and sample_index.shape[1] == 2
            and shuffle_index.shape == (len(sample_index),)
            and len(sample_index) >= num_samples
        )

    description = {} if cache_dir is None else describe(sizes, prefixes, seq_length, num_samples, seed)
    return cached_arrays(
        cache_dir,
        "index",
        ARRAY_NAMES,
        description,
        lambda: build_indices(sizes, seq_length, num_samples, seed, use_cpp=use_cpp),
        valid,
        rank,
        barrier,
    )

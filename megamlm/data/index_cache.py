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
INDEX_FORMAT_VERSION = 1
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


def _paths(cache_dir: str, key: str) -> dict[str, Path]:
    base = Path(cache_dir)
    paths = {name: base / f"index-{key}-{name}.npy" for name in ARRAY_NAMES}
    paths["description"] = base / f"index-{key}-description.json"
    return paths


def _load(paths: dict[str, Path], description: dict):
    """The three arrays memory-mapped, or None when the entry is absent, stale or malformed."""
    try:
        stored = json.loads(paths["description"].read_text())
    except (OSError, ValueError):
        return None
    if stored != description:
        return None
    try:
        arrays = tuple(np.load(paths[name], mmap_mode="r") for name in ARRAY_NAMES)
    except (OSError, ValueError):
        return None
    document_index, sample_index, shuffle_index = arrays
    windows = len(sample_index)
    if (
        document_index.ndim != 1
        or sample_index.ndim != 2
        or sample_index.shape[1] != 2
        or shuffle_index.shape != (windows,)
        or windows < description["num_samples"]
    ):
        return None
    return arrays


def _save(paths: dict[str, Path], description: dict, arrays) -> None:
    paths["description"].parent.mkdir(parents=True, exist_ok=True)
    # The description goes last: its presence means the arrays are complete.
    for name, array in zip(ARRAY_NAMES, arrays):
        tmp = paths[name].with_name(paths[name].name + f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            np.save(f, array)
        os.replace(tmp, paths[name])
    tmp = paths["description"].with_name(paths["description"].name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(description, indent=1, sort_keys=True))
    os.replace(tmp, paths["description"])


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
    if cache_dir is None:
        return build_indices(sizes, seq_length, num_samples, seed, use_cpp=use_cpp)
    description = describe(sizes, prefixes, seq_length, num_samples, seed)
    paths = _paths(cache_dir, cache_key(description))
    is_builder = rank is None or rank() == 0
    if is_builder and _load(paths, description) is None:
        _save(paths, description, build_indices(sizes, seq_length, num_samples, seed, use_cpp=use_cpp))
    if barrier is not None:
        barrier()
    arrays = _load(paths, description)
    if arrays is None:
        raise DataError(
            f"sample index cache {paths['description']} is missing or malformed after rank 0 built it; "
            f"the cache folder must be one every rank can read (a shared file system)"
        )
    return arrays

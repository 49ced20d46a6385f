"""Cache of index arrays as .npy files named by a hash of everything that determines them.

The sample index of a corpus is cached one epoch per entry (`index-<key>-*.npy`), the key hashed
from (document sizes, seq_length, seed, epoch, INDEX_FORMAT_VERSION): a run builds only the
epochs it needs, and a longer run reuses a shorter run's epochs. The blend interleave is cached
per set of weights (`blend-<key>-*.npy`) and grown when a run needs more of it; it is
prefix-stable, so its length never changes its first samples.

The process whose `rank()` is 0 builds (or validates) the entries; every process then waits at
`barrier()` (once) and memory-maps the files. Each entry's description also records its arrays'
shapes, dtypes and CRC-32s when written; on read, rank 0 recomputes them and checks the arrays'
structure (indices in range, shuffles that are permutations), and an entry that fails any check is
a warning and a rebuild, never reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np

from megamlm.data.indexed import DataError
from megamlm.data.sample_index import EpochIndex, build_epoch, windows_per_epoch
from megamlm.log import log

# Bump when the way the arrays are built changes: old cache entries then get new names (and an
# entry whose description names another version is rebuilt).
# 3: one entry per epoch, each epoch its own seeded permutation (2: all epochs shuffled together).
INDEX_FORMAT_VERSION = 3
ARRAY_NAMES = EpochIndex._fields  # ("document_order", "sample_index", "shuffle_index")


def document_sizes_digest(sizes: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(sizes, dtype=np.int32).tobytes(), digest_size=16).hexdigest()


def describe_epoch(sizes_digest: str, num_documents: int, num_tokens: int, seq_length: int, seed: int,
                   epoch: int) -> dict:
    """Everything that determines one epoch's arrays (hashed into the cache entry's name)."""
    return {
        "format_version": INDEX_FORMAT_VERSION,
        "document_sizes_blake2b": sizes_digest,
        "num_documents": int(num_documents),
        "num_tokens": int(num_tokens),
        "seq_length": int(seq_length),
        "seed": int(seed),
        "epoch": int(epoch),
    }


def cache_key(description: dict) -> str:
    text = json.dumps(description, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _paths(cache_dir: str, kind: str, key: str, names: Sequence[str]) -> dict[str, Path]:
    base = Path(cache_dir)
    paths = {name: base / f"{kind}-{key}-{name}.npy" for name in names}
    paths["description"] = base / f"{kind}-{key}-description.json"
    return paths


def checksum(array: np.ndarray) -> int:
    """CRC-32 of an array's bytes: cheap (several GB/s) and enough to catch a zeroed, truncated or edited file."""
    return zlib.crc32(memoryview(np.ascontiguousarray(array)).cast("B"))


def _record(names: Sequence[str], arrays) -> dict:
    return {name: {"shape": list(a.shape), "dtype": str(a.dtype), "crc32": checksum(a)}
            for name, a in zip(names, arrays)}


def _load(paths: dict[str, Path], names: Sequence[str], description: dict, valid: Callable[[tuple], bool],
          verify: bool = True, enough: Callable[[tuple], bool] | None = None):
    """(arrays memory-mapped, None), or (None, why the entry cannot be used): absent (why is None), or damaged.

    The description file records what the arrays were built from and, since checksums were added, each array's
    shape, dtype and CRC-32; ``verify`` re-computes those and runs ``valid``'s structural checks (indices in range,
    a shuffle that is a permutation). A whole entry too short for this request (``enough``) is absent, not damaged."""
    if not paths["description"].exists():
        return None, None
    try:
        stored = json.loads(paths["description"].read_text())
        written = stored.pop("arrays")
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None, "its description is unreadable or was written without checksums (an earlier megamlm)"
    if stored != description:
        return None, "its description does not match the data and settings it is named by"
    try:
        arrays = tuple(np.load(paths[name], mmap_mode="r") for name in names)
    except (OSError, ValueError) as err:
        return None, f"an array file is unreadable ({err})"
    for name, array in zip(names, arrays):
        record = written.get(name) if isinstance(written, dict) else None
        if not record or list(array.shape) != record.get("shape") or str(array.dtype) != record.get("dtype"):
            return None, f"{paths[name].name} has another shape or dtype than was written"
        if verify and checksum(array) != record.get("crc32"):
            return None, f"{paths[name].name} does not match its checksum (changed since it was written)"
    if verify and not valid(arrays):
        return None, "its arrays are not a valid index (entries out of range, or a shuffle that is not a permutation)"
    if enough is not None and not enough(arrays):
        return None, None
    return arrays, None


def _save(paths: dict[str, Path], names: Sequence[str], description: dict, arrays) -> None:
    paths["description"].parent.mkdir(parents=True, exist_ok=True)
    # The description goes last: its presence means the arrays are complete.
    for name, array in zip(names, arrays):
        tmp = paths[name].with_name(paths[name].name + f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            np.save(f, array)
        os.replace(tmp, paths[name])
    tmp = paths["description"].with_name(paths["description"].name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({**description, "arrays": _record(names, arrays)}, indent=1, sort_keys=True))
    os.replace(tmp, paths["description"])


class CacheEntry(NamedTuple):
    """One cached set of arrays: what determines them, how to build them, how to check them."""

    description: dict
    build: Callable[[], tuple]
    valid: Callable[[tuple], bool]
    """Structure checks of the arrays read back (indices in range, permutations); failing is damage."""
    enough: Callable[[tuple], bool] | None = None
    """Whether a whole entry serves this request (a blend long enough); failing rebuilds it without a warning."""


def cached_entries(
    cache_dir: str | None,
    kind: str,
    names: Sequence[str],
    entries: Sequence[CacheEntry],
    rank: Callable[[], int] | None = None,
    barrier: Callable[[], None] | None = None,
) -> list[tuple]:
    """The arrays of every entry, each cached under a name hashed from its description when `cache_dir` is set.

    Rank 0 (or the only process, when `rank` is None) validates each entry and rebuilds it if it
    is missing, stale or malformed, one at a time (only one entry's arrays are in its memory at
    once); all ranks then pass `barrier()` once and memory-map them.
    """
    if cache_dir is None:
        return [tuple(entry.build()) for entry in entries]
    all_paths = [_paths(cache_dir, kind, cache_key(entry.description), names) for entry in entries]
    if rank is None or rank() == 0:
        for entry, paths in zip(entries, all_paths):
            arrays, damage = _load(paths, names, entry.description, entry.valid, enough=entry.enough)
            if arrays is not None:
                continue
            if damage is not None:
                log(f"warning: index cache entry {paths['description']} is not used: {damage}; rebuilding it")
            arrays = entry.build()
            try:
                _save(paths, names, entry.description, arrays)
            except OSError as error:
                raise DataError(
                    f"cannot write the index cache in {cache_dir} ({error.strerror or error}); "
                    f"pass a writable folder as the data cache path"
                ) from error
            del arrays
    if barrier is not None:
        barrier()
    loaded = []
    for entry, paths in zip(entries, all_paths):
        # Rank 0 verified or built it: the others check only its description and shapes.
        arrays, _ = _load(paths, names, entry.description, entry.valid, verify=False, enough=entry.enough)
        if arrays is None:
            raise DataError(
                f"index cache {paths['description']} is missing or malformed after rank 0 built it; "
                f"the cache folder must be one every rank can read (a shared file system)"
            )
        loaded.append(arrays)
    return loaded


def in_range(values: np.ndarray, low: int, high: int) -> bool:
    """Every value in [low, high) (True for no values)."""
    return values.size == 0 or (int(values.min()) >= low and int(values.max()) < high)


def is_permutation_like(values: np.ndarray) -> bool:
    """Values in [0, n) that sum to 0 + 1 + ... + n-1: a one-pass check that rejects a zeroed, repeated or
    out-of-range shuffle without allocating n counters (the checksum catches the rest, e.g. a swap)."""
    n = values.size
    return in_range(values, 0, n) and int(np.sum(values, dtype=np.int64)) == n * (n - 1) // 2


def load_or_build_epochs(
    sizes: np.ndarray,
    seq_length: int,
    seed: int,
    num_epochs: int,
    cache_dir: str | None = None,
    rank: Callable[[], int] | None = None,
    barrier: Callable[[], None] | None = None,
    use_cpp: bool | None = None,
) -> list[EpochIndex]:
    """The EpochIndex of epochs 0 .. num_epochs - 1, each from the cache when a valid entry exists."""
    sizes = np.ascontiguousarray(sizes, dtype=np.int32)
    num_tokens = int(sizes.sum(dtype=np.int64))
    windows = windows_per_epoch(num_tokens, seq_length)
    digest = document_sizes_digest(sizes) if cache_dir is not None else ""

    def valid(arrays) -> bool:
        document_order, sample_index, shuffle_index = arrays
        return (
            document_order.shape == (len(sizes),)
            and sample_index.shape == (windows, 2)
            and shuffle_index.shape == (windows,)
            and is_permutation_like(document_order)
            and is_permutation_like(shuffle_index)
            and in_range(sample_index[:, 0], 0, len(sizes))
            and in_range(sample_index[:, 1], 0, max(int(sizes.max(initial=0)), 1))
        )

    def entry(epoch: int) -> CacheEntry:
        description = describe_epoch(digest, len(sizes), num_tokens, seq_length, seed, epoch)
        return CacheEntry(description, lambda: build_epoch(sizes, seq_length, seed, epoch, use_cpp=use_cpp), valid)

    arrays = cached_entries(cache_dir, "index", ARRAY_NAMES, [entry(e) for e in range(num_epochs)], rank, barrier)
    return [EpochIndex(*a) for a in arrays]

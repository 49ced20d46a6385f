"""When a checkpoint counts: per-rank completion files, a completion marker with checksums, verification.

Every rank hashes its share of the shard files once DCP has written them and leaves a completion file;
rank 0 then merges those into ``COMPLETE.json`` together with the checksums of its own files. The marker
is the last file written into the checkpoint, so a folder with a marker whose files match it is whole.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from megamlm.checkpoint.untrusted import read_metadata
from megamlm.errors import CheckpointError

MARKER = "COMPLETE.json"
MARKER_FORMAT = 1
_RANK_DONE_PREFIX = ".done_rank"


def file_digest(path: Path, chunk_bytes: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def describe_files(folder: Path, names: list[str]) -> dict[str, dict]:
    return {name: {"bytes": (folder / name).stat().st_size, "sha256": file_digest(folder / name)} for name in names}


def share_of(names: list[str], rank: int, world_size: int) -> list[str]:
    """The files rank ``rank`` hashes or checks: every world_size-th of the sorted list."""
    return sorted(names)[rank::world_size]


def write_json_durably(path: Path, data: dict) -> None:
    """Write, fsync, then rename into place: a reader sees the old file or the whole new one."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def rank_done_path(folder: Path, rank: int) -> Path:
    return folder / f"{_RANK_DONE_PREFIX}{rank:05d}.json"


def write_rank_completion(folder: Path, rank: int, names: list[str]) -> None:
    """Rank ``rank`` hashed ``names`` (its share of the shards) and says so."""
    write_json_durably(rank_done_path(folder, rank), {"rank": rank, "files": describe_files(folder, names)})


def write_marker(folder: Path, step: int, world_size: int, own_files: list[str], extra: dict) -> None:
    """Rank 0, after every rank's completion file exists: merge them and write the marker last."""
    files: dict[str, dict] = {}
    for r in range(world_size):
        path = rank_done_path(folder, r)
        if not path.is_file():
            raise OSError(f"rank {r} left no completion file {path.name}; its part of the checkpoint is missing")
        files.update(json.loads(path.read_text())["files"])
    files.update(describe_files(folder, own_files))
    write_json_durably(folder / MARKER, {"format": MARKER_FORMAT, "step": step, "world_size": world_size,
                                         "files": files, **extra})
    for r in range(world_size):
        rank_done_path(folder, r).unlink()
    fsync_dir(folder)


def read_marker(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def verify(folder: Path, deep: bool = True, rank: int = 0, world_size: int = 1) -> str | None:
    """Why ``folder`` is not a whole checkpoint, or None when it is.

    Sizes of every file are always checked; with ``deep`` this rank also re-hashes its share of the files
    (``rank``/``world_size`` split the hashing so each rank reads only part of the checkpoint).
    """
    if not (folder / MARKER).exists():
        return "no completion marker (it was interrupted while saving)"
    marker = read_marker(folder)
    if marker is None or not isinstance(marker.get("files"), dict):
        return f"its completion marker {MARKER} is unreadable"
    files = marker["files"]
    for name, expected in sorted(files.items()):
        path = folder / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return f"file {name} is missing"
        if size != expected["bytes"]:
            return f"file {name} has {size} bytes where {expected['bytes']} were written (truncated or overwritten)"
    if deep:
        for name in share_of(list(files), rank, world_size):
            try:
                digest = file_digest(folder / name)
            except FileNotFoundError:  # deleted while being checked (the run retired it)
                return f"file {name} is missing"
            if digest != files[name]["sha256"]:
                return f"file {name} does not match its checksum (corrupt)"
    return None


def verify_unmarked(folder: Path, readable: tuple[str, ...]) -> str | None:
    """Why a checkpoint written before completion markers existed is damaged, or None.

    Without checksums this checks the structure: DCP's ``.metadata`` reads (admitting only the classes DCP writes),
    every shard file it names exists and is long enough for every byte range it records, and the ``readable`` JSON
    files parse. (A flipped byte inside a shard goes unnoticed: only a marker's checksums catch that.)
    """
    try:
        metadata = read_metadata(folder / ".metadata")  # the allow-list first: reading it runs nothing
    except CheckpointError as err:
        return str(err)
    except Exception as err:  # a truncated or overwritten pickle raises many types
        return f"its .metadata is unreadable ({type(err).__name__}: {err})"
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(needed.items()):
        try:
            actual = (folder / name).stat().st_size
        except FileNotFoundError:
            return f"file {name} is missing"
        if actual < size:
            return f"file {name} has {actual} bytes where its records need {size} (truncated)"
    for name in readable:
        try:
            json.loads((folder / name).read_text())
        except FileNotFoundError:
            continue  # REQUIRED files are checked by the caller; a train state may be the older .pt
        except (OSError, ValueError) as err:
            return f"file {name} is unreadable ({err})"
    return None


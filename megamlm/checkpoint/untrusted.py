"""Reading a checkpoint that anyone may have written: nothing in its files is executed.

Checkpoints are shared and downloaded (``--init-from``, ``--load``, ``--continue-from``, ``convert_to_hf.py``),
and three of their files are pickles, which can name any Python callable to run while they are read:

- DCP's ``.metadata``: unpickled here first with an allow-list of the classes DCP writes into it
  (``METADATA_GLOBALS``); any other global refuses the checkpoint before DCP reads it (``VettedReader``).
- Non-tensor values in the DCP shards (the optimizer's hyperparameters), which DCP itself reads with
  ``torch.load(weights_only=False)``: read with ``weights_only=True`` first (``VettedLoadPlanner``).
- ``rng_rank*.pt`` and megamlm 0.1's ``train_state.pt``: ``torch.load(weights_only=True)``, which admits tensors,
  numbers, strings and containers, plus the numpy arrays of the RNG states earlier versions wrote
  (``load_tensors``).

A refusal is a ``CheckpointError`` of one line naming the file and the global it refers to.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path

import numpy as np
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

from megamlm.errors import CheckpointError

_DCP_METADATA = "torch.distributed.checkpoint.metadata"
METADATA_GLOBALS = frozenset({
    *((_DCP_METADATA, name) for name in (
        "Metadata", "MetadataIndex", "StorageMeta", "TensorStorageMetadata", "BytesStorageMetadata",
        "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING")),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # a lookup of torch.strided & co. by name
    ("collections", "OrderedDict"),
    *(("pathlib", name) for name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")),
    *(("pathlib._local", name) for name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")),
})
"""What DCP pickles into ``.metadata`` (found by listing the globals of a saved model + AdamW checkpoint), besides
the torch dtypes (``torch.float32``, ...), which are admitted by type."""

SHARE_ADVICE = ("a checkpoint is safe to share only as a Hugging Face safetensors export (tools/convert_to_hf.py); "
                "get this one again from its source")


def refusal(path: Path | str, what: str) -> CheckpointError:
    return CheckpointError(f"{path} {what}, which a megamlm checkpoint never holds: reading it could run code, so it "
                           f"is not read; {SHARE_ADVICE}")


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file, path):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str):
        if (module, name) in METADATA_GLOBALS or (
                module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        raise refusal(self.path, f"refers to the Python global {module}.{name}")


def read_metadata(path: str | Path):
    """DCP's ``Metadata`` from a ``.metadata`` file, built from the allow-listed classes only.

    A CheckpointError for any other global; a damaged file raises what ``pickle`` raises for it."""
    path = Path(path)
    with open(path, "rb") as f:
        metadata = _MetadataUnpickler(f, path).load()
    if type(metadata).__name__ != "Metadata":
        raise CheckpointError(f"{path} holds a {type(metadata).__name__}, not DCP metadata; {SHARE_ADVICE}")
    return metadata


class VettedReader(FileSystemReader):
    """DCP's file reader, whose ``.metadata`` passes the allow-list before DCP unpickles it.

    DCP turns a failed read into a fallback and then a generic error: a refusal is also kept in ``refused``."""

    refused: CheckpointError | None = None

    def read_metadata(self, *args, **kwargs):
        try:
            read_metadata(self._get_metadata_path(kwargs.get("rank")))
        except CheckpointError as err:
            self.refused = err
            raise
        return super().read_metadata(*args, **kwargs)


class VettedLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner, whose non-tensor values pass ``torch.load(weights_only=True)`` before DCP reads them."""

    def __init__(self, folder: Path | str, **kwargs):
        super().__init__(**kwargs)
        self.folder = folder

    refused: CheckpointError | None = None

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        try:
            _weights_only(value, f"the value {read_item.dest_index.fqn!r} in the shards of {self.folder}")
        except CheckpointError as err:
            self.refused = err
            raise
        value.seek(0)
        super().load_bytes(read_item, value)


def _numpy_array_globals() -> list:
    """What a numpy array pickles as (its reconstructor, class and dtype): admitted for the RNG states of
    checkpoints written before megamlm stored them as tensors."""
    reconstruct = np.zeros(1).__reduce__()[0]
    return [reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


_UNSUPPORTED = re.compile(r"GLOBAL ([\w.]+)")


def _weights_only(source, where: str, numpy_arrays: bool = False):
    try:
        if numpy_arrays:
            with torch.serialization.safe_globals(_numpy_array_globals()):
                return torch.load(source, map_location="cpu", weights_only=True)
        return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = _UNSUPPORTED.search(str(err))
        detail = f"the Python global {found.group(1)}" if found else "objects other than tensors and numbers"
        raise refusal(where, f"refers to {detail}") from None


def load_tensors(path: Path) -> object:
    """A ``.pt`` file of a checkpoint (RNG states, megamlm 0.1's train state): tensors, numbers, strings, containers
    and numpy arrays only; a CheckpointError for anything else."""
    return _weights_only(path, str(path), numpy_arrays=True)


def unsafe_content(folder: Path, rank: int = 0, world_size: int = 1) -> str | None:
    """Why reading ``folder``'s pickles could run code, or None: its ``.metadata`` through the allow-list and this
    rank's share (every ``world_size``-th) of its ``.pt`` files with ``weights_only``. The caller has checked the
    files are whole (a damaged one reads as None here: that is the integrity checks' to report)."""
    try:
        read_metadata(folder / ".metadata")
        for path in sorted(folder.glob("*.pt"))[rank::world_size]:
            load_tensors(path)
    except CheckpointError as err:
        return str(err)
    except Exception:  # noqa: BLE001 - damage, not danger
        return None
    return None

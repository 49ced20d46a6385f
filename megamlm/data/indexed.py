"""Megatron's indexed dataset format (.bin/.idx), byte for byte.

`.idx` layout (all little-endian):
    9 bytes  magic b"MMIDIDX\\x00\\x00"
    <Q       version (1)
    <B       token dtype code (see DTYPE_CODES)
    <Q       sequence count N
    <Q       document count D (entries of the document index, i.e. documents + 1)
    int32[N] sequence lengths in tokens
    int64[N] byte offset of each sequence in the .bin
    int64[D] document index: sequence number at which each document starts, then N
`.bin`: the tokens of all sequences, back to back, in the token dtype.

A document made by `add_document` is one sequence; Megatron's `--split-sentences` makes
documents of several sequences, which this reader also opens.
"""

from __future__ import annotations

import array
import os
import struct
from pathlib import Path

import numpy as np

from megamlm.errors import UserError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_BYTES = len(MAGIC) + 8 + 1 + 8 + 8

DTYPE_CODES: dict[int, type] = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
_CODE_OF_DTYPE = {np.dtype(t): c for c, t in DTYPE_CODES.items()}
_REBUILD_HINT = "rebuild it with tools/preprocess_data.py"


class DataError(UserError, ValueError):
    """A problem with a dataset file or data setting the user can fix; the message says how."""


def best_dtype(vocab_size: int | None) -> type:
    """Smallest token dtype Megatron picks for a vocabulary: uint16 below 65,500 ids, else int32."""
    if vocab_size is not None and vocab_size < 65500:
        return np.uint16
    return np.int32


def dtype_code(dtype) -> int:
    try:
        return _CODE_OF_DTYPE[np.dtype(dtype)]
    except KeyError:
        raise DataError(
            f"token dtype {np.dtype(dtype)} has no code in Megatron's format; "
            f"use one of {sorted(str(np.dtype(t)) for t in DTYPE_CODES.values())}"
        ) from None


def strip_suffix(prefix: str | os.PathLike) -> str:
    """Accept 'corpus', 'corpus.bin' or 'corpus.idx' and return 'corpus'."""
    prefix = str(prefix)
    for suffix in (".bin", ".idx"):
        if prefix.endswith(suffix):
            return prefix[: -len(suffix)]
    return prefix


def idx_path(prefix) -> str:
    return strip_suffix(prefix) + ".idx"


def bin_path(prefix) -> str:
    return strip_suffix(prefix) + ".bin"


def write_index(path: str, dtype, sequence_lengths, document_indices) -> None:
    """Write an .idx file for sequences stored back to back in `dtype`."""
    lengths = np.asarray(sequence_lengths, dtype=np.int32)
    documents = np.asarray(document_indices, dtype=np.int64)
    if lengths.ndim != 1 or documents.ndim != 1:
        raise DataError("sequence lengths and document indices must be 1-D")
    itemsize = np.dtype(dtype).itemsize
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1].astype(np.int64) * itemsize, out=pointers[1:])
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", VERSION))
        f.write(struct.pack("<B", dtype_code(dtype)))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(documents)))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(documents.tobytes(order="C"))


def require_dataset_files(prefix: str | os.PathLike) -> tuple[str, str]:
    """The (.idx, .bin) paths of ``prefix``, both readable; else a DataError naming the first missing or unreadable
    file (checked before anything else reads the dataset, its sidecar included, so the message names the file)."""
    prefix = strip_suffix(prefix)
    idx_file, bin_file = idx_path(prefix), bin_path(prefix)
    for path in (idx_file, bin_file):
        if not os.path.isfile(path):
            raise DataError(
                f"dataset file {path} not found; --data-path takes the prefix shared by the .bin and .idx "
                f"files (e.g. out/corpus_text_document), made by tools/preprocess_data.py"
            )
        try:
            open(path, "rb").close()
        except OSError as err:
            raise DataError(f"cannot read dataset file {path}: {err.strerror or err}; give this user read access "
                            "(e.g. chmod a+r) or copy the data somewhere readable") from None
    return idx_file, bin_file


class IndexedDatasetWriter:
    """Writes `<prefix>.bin` and `<prefix>.idx`.

    Both files are written under temporary names and renamed by `finalize()`, so a crash
    never leaves a half-written dataset under the final name.

        with IndexedDatasetWriter("corpus_text_document", np.uint16) as w:
            w.add_document([5, 6, 7])
    """

    def __init__(self, prefix: str | os.PathLike, dtype=np.int32):
        self.prefix = strip_suffix(prefix)
        self.dtype = np.dtype(dtype)
        dtype_code(self.dtype)  # fail early on a dtype the format cannot name
        Path(self.prefix).parent.mkdir(parents=True, exist_ok=True)
        self._tmp_suffix = f".tmp{os.getpid()}"
        self._bin_tmp = bin_path(self.prefix) + self._tmp_suffix
        self._bin = open(self._bin_tmp, "wb")
        # Compact growable arrays (4 and 8 bytes per entry): merging shards of 100M+ sequences
        # would take tens of GB as Python lists.
        self.sequence_lengths = array.array("i")
        self.document_indices = array.array("q", [0])
        self._finalized = False

    def _as_tokens(self, ids) -> np.ndarray:
        source = np.asarray(ids)
        if source.ndim != 1:
            raise DataError(f"a sequence must be a 1-D list of token ids, got shape {source.shape}")
        if source.size and source.dtype != self.dtype and np.issubdtype(self.dtype, np.integer):
            info = np.iinfo(self.dtype)
            if source.min() < info.min or source.max() > info.max:
                raise DataError(
                    f"token id {source.max() if source.max() > info.max else source.min()} does not fit {self.dtype} "
                    f"in {self.prefix}.bin; write with a wider dtype (best_dtype(vocab_size))"
                )
        return source.astype(self.dtype, copy=False)

    def add_item(self, ids) -> None:
        """Append one sequence to the current document (Megatron's `add_item`)."""
        tokens = self._as_tokens(ids)
        self._bin.write(tokens.tobytes(order="C"))
        self.sequence_lengths.append(int(tokens.size))

    def end_document(self) -> None:
        """Close the current document (Megatron's `end_document`)."""
        self.document_indices.append(len(self.sequence_lengths))

    def add_document(self, ids, lengths=None) -> None:
        """Append a document: one sequence, or several when `lengths` splits `ids`."""
        tokens = self._as_tokens(ids)
        if lengths is None:
            self.add_item(tokens)
        else:
            if int(np.sum(lengths)) != tokens.size:
                raise DataError(f"sequence lengths {list(lengths)} do not add up to {tokens.size} tokens")
            start = 0
            for length in lengths:
                self.add_item(tokens[start : start + length])
                start += length
        self.end_document()

    def add_index(self, other_prefix: str | os.PathLike) -> None:
        """Append every sequence and document of another dataset with the same dtype."""
        other = IndexedDataset(other_prefix)
        if other.dtype != self.dtype:
            raise DataError(
                f"cannot merge {other.prefix} ({other.dtype}) into {self.prefix} ({self.dtype}); "
                f"all shards must share one token dtype"
            )
        offset = len(self.sequence_lengths)
        self.sequence_lengths.frombytes(np.ascontiguousarray(other.sequence_lengths, dtype=np.int32).tobytes())
        self.document_indices.frombytes((other.document_indices[1:] + offset).astype(np.int64).tobytes())
        with open(bin_path(other.prefix), "rb") as src:
            while chunk := src.read(64 << 20):
                self._bin.write(chunk)

    def finalize(self) -> None:
        """Write the index and move both files to their final names."""
        if self._finalized:
            return
        if self.document_indices[-1] != len(self.sequence_lengths):
            self.end_document()  # sequences added with add_item but no end_document
        self._bin.close()
        idx_tmp = idx_path(self.prefix) + self._tmp_suffix
        write_index(idx_tmp, self.dtype, self.sequence_lengths, self.document_indices)
        os.replace(self._bin_tmp, bin_path(self.prefix))
        os.replace(idx_tmp, idx_path(self.prefix))
        self._finalized = True

    def abort(self) -> None:
        """Drop the temporary files; nothing under the final names is touched."""
        if not self._bin.closed:
            self._bin.close()
        for path in (self._bin_tmp, idx_path(self.prefix) + self._tmp_suffix):
            if os.path.exists(path):
                os.remove(path)
        self._finalized = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finalize()
        else:
            self.abort()


class IndexedDataset:
    """Memory-mapped reader of a Megatron `.bin/.idx` pair.

    `ds[i]` is sequence i as a numpy array in the file's dtype; `ds.get(i, offset, length)`
    reads part of it without touching the rest.
    """

    def __init__(self, prefix: str | os.PathLike, validate: bool = True):
        self.prefix = strip_suffix(prefix)
        idx_file, bin_file = require_dataset_files(self.prefix)

        idx_size = os.path.getsize(idx_file)
        if idx_size < HEADER_BYTES:
            raise DataError(f"{idx_file} is truncated ({idx_size} bytes, the header alone is {HEADER_BYTES}); "
                            f"{_REBUILD_HINT}")
        with open(idx_file, "rb") as f:
            header = f.read(HEADER_BYTES)
        if header[: len(MAGIC)] != MAGIC:
            raise DataError(
                f"{idx_file} is not a Megatron indexed dataset (magic {header[:len(MAGIC)]!r}, expected {MAGIC!r}); "
                f"{_REBUILD_HINT}"
            )
        position = len(MAGIC)
        (version,) = struct.unpack_from("<Q", header, position)
        if version != VERSION:
            raise DataError(f"{idx_file} has index version {version}; only version {VERSION} exists; {_REBUILD_HINT}")
        (code,) = struct.unpack_from("<B", header, position + 8)
        if code not in DTYPE_CODES:
            raise DataError(f"{idx_file} names unknown token dtype code {code}; {_REBUILD_HINT}")
        self.dtype = np.dtype(DTYPE_CODES[code])
        sequence_count, document_count = struct.unpack_from("<QQ", header, position + 9)
        expected = HEADER_BYTES + sequence_count * (4 + 8) + document_count * 8
        if idx_size == expected + sequence_count and sequence_count:
            raise DataError(
                f"{idx_file} is a multimodal index (it carries per-sequence modes), which megamlm does not read; "
                f"preprocess the text without multimodal modes"
            )
        if idx_size != expected:
            raise DataError(
                f"{idx_file} is {idx_size} bytes but its header announces {sequence_count} sequences and "
                f"{document_count} document entries ({expected} bytes): the file is truncated or corrupt; "
                f"{_REBUILD_HINT}"
            )
        self._idx = np.memmap(idx_file, mode="r", dtype=np.uint8)
        self.sequence_lengths = np.frombuffer(self._idx, dtype=np.int32, count=sequence_count, offset=HEADER_BYTES)
        self.sequence_pointers = np.frombuffer(
            self._idx, dtype=np.int64, count=sequence_count, offset=HEADER_BYTES + 4 * sequence_count
        )
        self.document_indices = np.frombuffer(
            self._idx, dtype=np.int64, count=document_count, offset=HEADER_BYTES + 12 * sequence_count
        )
        bin_size = os.path.getsize(bin_file)
        if sequence_count:
            expected_bin = int(self.sequence_pointers[-1]) + int(self.sequence_lengths[-1]) * self.dtype.itemsize
        else:
            expected_bin = 0
        if bin_size != expected_bin:
            raise DataError(
                f"{bin_file} is {bin_size} bytes but {idx_file} describes {expected_bin} bytes: the .bin and .idx "
                f"do not belong together or one is truncated; {_REBUILD_HINT}"
            )
        if validate:
            self._validate(idx_file)
        # np.memmap refuses empty files; an empty dataset simply has no sequences to read.
        self._bin = np.memmap(bin_file, mode="r", dtype=np.uint8) if bin_size else np.zeros(0, np.uint8)

    def _validate(self, idx_file: str) -> None:
        """O(N) consistency checks, in chunks so that huge indexes stay cheap in memory."""
        documents = self.document_indices
        n = len(self.sequence_lengths)
        if len(documents) == 0 or documents[0] != 0 or documents[-1] != n:
            raise DataError(
                f"{idx_file} has a corrupt document index (it must start at 0 and end at {n}); {_REBUILD_HINT}"
            )
        chunk = 1 << 24
        for start in range(0, len(documents), chunk):
            part = documents[max(start - 1, 0) : start + chunk]
            if np.any(np.diff(part) < 0):
                raise DataError(f"{idx_file} has a decreasing document index; {_REBUILD_HINT}")
        itemsize = self.dtype.itemsize
        running = 0
        for start in range(0, n, chunk):
            lengths = self.sequence_lengths[start : start + chunk].astype(np.int64)
            if np.any(lengths < 0):
                raise DataError(f"{idx_file} has negative sequence lengths; {_REBUILD_HINT}")
            expected = np.empty_like(lengths)
            expected[0] = running
            np.cumsum(lengths[:-1] * itemsize, out=expected[1:])
            expected[1:] += running
            if not np.array_equal(expected, self.sequence_pointers[start : start + chunk]):
                raise DataError(f"{idx_file} has sequence pointers that disagree with its lengths; {_REBUILD_HINT}")
            running = int(expected[-1] + lengths[-1] * itemsize)

    def __len__(self) -> int:
        return len(self.sequence_lengths)

    @property
    def num_tokens(self) -> int:
        return int(self.sequence_lengths.sum(dtype=np.int64))

    @property
    def num_documents(self) -> int:
        return len(self.document_indices) - 1

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens [offset, offset + length) of sequence i."""
        size = int(self.sequence_lengths[i])
        if length is None:
            length = size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise IndexError(f"tokens [{offset}, {offset + length}) are outside sequence {i} of {size} tokens")
        start = int(self.sequence_pointers[i]) + offset * self.dtype.itemsize
        return np.frombuffer(self._bin, dtype=self.dtype, count=length, offset=start)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.get(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sequence {i} out of range for {self.prefix} with {n} sequences")
        return self.get(i)

    def tokens(self) -> np.ndarray:
        """Every token of the .bin as one flat memory-mapped array."""
        return np.frombuffer(self._bin, dtype=self.dtype) if len(self._bin) else np.zeros(0, self.dtype)

    def max_token_id(self, chunk_tokens: int = 1 << 26) -> int:
        """Largest token id in the .bin, scanned in chunks (reads the whole file); -1 when empty."""
        tokens = self.tokens()
        best = -1
        for start in range(0, len(tokens), chunk_tokens):
            best = max(best, int(tokens[start : start + chunk_tokens].max()))
        return best

    def __getstate__(self):
        # Reopen by name in worker processes instead of pickling the memory maps' contents.
        return {"prefix": self.prefix}

    def __setstate__(self, state):
        self.__init__(state["prefix"], validate=False)

    def __repr__(self) -> str:
        return f"IndexedDataset({self.prefix!r}, sequences={len(self)}, dtype={self.dtype})"

"""Samples that never split a document: ModernBERT's packed documents and Ettin's one document per row.

Epoch e of a corpus visits its documents in the seeded order ``sample_index.build_document_order`` gives it (the
order the windows of epoch e are cut from). Each document is cut at ``seq_length`` tokens and the rest of a longer
one is dropped: ModernBERT's and Ettin's loaders truncate every document to the sequence length before their
packer sees it (bert24 ``src/text_data.py``: ``truncation=True, max_length=max_seq_len``). Empty documents are
skipped, as their packer skips them. Then, per mode:

- ``packed_documents``: the documents, in that order, are best-fitted into rows of ``seq_length`` tokens over a
  window of open rows (``pack_rows``), as ModernBERT's packer best-fits them into the rows of a batch; the window
  is a fixed number of rows, not a batch, so a row never depends on the batch size;
- ``document_per_row``: each document is a row (Ettin: bert24 with its packer off).

The rest of a row is padding (token 0, document id -1) that no loss, mask or attention sees. Sample k is row
k - R_0 - ... - R_{e-1} of the epoch e holding it (R_e: the rows of epoch e): a pure function of (document sizes,
seq_length, seed, mode, k); each epoch covers every non-empty document once. Rows are not shuffled: the epoch's
order is already random, and the documents an epoch has left after its first n rows are those of rows n, n+1, ...
(what a later phase at another length packs again, ``document_streams.py``).
"""

from __future__ import annotations

import bisect
from typing import Sequence, get_args

import numpy as np

from megamlm.config.sections import SampleMode
from megamlm.data._helpers_loader import helpers_for
from megamlm.data.index_cache import CacheEntry, cached_entries, document_sizes_digest, in_range
from megamlm.data.indexed import DataError, IndexedDataset
from megamlm.data.sample_index import build_document_order
from megamlm.data.samples import CorpusFiles

WINDOWS, *_DOCUMENT_MODES = get_args(SampleMode)
DOCUMENT_MODES: tuple[str, ...] = tuple(_DOCUMENT_MODES)
"""The modes whose samples are whole documents (``--sample-mode``'s values but windows, declared in config)."""
PADDING_DOCUMENT = -1
"""The document id of a row's padding."""
# Bump when the way the rows are built changes: old cache entries then get new names.
# 2: packed_documents fills rows by best fit over OPEN_ROWS open rows (1: next fit).
DOCUMENT_FORMAT_VERSION = 2
OPEN_ROWS = 64
"""How many rows packed_documents keeps open to best-fit documents into (ModernBERT: the rows of a batch)."""
ARRAY_NAMES = ("order", "row_starts")


def pack_rows(lengths: np.ndarray, seq_length: int, mode: str,
              use_cpp: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(positions, row_starts): documents of these lengths (each 1 to ``seq_length``) into rows of ``seq_length``
    tokens; row r holds ``positions[row_starts[r]:row_starts[r + 1]]``, positions into ``lengths``.

    ``document_per_row``: one document a row, in order. ``packed_documents``: best fit over a window of open rows,
    as ModernBERT's packer fits each sequence into the fullest row of its batch that still has room for it; here the
    window is ``OPEN_ROWS`` rows, not a batch, so the rows do not depend on the batch size. Each document in order
    goes into the open row with the least room that holds it, or else opens a row (the fullest open row is emitted
    first when ``OPEN_ROWS`` are open); a row is emitted when full, the rows still open at the end in the order they
    were opened. The C++ helper packs when it is built (``use_cpp``; about 10x faster), else Python: the same rows.
    """
    if mode == "document_per_row":
        return np.arange(len(lengths), dtype=np.int64), np.arange(len(lengths) + 1, dtype=np.int64)
    helpers = helpers_for(use_cpp)
    if helpers is not None and hasattr(helpers, "pack_best_fit"):  # (a helper built before it packs in Python)
        positions, row_starts = np.empty(len(lengths), dtype=np.int64), np.empty(len(lengths) + 1, dtype=np.int64)
        rows = helpers.pack_best_fit(np.ascontiguousarray(lengths, dtype=np.int64), int(seq_length), OPEN_ROWS,
                                     positions, row_starts)
        return positions, row_starts[:rows + 1].copy()
    rows: list[list[int]] = []
    emitted: list[int] = []
    room: list[tuple[int, int]] = []  # (room left, row) of the open rows, least room first
    for position, length in enumerate(lengths.tolist()):
        at = bisect.bisect_left(room, (length, -1))
        if at < len(room):
            left, row = room.pop(at)
            rows[row].append(position)
        else:
            if len(room) == OPEN_ROWS:
                emitted.append(room.pop(0)[1])
            left, row = seq_length, len(rows)
            rows.append([position])
        if left > length:
            bisect.insort(room, (left - length, row))
        else:
            emitted.append(row)
    emitted += sorted(row for _, row in room)
    ordered = [rows[row] for row in emitted]
    row_starts = np.concatenate([[0], np.cumsum([len(r) for r in ordered])]).astype(np.int64)
    return np.asarray([p for r in ordered for p in r], dtype=np.int64), row_starts


def build_rows(sizes: np.ndarray, seq_length: int, seed: int, epoch: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(order: the epoch's non-empty documents, row by row, row_starts: where each row starts in it); the documents
    come in the epoch's seeded order."""
    order = build_document_order(len(sizes), seed, epoch)
    order = order[sizes[order] > 0]
    positions, row_starts = pack_rows(np.minimum(sizes[order], seq_length), seq_length, mode)
    return order[positions], row_starts


def _epoch_entry(sizes: np.ndarray, digest: str, seq_length: int, seed: int, mode: str, epoch: int) -> CacheEntry:
    description = {"format_version": DOCUMENT_FORMAT_VERSION, "sample_mode": mode,
                   "document_sizes_blake2b": digest, "num_documents": len(sizes),
                   "num_tokens": int(sizes.sum(dtype=np.int64)), "seq_length": int(seq_length), "seed": int(seed),
                   "epoch": int(epoch)}
    documents = int(np.count_nonzero(sizes))

    def valid(arrays) -> bool:
        order, row_starts = arrays
        return (order.shape == (documents,) and in_range(order, 0, len(sizes)) and bool(np.all(sizes[order] > 0))
                and len(np.unique(order)) == documents and len(row_starts) >= 2 and int(row_starts[0]) == 0
                and int(row_starts[-1]) == documents and bool(np.all(np.diff(row_starts) > 0)))

    return CacheEntry(description, lambda: build_rows(sizes, seq_length, seed, epoch, mode), valid)


def row_tokens(files: CorpusFiles, pieces: list[tuple[int, int, int]]) -> np.ndarray:
    """A row of ``files.seq_length`` tokens: the (document, offset, length) ``pieces`` one after the other, then
    padding (token 0)."""
    out = np.zeros(files.seq_length, dtype=np.int64)
    filled = 0
    for document, offset, length in pieces:
        out[filled:filled + length] = files.read(document, offset, length)
        filled += length
    return out


def row_document_ids(pieces: list[tuple[int, int, int]], seq_length: int) -> np.ndarray:
    """Per token of a row of these pieces, the number of its piece (0, 1, ...), then -1 on the padding."""
    lengths = [length for _, _, length in pieces]
    ids = np.full(seq_length, PADDING_DOCUMENT, dtype=np.int32)
    ids[:sum(lengths)] = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    return ids


class DocumentSampleDataset(CorpusFiles):
    """Sample k of a corpus in a document mode (the module docstring): ``seq_length`` tokens, padded.

    ``cache`` (``cache_dir``, ``rank``, ``barrier``) caches each epoch's rows as PackedSampleDataset caches its
    windows: named by a hash of what determines them, built by rank 0 while the others wait."""

    def __init__(self, datasets: IndexedDataset | Sequence[IndexedDataset], seq_length: int, num_samples: int,
                 seed: int, mode: str, sequences: tuple[int, int] | None = None, **cache):
        super().__init__(datasets, seq_length, num_samples, seed, sequences)
        if mode not in DOCUMENT_MODES:
            raise DataError(f"unknown sample mode {mode!r}; choose one of {WINDOWS}, {', '.join(DOCUMENT_MODES)}")
        self.mode = mode
        self.epochs: list[tuple[np.ndarray, np.ndarray]] = []
        self._epoch_starts = [0]  # the first sample of each epoch built, then the end of the last
        self._running: list[np.ndarray] = []  # per epoch, the tokens of its rows before each row (tokens_through)
        self._cache = dict(cache_dir=cache.get("cache_dir"), rank=cache.get("rank"), barrier=cache.get("barrier"))
        self._digest = document_sizes_digest(self.sizes) if self._cache["cache_dir"] is not None else ""
        self.ensure(self.num_samples)
        self.windows_per_epoch = self.rows_of(0)

    def ensure(self, count: int) -> None:
        """Build (or read from the cache) epochs until the first ``count`` samples are available."""
        while self._epoch_starts[-1] < count:
            entry = _epoch_entry(self.sizes, self._digest, self.seq_length, self.seed, self.mode, len(self.epochs))
            [(order, row_starts)] = cached_entries(self._cache["cache_dir"], "documents", ARRAY_NAMES, [entry],
                                                   self._cache["rank"], self._cache["barrier"])
            self.epochs.append((order, row_starts))
            self._epoch_starts.append(self._epoch_starts[-1] + len(row_starts) - 1)
        self.num_samples = max(self.num_samples, int(count))

    def epoch_start(self, epoch: int) -> int:
        """The first sample of ``epoch`` (the epochs before it built)."""
        while len(self.epochs) < epoch:
            self.ensure(self._epoch_starts[-1] + 1)
        return self._epoch_starts[epoch]

    def rows_of(self, epoch: int) -> int:
        return self._epoch_starts[epoch + 1] - self._epoch_starts[epoch]

    @property
    def num_epochs(self) -> int:
        return len(self.epochs)

    def first_pass_samples(self) -> int:
        """How many leading samples repeat no document: one epoch."""
        return self.rows_of(0)

    def locate(self, k: int) -> tuple[int, int]:
        """(epoch, row of that epoch) of global sample k."""
        if not 0 <= k < self.num_samples:
            raise IndexError(f"sample {k} out of range for {self.num_samples} samples")
        epoch = int(np.searchsorted(self._epoch_starts, int(k), side="right")) - 1
        return epoch, int(k) - self._epoch_starts[epoch]

    def _pieces(self, k: int) -> list[tuple[int, int, int]]:
        """(document id among ``sizes``, 0, length) of each document of sample k, in order."""
        epoch, row = self.locate(int(k))
        order, row_starts = self.epochs[epoch]
        documents = order[int(row_starts[row]):int(row_starts[row + 1])]
        return [(int(d), 0, min(int(self.sizes[d]), self.seq_length)) for d in documents]

    def __getitem__(self, k: int) -> np.ndarray:
        return row_tokens(self, self._pieces(k))

    def document_ids(self, k: int) -> np.ndarray:
        """Per token of sample k, the number of its document in the row (0, 1, ...); -1 on the padding."""
        return row_document_ids(self._pieces(k), self.seq_length)

    def sample_documents(self, k: int) -> list[tuple[int, int, int]]:
        """(global document id, offset, length) of each document of sample k, for inspection tools and tests."""
        return [(document + self.first_sequence, offset, length) for document, offset, length in self._pieces(k)]

    def sample_tokens(self, k: int) -> int:
        """The tokens of sample k that are not padding."""
        return sum(length for _, _, length in self._pieces(k))

    def tokens_through(self, end: int) -> int:
        """The tokens of samples [0, end) that are not padding (from each epoch's running sums, built once)."""
        self.ensure(int(end))
        epoch = int(np.searchsorted(self._epoch_starts, int(end), side="right")) - 1
        while len(self._running) <= epoch and len(self._running) < len(self.epochs):
            order, row_starts = self.epochs[len(self._running)]
            lengths = np.minimum(self.sizes[order], self.seq_length).astype(np.int64)
            self._running.append(np.concatenate([[0], np.cumsum(lengths)])[row_starts])
        done = sum(int(running[-1]) for running in self._running[:epoch])
        return done + (int(self._running[epoch][int(end) - self._epoch_starts[epoch]]) if epoch < len(self.epochs)
                       else 0)


def tokens_through(dataset, end: int, seq_length: int | None = None) -> int:
    """The tokens that are not padding in samples [0, end) of a training stream: a DocumentSampleDataset's, a blend
    of them (each corpus's samples are its first ones, in order) or a recipe's segments; windows (of ``seq_length``
    tokens, or the dataset's) have no padding."""
    if hasattr(dataset, "tokens_through"):  # one corpus's rows (DocumentSampleDataset, a recipe's DocumentStream)
        return dataset.tokens_through(end)
    if hasattr(dataset, "segments"):  # a recipe's segments (phase_streams.RecipeDataset)
        return sum(tokens_through(part, min(int(end), s.end_sample) - s.first_sample, s.seq_length)
                   for s, part in zip(dataset.segments, dataset.datasets) if s.first_sample < end)
    parts = getattr(dataset, "datasets", None)
    if parts is None or not hasattr(dataset, "dataset_of"):  # windows: no padding
        return int(end) * int(seq_length or dataset.seq_length)
    owners = np.asarray(dataset.dataset_of[:int(end)])
    return sum(tokens_through(part, int(np.count_nonzero(owners == d)), dataset.seq_length)
               for d, part in enumerate(parts) if part is not None)

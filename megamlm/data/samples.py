"""Fixed-length training samples cut from the packed token stream of one corpus, epoch after epoch."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from megamlm.data.index_cache import load_or_build_epochs
from megamlm.data.indexed import DataError, IndexedDataset
from megamlm.data.sample_index import num_epochs_needed, windows_per_epoch


def window_pieces(order: np.ndarray, sizes: np.ndarray, position: int, offset: int, seq_length: int):
    """(document, offset, length) of each piece of a window of ``seq_length`` tokens that starts ``offset`` tokens
    into document ``order[position]`` and runs on through the documents in ``order`` (empty documents skipped)."""
    remaining = seq_length
    while remaining:
        document = int(order[position])
        take = min(int(sizes[document]) - offset, remaining)
        if take > 0:
            yield document, offset, take
            remaining -= take
        position += 1
        offset = 0


class CorpusFiles:
    """The documents of one corpus: its files (shards concatenated), optionally restricted to the sequences
    ``sequences`` = (first, end) of a ``--split`` part; ``sizes`` are their token counts, ``read`` their tokens."""

    def __init__(self, datasets: IndexedDataset | Sequence[IndexedDataset], seq_length: int, num_samples: int,
                 seed: int, sequences: tuple[int, int] | None = None):
        if isinstance(datasets, IndexedDataset):
            datasets = [datasets]
        self.datasets = list(datasets)
        if not self.datasets:
            raise DataError("no dataset given; pass at least one --data-path prefix")
        if seq_length < 1 or num_samples < 1:
            raise DataError(f"seq_length ({seq_length}) and num_samples ({num_samples}) must be positive")
        self.seq_length = int(seq_length)
        self.num_samples = int(num_samples)
        self.seed = int(seed)
        counts = [len(d) for d in self.datasets]
        self._first_document = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        sizes = np.concatenate([d.sequence_lengths for d in self.datasets]).astype(np.int32, copy=False)
        self.first_sequence, end = sequences if sequences is not None else (0, len(sizes))
        self.sizes = sizes[self.first_sequence:end]
        self.tokens_per_epoch = int(self.sizes.sum(dtype=np.int64))
        if self.tokens_per_epoch == 0:
            names = ", ".join(d.prefix for d in self.datasets)
            raise DataError(f"dataset {names} holds no tokens; preprocess a non-empty corpus into it")

    def __len__(self) -> int:
        return self.num_samples

    def read(self, document: int, offset: int, length: int) -> np.ndarray:
        """``length`` tokens from ``offset`` of document ``document`` (numbered among ``sizes``)."""
        document += self.first_sequence
        shard = int(np.searchsorted(self._first_document, document, side="right")) - 1
        return self.datasets[shard].get(document - int(self._first_document[shard]), offset, length)


class PackedSampleDataset(CorpusFiles):
    """Sample k: `seq_length` tokens from the packed, seeded-shuffled stream of documents.

    `datasets` is one IndexedDataset or several (shards of one corpus, concatenated). Every
    sequence of the files is a document. Each epoch packs the documents in its own seeded order,
    cuts W = floor(tokens / seq_length) windows and visits them in its own seeded order (see
    `sample_index`); epochs follow each other. Sample k is window k % W of epoch k // W: a pure
    function of (files, seed, seq_length). `num_samples` only says how many samples to make
    available (the epochs holding them are built); it never changes which sample k is.

    With `cache_dir`, each epoch's arrays are cached as .npy files named by a hash of what
    determines them, built by the process where `rank()` is 0 while the others wait at `barrier()`.

    `sequences` = (first, end) restricts the corpus to those sequences (a part of a `--split`, see
    `megamlm.data.splits`): the stream is then the one of a corpus holding only them.
    """

    def __init__(
        self,
        datasets: IndexedDataset | Sequence[IndexedDataset],
        seq_length: int,
        num_samples: int,
        seed: int,
        cache_dir: str | None = None,
        rank: Callable[[], int] | None = None,
        barrier: Callable[[], None] | None = None,
        sequences: tuple[int, int] | None = None,
    ):
        super().__init__(datasets, seq_length, num_samples, seed, sequences)
        self.windows_per_epoch = windows_per_epoch(self.tokens_per_epoch, self.seq_length)
        self.epochs = load_or_build_epochs(
            self.sizes,
            self.seq_length,
            self.seed,
            num_epochs_needed(self.windows_per_epoch, self.num_samples),
            cache_dir=cache_dir,
            rank=rank,
            barrier=barrier,
        )

    @property
    def num_epochs(self) -> int:
        """Epochs built: enough for `num_samples` samples."""
        return len(self.epochs)

    def first_pass_samples(self) -> int:
        """How many leading samples repeat no window: one epoch."""
        return self.windows_per_epoch

    def locate(self, k: int) -> tuple[int, int]:
        """(epoch, window of that epoch) of global sample k."""
        if not 0 <= k < self.num_samples:
            raise IndexError(f"sample {k} out of range for {self.num_samples} samples")
        epoch, position = divmod(int(k), self.windows_per_epoch)
        return epoch, int(self.epochs[epoch].shuffle_index[position])

    def _pieces(self, k: int):
        """(document id among `sizes`, offset, length) of each document piece of sample k, in order."""
        epoch, window = self.locate(k)
        document_order, sample_index, _ = self.epochs[epoch]
        position, offset = (int(v) for v in sample_index[window])
        yield from window_pieces(document_order, self.sizes, position, offset, self.seq_length)

    def __getitem__(self, k: int) -> np.ndarray:
        pieces = [self.read(*piece) for piece in self._pieces(int(k))]
        return np.concatenate(pieces).astype(np.int64)

    def document_ids(self, k: int) -> np.ndarray:
        """Per token of sample k, the number of its document within the window (0, 1, 2, ...)."""
        lengths = [length for _, _, length in self._pieces(int(k))]
        return np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)

    def sample_documents(self, k: int) -> list[tuple[int, int, int]]:
        """(global document id, offset, length) pieces of sample k, for inspection tools."""
        return [(document + self.first_sequence, offset, length) for document, offset, length in self._pieces(int(k))]

"""A corpus's stream in a document sample mode across a recipe's segments (``phase_streams.py``'s contract).

Rows are not shuffled (``documents.py``), so what an epoch has left after its first r rows is the documents of its
rows r, r+1, ... A later segment that reads the corpus again:

- at the same sequence length, goes on with the corpus's own rows;
- at another length, packs the epoch's documents not yet read, in the order they were in, into rows of the new
  length, then reads the corpus's own epochs at the new length from the next epoch on. No document is read twice
  in an epoch and none is skipped, whatever lengths the phases use; each row is a pure function of the recipe and
  the seed.
"""

from __future__ import annotations

import numpy as np

from megamlm.data.documents import DocumentSampleDataset, pack_rows, row_document_ids, row_tokens


class DocumentStream:
    """Samples of a corpus from some point on: ``head`` rows of the rest of one epoch (``order``, ``row_starts``:
    documents and where each row starts, at ``seq_length``; none when the stream starts at an epoch boundary), then
    the corpus's own rows from sample ``offset`` of ``dataset`` (a DocumentSampleDataset at ``seq_length``)."""

    def __init__(self, corpus, dataset: DocumentSampleDataset, offset: int, rest: tuple | None = None):
        self.corpus, self.dataset, self.offset = corpus, dataset, int(offset)
        self.seq_length = dataset.seq_length
        self.order, self.row_starts, self.epoch = rest if rest is not None else (None, None, None)
        self.head = 0 if rest is None else len(self.row_starts) - 1
        self.windows_per_epoch = dataset.rows_of(0)

    def _head_pieces(self, n: int):
        documents = self.order[int(self.row_starts[n]):int(self.row_starts[n + 1])]
        return [(int(d), 0, min(int(self.dataset.sizes[d]), self.seq_length)) for d in documents]

    def __getitem__(self, n: int) -> np.ndarray:
        if n >= self.head:
            return self.dataset[self.offset + int(n) - self.head]
        return row_tokens(self.dataset, self._head_pieces(int(n)))

    def document_ids(self, n: int) -> np.ndarray:
        if n >= self.head:
            return self.dataset.document_ids(self.offset + int(n) - self.head)
        return row_document_ids(self._head_pieces(int(n)), self.seq_length)

    def sample_documents(self, n: int):
        if n >= self.head:
            return self.dataset.sample_documents(self.offset + int(n) - self.head)
        first = self.dataset.first_sequence
        return [(document + first, offset, length) for document, offset, length in self._head_pieces(int(n))]

    def tokens_through(self, end: int) -> int:
        """The tokens of samples [0, end) without padding."""
        lengths = np.minimum(self.dataset.sizes[self.order], self.seq_length) if self.head else np.zeros(0)
        if self.head and end <= self.head:  # a stream that starts at an epoch boundary has no head rows
            return int(lengths[:int(self.row_starts[int(end)])].sum())
        own = end - self.head
        return (int(lengths.sum()) + self.dataset.tokens_through(self.offset + own)
                - self.dataset.tokens_through(self.offset))

    def ensure(self, count: int) -> None:
        self.dataset.ensure(self.offset + max(0, int(count) - self.head) + 1)

    def left_after(self, n: int) -> tuple:
        """(the documents its epoch has left after this stream's first ``n`` samples, or None at an epoch boundary;
        that epoch; the corpus's document sizes): ``phase_streams._Stream.left_after``."""
        sizes = self.dataset.sizes
        if n < self.head:
            return self.order[int(self.row_starts[n]):], self.epoch, sizes
        consumed = self.offset + n - self.head
        self.dataset.ensure(consumed + 1)
        epoch, row = self.dataset.locate(consumed)
        if row == 0:
            return None, epoch, sizes
        order, row_starts = self.dataset.epochs[epoch]
        return np.asarray(order[int(row_starts[row]):]), epoch, sizes

    @classmethod
    def resume(cls, corpus, documents: np.ndarray | None, epoch: int, seq_length: int, need: int) -> DocumentStream:
        """The corpus's rows at ``seq_length`` from ``documents`` (what ``epoch`` has left, in order; None: from
        the start of ``epoch``), then from the corpus's own next epoch on, ``need`` samples available."""
        dataset = corpus.stream_at(seq_length, 1)
        if documents is None:
            tail = cls(corpus, dataset, dataset.epoch_start(epoch))
        else:
            documents = np.asarray(documents)[dataset.sizes[documents] > 0]
            positions, starts = pack_rows(np.minimum(dataset.sizes[documents], seq_length), seq_length, dataset.mode)
            tail = cls(corpus, dataset, dataset.epoch_start(epoch + 1), (documents[positions], starts, epoch))
        tail.ensure(need)
        return tail

    def tail_after(self, n: int, seq_length: int, need: int, position: int) -> DocumentStream:
        """The stream after its first ``n`` samples, at ``seq_length``, with ``need`` samples available
        (``position``, the segment's place in the recipe, changes nothing here: rows are not shuffled)."""
        n = int(n)
        if seq_length != self.seq_length:
            documents, epoch, _ = self.left_after(n)
            return DocumentStream.resume(self.corpus, documents, epoch, seq_length, need)
        if n < self.head:
            rest = (self.order[int(self.row_starts[n]):], self.row_starts[n:] - self.row_starts[n], self.epoch)
            tail = DocumentStream(self.corpus, self.dataset, self.offset, rest)
        else:
            tail = DocumentStream(self.corpus, self.dataset, self.offset + n - self.head)
        tail.ensure(need)
        return tail

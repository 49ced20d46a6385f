"""The sample stream of a recipe in phases: the contract that keeps one run's samples exact across phases that
change the data, the blend weights or the sequence length.

A run's phases group into *segments*: consecutive phases with the same data and sequence length read one stream
(an objective switch never changes the data). Segment s consumes the run's samples [first_sample, end_sample) (its
steps' global batches). The contract, for every segment:

1. **Pure**: segment s's stream is a function of (its data files, blend weights, the seed, its sequence length,
   its position s in the recipe) and of the segments before it; never of the run's length, its layout, the batch
   sizes of other runs or where a launch resumed. Resuming or branching at any step reads the same samples.
2. **The first segment is the one-phase stream, bitwise** (``build.py``: Megatron's format, the order guarantee of
   ``sample_index.py``, the due-time blend of ``blending.py``): a run without phases, or whose phases change
   nothing but the objective, reads exactly what it read before phases existed.
3. **A corpus continues where it was left.** Each corpus (a weighted prefix, or an unweighted list of shards) keeps
   one stream across the recipe. A later segment that reads it again (in any blend, at any weight) starts at the
   first sample of that corpus's stream the earlier segments did not consume:
   - at the same sequence length, its stream simply goes on (sample n of the corpus in the later segment is sample
     consumed + n of the corpus's stream);
   - at another sequence length, the rest of the current epoch is the epoch's documents that no window read so far
     touched, in the epoch's document order, packed and cut into windows of the new length and visited in a seeded
     order (a function of the seed, the epoch and the segment's position); the following epochs are the corpus's
     own epochs at the new length (``sample_index.build_epoch``). So no token of a corpus is read twice within an
     epoch, whatever lengths the phases use (a document an earlier window touched waits for the next epoch).
4. A blend's interleave restarts with each segment (the due-time interleave of its weights, ``blending.py``),
   and picks each corpus's next sample from that corpus's continued stream.

The segment boundaries and sample ranges come from the recipe (``megamlm/config/phases.py``), so sample k of a run
is a pure function of its recipe and its seed.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from megamlm.data.blending import BlendedDataset, SampleLocator, load_or_build_blend_index, parse_data_path
from megamlm.data.build import (
    StreamSpec,
    build_train_dataset,
    check_vocab,
    group_rank_and_barrier,
    part_of,
    sample_dataset,
)
from megamlm.data.document_streams import DocumentStream
from megamlm.data.documents import WINDOWS
from megamlm.data.indexed import DataError, IndexedDataset
from megamlm.data.sample_index import build_sample_index
from megamlm.data.samples import PackedSampleDataset, window_pieces
from megamlm.data.splits import TRAIN

REMAINDER_ORDER = 2
"""The seeded-permutation purpose of a continued epoch's window order (0 and 1 are sample_index.py's)."""


@dataclass(frozen=True)
class StreamSegment:
    """Consecutive phases that read one stream: their data (Megatron's --data-path list), sample length, and the
    run's samples they consume, [first_sample, end_sample)."""

    data_path: tuple[str, ...]
    seq_length: int
    first_sample: int
    end_sample: int
    sample_mode: str | None = None
    """Its --sample-mode (None: the recipe's, ``RecipeStreamSpec.sample_mode``)."""


@dataclass(frozen=True)
class RecipeStreamSpec:
    """The stream of a run in segments (what ``build_recipe_dataset`` needs besides the process group)."""

    segments: tuple[StreamSegment, ...]
    seed: int
    cache_dir: str | None = None
    vocab_size: int | None = None
    split: Sequence[float] | None = None
    sample_mode: str = "windows"
    """--sample-mode: windows, or a document mode (its streams across segments: ``document_streams.py``)."""


class _Corpus:
    """One corpus's files (its --split training part) and how to cut its standard stream at a sequence length."""

    def __init__(self, datasets: list[IndexedDataset], sequences, seed: int, options: dict, mode: str = WINDOWS):
        self.datasets, self.sequences, self.seed, self.options, self.mode = datasets, sequences, seed, options, mode

    def stream_at(self, seq_length: int, num_samples: int):
        return sample_dataset(self.datasets, seq_length, max(1, num_samples), self.seed, self.mode, self.sequences,
                              **self.options)

    def start(self, dataset):
        """The corpus's stream from the first sample of ``dataset`` (its own stream at one sequence length)."""
        return _StandardStream(self, dataset, 0) if self.mode == WINDOWS else DocumentStream(self, dataset, 0)


def _touched(sizes: np.ndarray, order: np.ndarray, seq_length: int, windows: np.ndarray) -> np.ndarray:
    """Per position of ``order`` (the documents of an epoch packed in this order), whether any of ``windows`` (window
    numbers of ``seq_length`` tokens in that packing) reads a token of it."""
    ends = np.cumsum(sizes[order].astype(np.int64))
    starts = np.asarray(windows, dtype=np.int64) * seq_length
    first = np.searchsorted(ends, starts, side="right")
    last = np.searchsorted(ends, starts + seq_length - 1, side="right")
    marks = np.zeros(len(order) + 1, dtype=np.int64)
    np.add.at(marks, first, 1)
    np.add.at(marks, np.minimum(last + 1, len(order)), -1)
    return np.cumsum(marks)[:-1] > 0


class _Stream:
    """A corpus's stream from some point on: sample n, and the stream that continues after n samples."""

    windows_per_epoch: int

    def __getitem__(self, n: int) -> np.ndarray:
        raise NotImplementedError

    def tail_after(self, n: int, seq_length: int, need: int, position: int) -> _Stream:
        """The stream that continues this one after its first ``n`` samples, at ``seq_length``, with ``need``
        samples available; ``position``: the segment's place in the recipe (it seeds a continued epoch's order)."""
        raise NotImplementedError

    def left_after(self, n: int) -> tuple:
        """(the documents the epoch holding sample ``n`` has left, none of their tokens read by the first ``n``
        samples, in the epoch's order, or None at an epoch boundary; that epoch; the corpus's document sizes)."""
        raise NotImplementedError

    def ensure(self, count: int) -> None:
        """Make its first ``count`` samples available (the epochs holding them built)."""
        raise NotImplementedError


class _Offset(_Stream):
    """Samples ``offset``, ``offset + 1``, ... of ``source`` (the corpus's packed samples, or another stream) as
    this stream's 0, 1, ..."""

    source: PackedSampleDataset | _Stream
    offset: int

    def __getitem__(self, n: int) -> np.ndarray:
        return self.source[self.offset + int(n)]

    def document_ids(self, n: int) -> np.ndarray:
        return self.source.document_ids(self.offset + int(n))

    def sample_documents(self, n: int):
        return self.source.sample_documents(self.offset + int(n))


class _StandardStream(_Offset):
    """Samples ``offset``, ``offset + 1``, ... of the corpus's own stream at one sequence length."""

    def __init__(self, corpus: _Corpus, packed: PackedSampleDataset, offset: int):
        self.corpus, self.source, self.offset = corpus, packed, offset
        self.windows_per_epoch = packed.windows_per_epoch

    @property
    def packed(self) -> PackedSampleDataset:
        """The corpus's samples at this length (its epochs built as far as ``ensure`` asked)."""
        return self.source

    def ensure(self, count: int) -> None:
        if self.offset + count > len(self.packed):
            self.source = self.corpus.stream_at(self.packed.seq_length, self.offset + count)

    def tail_after(self, n: int, seq_length: int, need: int, position: int) -> _Stream:
        consumed = self.offset + int(n)
        if seq_length == self.packed.seq_length:
            tail = _StandardStream(self.corpus, self.packed, consumed)
            tail.ensure(need)
            return tail
        return continue_from(self.corpus, self.left_after(n), seq_length, need, position)

    def left_after(self, n: int) -> tuple:
        epoch, seen = divmod(self.offset + int(n), self.packed.windows_per_epoch)
        if not seen:  # an epoch boundary: the corpus's own epochs go on
            return None, epoch, self.packed.sizes
        document_order, _, shuffle_index = self.packed.epochs[epoch]
        touched = _touched(self.packed.sizes, document_order, self.packed.seq_length, shuffle_index[:seen])
        return document_order[~touched], epoch, self.packed.sizes


def continue_from(corpus: _Corpus, left: tuple, seq_length: int, need: int, position: int):
    """The corpus's stream at ``seq_length``, in its mode, from what an epoch has left (``_Stream.left_after``'s):
    those documents, then the corpus's own epochs from the next one on (at a boundary, from that epoch on)."""
    documents, epoch, sizes = left
    if corpus.mode != WINDOWS:
        return DocumentStream.resume(corpus, documents, epoch, seq_length, need)
    if documents is None:
        return _continue_at_epoch(corpus, seq_length, epoch, need)
    return _RemainderStream.build(corpus, sizes, documents, seq_length, epoch, need, position)


def _continue_at_epoch(corpus: _Corpus, seq_length: int, epoch: int, need: int) -> _StandardStream:
    """The corpus's own stream at ``seq_length`` from the first sample of ``epoch`` on."""
    probe = corpus.stream_at(seq_length, 1)
    tail = _StandardStream(corpus, probe, epoch * probe.windows_per_epoch)
    tail.ensure(need)
    return tail


class _RemainderStream(_Stream):
    """The rest of an epoch at a new sequence length (the documents no earlier window touched, ``order``), then
    the corpus's own epochs from the next one on."""

    def __init__(self, corpus, sizes, order, seq_length, epoch, sample_index, shuffle, rest_need):
        self.corpus, self.sizes, self.order, self.seq_length, self.epoch = corpus, sizes, order, seq_length, epoch
        self.sample_index, self.shuffle = sample_index, shuffle
        self.head = len(shuffle)
        self.rest = _continue_at_epoch(corpus, seq_length, epoch + 1, rest_need)
        self.windows_per_epoch = self.rest.windows_per_epoch

    @classmethod
    def build(cls, corpus: _Corpus, sizes: np.ndarray, order: np.ndarray, seq_length: int, epoch: int, need: int,
              position: int) -> _RemainderStream:
        held = int(sizes[order].sum(dtype=np.int64))
        windows = held // seq_length
        sample_index = build_sample_index(sizes, order.astype(np.int32), seq_length, windows) if windows else None
        generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
            [corpus.seed, REMAINDER_ORDER, epoch, position])))
        shuffle = generator.permutation(windows)
        return cls(corpus, sizes, order, seq_length, epoch, sample_index, shuffle, max(1, need - windows))

    def _pieces(self, n: int):
        """(document among ``sizes``, offset, length) of each piece of head window n."""
        position, offset = (int(v) for v in self.sample_index[int(self.shuffle[n])])
        yield from window_pieces(self.order, self.sizes, position, offset, self.seq_length)

    def __getitem__(self, n: int) -> np.ndarray:
        if n >= self.head:
            return self.rest[n - self.head]
        packed = self.rest.packed
        return np.concatenate([packed.read(*piece) for piece in self._pieces(n)]).astype(np.int64)

    def document_ids(self, n: int) -> np.ndarray:
        if n >= self.head:
            return self.rest.document_ids(n - self.head)
        lengths = [length for _, _, length in self._pieces(n)]
        return np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)

    def sample_documents(self, n: int):
        if n >= self.head:
            return self.rest.sample_documents(n - self.head)
        first = self.rest.packed.first_sequence
        return [(document + first, offset, length) for document, offset, length in self._pieces(n)]

    def ensure(self, count: int) -> None:
        self.rest.ensure(max(1, count - self.head))

    def tail_after(self, n: int, seq_length: int, need: int, position: int) -> _Stream:
        if n >= self.head:
            return self.rest.tail_after(n - self.head, seq_length, need, position)
        if seq_length == self.seq_length:
            self.ensure(n + need)
            return _Shifted(self, n)
        return continue_from(self.corpus, self.left_after(n), seq_length, need, position)

    def left_after(self, n: int) -> tuple:
        if n >= self.head:
            return self.rest.left_after(n - self.head)
        touched = _touched(self.sizes, self.order, self.seq_length, self.shuffle[:n])
        return self.order[~touched], self.epoch, self.sizes


class _Shifted(_Offset):
    """A stream after its first ``n`` samples (at the same sequence length)."""

    def __init__(self, stream: _Stream, n: int):
        self.source, self.offset, self.corpus = stream, n, stream.corpus
        self.windows_per_epoch = stream.windows_per_epoch

    def ensure(self, count: int) -> None:
        self.source.ensure(self.offset + count)

    def tail_after(self, m: int, seq_length: int, need: int, position: int) -> _Stream:
        return self.source.tail_after(self.offset + int(m), seq_length, need, position)

    def left_after(self, m: int) -> tuple:
        return self.source.left_after(self.offset + int(m))


class RecipeDataset(SampleLocator):
    """Sample k of a run in segments: sample k - first_sample of the segment holding k."""

    def __init__(self, segments: Sequence[StreamSegment], datasets: Sequence):
        self.segments, self.datasets = list(segments), list(datasets)
        self._starts = [s.first_sample for s in self.segments]

    def __len__(self) -> int:
        return self.segments[-1].end_sample

    def _locate(self, k: int):
        if not 0 <= k < len(self):
            raise IndexError(f"sample {k} out of range for {len(self)} samples")
        s = bisect.bisect_right(self._starts, int(k)) - 1
        return self.datasets[s], int(k) - self.segments[s].first_sample


def _corpora(segment: StreamSegment, spec: RecipeStreamSpec, options: dict, checked: set):
    """(weights or None, [(key, _Corpus)]) of a segment's --data-path list: one corpus for an unweighted list (its
    shards concatenated), one per prefix for a blend; the key names the corpus across segments. Token ids are
    checked once per file (``checked``)."""
    weights, prefixes = parse_data_path(segment.data_path)
    datasets = [IndexedDataset(prefix) for prefix in prefixes]
    for dataset in datasets:
        if spec.vocab_size is not None and dataset.prefix not in checked:
            check_vocab(dataset, spec.vocab_size)
        checked.add(dataset.prefix)
    groups = [datasets] if weights is None else [[d] for d in datasets]
    keys = [tuple(prefixes)] if weights is None else [(prefix,) for prefix in prefixes]
    return weights, [(key, _Corpus(group, part_of(group, spec.split, TRAIN, segment.seq_length), spec.seed, options,
                                   segment.sample_mode or spec.sample_mode)) for key, group in zip(keys, groups)]


def build_recipe_dataset(spec: RecipeStreamSpec, group=None, rank: Callable[[], int] | None = None,
                         barrier: Callable[[], None] | None = None):
    """The training samples of a run in segments (the module docstring's contract). One segment is exactly
    ``build_train_dataset``'s stream (the same object type, bitwise the same samples)."""
    if group is not None:
        rank, barrier = group_rank_and_barrier(group)
    first = spec.segments[0]
    if first.first_sample != 0:
        raise DataError(f"the first stream segment starts at sample {first.first_sample}, not 0")
    base = build_train_dataset(StreamSpec(first.data_path, first.seq_length, first.end_sample, spec.seed,
                                          spec.cache_dir, spec.vocab_size, spec.split,
                                          first.sample_mode or spec.sample_mode), rank=rank, barrier=barrier)
    if len(spec.segments) == 1:
        return base
    options = dict(cache_dir=spec.cache_dir, rank=rank, barrier=barrier)
    cursors: dict[tuple, tuple[_Stream, int]] = {}
    checked = set(parse_data_path(first.data_path)[1])  # build_train_dataset checked the first segment's files
    datasets = [base]
    _record(cursors, first, base, _corpora(first, spec, options, checked))
    for position, segment in enumerate(spec.segments[1:], start=1):
        weights, corpora = _corpora(segment, spec, options, checked)
        count = segment.end_sample - segment.first_sample
        if weights is None:
            owners, numbers = np.zeros(count, dtype=np.int16), np.arange(count, dtype=np.int64)
        else:
            owners, numbers = load_or_build_blend_index(weights, count, **options)
        streams = []
        for d, (key, corpus) in enumerate(corpora):
            need = int(np.count_nonzero(owners == d))
            if not need:
                streams.append(None)
                continue
            if key in cursors:
                stream, consumed = cursors[key]
                if stream.corpus.mode == corpus.mode:
                    streams.append(stream.tail_after(consumed, segment.seq_length, need, position))
                else:  # another sample mode: what the epoch has left, cut the new way
                    streams.append(continue_from(corpus, stream.left_after(consumed), segment.seq_length, need,
                                                 position))
            else:
                streams.append(corpus.start(corpus.stream_at(segment.seq_length, need)))
            cursors[key] = (streams[-1], need)
        datasets.append(BlendedDataset(streams, owners, numbers, segment.seq_length))
    return RecipeDataset(spec.segments, datasets)


def _record(cursors: dict, segment: StreamSegment, base, blend) -> None:
    """Each corpus of the first segment, its stream and the samples the segment consumed of it."""
    weights, corpora = blend
    if weights is None:
        ((key, corpus),) = corpora
        cursors[key] = (corpus.start(base), segment.end_sample)
        return
    for d, (key, corpus) in enumerate(corpora):
        part = base.datasets[d]
        if part is not None:
            cursors[key] = (corpus.start(part), int(np.count_nonzero(base.dataset_of == d)))

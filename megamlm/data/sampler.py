"""Which global sample ids each data-parallel rank computes, and a loader that fetches them in order.

A run consumes one stream of samples 0, 1, 2, ... in order. The global batch that starts at
sample s holds samples [s, s + GBS); data-parallel rank r takes the contiguous slice
[s + r * GBS / dp, s + (r + 1) * GBS / dp) of it, split into micro-batches. The first global
batch starts at `consumed_samples` (0, or where a checkpoint left off), each next one GBS
later. The ids depend only on (consumed samples, GBS, micro-batch size, dp rank, dp size), so
the objective, loader workers and prefetching cannot change the order, and a run resumed with
another global batch size continues the same stream with no repeat and no gap.

Under a batch-size ramp-up (config/rampup.py) the global batches of the remaining steps are given as their sizes
(``batch_sizes``): each starts where the one before it ended, so the stream is the same one, consumed in order.
"""

from __future__ import annotations

import signal
from typing import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from megamlm.data.indexed import DataError


class GlobalBatchSampler:
    """Iterates over global batches; each item is this rank's micro-batches (lists of sample ids).

    Global batches start at `consumed_samples` and follow each other until the next one would
    end after `total_samples` (the end of the stream the run consumes: consumed samples + the
    remaining steps x GBS). `consumed_samples` need not be a multiple of the global batch size.
    Iterating advances it by GBS as each global batch is delivered, so a checkpoint taken after
    a training step resumes at the next sample.

    ``batch_sizes``: the size of each global batch from ``consumed_samples`` on, one per remaining step (a ramp-up),
    instead of GBS each; they end at ``total_samples``.
    """

    def __init__(
        self,
        total_samples: int,
        global_batch_size: int,
        micro_batch_size: int,
        dp_rank: int = 0,
        dp_size: int = 1,
        consumed_samples: int = 0,
        batch_sizes: Sequence[int] | None = None,
    ):
        if global_batch_size < 1 or micro_batch_size < 1 or dp_size < 1:
            raise DataError("global batch size, micro-batch size and data-parallel size must be positive")
        for size in sorted({int(global_batch_size), *(batch_sizes or ())}):
            if size < 1 or size % (micro_batch_size * dp_size):
                raise DataError(
                    f"global batch size {size} is not divisible by micro-batch size {micro_batch_size} x "
                    f"data-parallel size {dp_size}; pick a global batch size that is a multiple of "
                    f"{micro_batch_size * dp_size}"
                )
        if not 0 <= dp_rank < dp_size:
            raise DataError(f"data-parallel rank {dp_rank} is outside [0, {dp_size})")
        self.total_samples = int(total_samples)
        self.global_batch_size = int(global_batch_size)
        self.micro_batch_size = int(micro_batch_size)
        self.dp_rank = int(dp_rank)
        self.dp_size = int(dp_size)
        self.local_batch_size = self.global_batch_size // self.dp_size
        self.num_micro_batches = self.local_batch_size // self.micro_batch_size
        self.ramp = None
        if batch_sizes is not None:  # (first sample of each global batch, its size), from the consumed count on
            sizes = np.asarray(batch_sizes, dtype=np.int64)
            starts = int(consumed_samples) + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            self.ramp = (starts, sizes)
            if len(sizes) and int(starts[-1] + sizes[-1]) != self.total_samples:
                raise DataError(f"the global batches end at sample {int(starts[-1] + sizes[-1])}, not at the run's "
                                f"last {self.total_samples}")
        self.consumed_samples = 0
        self.load_state_dict({"consumed_samples": consumed_samples})

    def global_batch_at(self, start: int, size: int | None = None) -> list[list[int]]:
        """This rank's micro-batches of the global batch holding samples [start, start + size) (size: GBS)."""
        local = self.local_batch_size if size is None else int(size) // self.dp_size
        first = int(start) + self.dp_rank * local
        mbs = self.micro_batch_size
        return [list(range(first + i * mbs, first + (i + 1) * mbs)) for i in range(local // mbs)]

    def batch_plan(self, start: int | None = None) -> list[tuple[int, int]]:
        """(first sample, size) of each global batch from `start` (default: the consumed count) to the end of the
        run."""
        if start is None:
            start = self.consumed_samples
        if self.ramp is None:
            return [(s, self.global_batch_size) for s in self.batch_starts(start)]
        starts, sizes = self.ramp
        first = int(np.searchsorted(starts, int(start)))
        if first < len(starts) and starts[first] != start:
            raise DataError(f"sample {start} is not where a global batch of this run's ramp-up starts")
        return list(zip(starts[first:].tolist(), sizes[first:].tolist()))

    def batch_starts(self, start: int | None = None) -> range | list[int]:
        """First sample of each global batch from `start` (default: the consumed count) to the end of the run."""
        if start is None:
            start = self.consumed_samples
        if self.ramp is not None:
            return [s for s, _ in self.batch_plan(start)]
        count = max(0, (self.total_samples - int(start)) // self.global_batch_size)
        return range(int(start), int(start) + count * self.global_batch_size, self.global_batch_size)

    def global_batches(self, start: int | None = None) -> Iterator[list[list[int]]]:
        """Global batches from sample `start` (default: the consumed count) on; changes no state."""
        for s, size in self.batch_plan(start):
            yield self.global_batch_at(s, size)

    def __iter__(self) -> Iterator[list[list[int]]]:
        for s, size in self.batch_plan():
            batch = self.global_batch_at(s, size)
            self.consumed_samples = s + size
            yield batch

    def __len__(self) -> int:
        """Global batches left from the consumed count."""
        return len(self.batch_starts())

    def state_dict(self) -> dict:
        return {"consumed_samples": self.consumed_samples}

    def load_state_dict(self, state: dict) -> None:
        consumed = int(state["consumed_samples"])
        if consumed < 0:
            raise DataError(f"consumed samples {consumed} is negative")
        if consumed > self.total_samples:
            raise DataError(f"consumed samples {consumed} exceeds the {self.total_samples} samples of this run")
        self.consumed_samples = consumed


class _SampleFetcher:
    """Map-style dataset over global sample ids; returns (id, tokens, document ids)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, k: int):
        return k, self.dataset[k], self.dataset.document_ids(k)


def _collate(items):
    ids, tokens, documents = zip(*items)
    return {
        "sample_ids": torch.tensor(ids, dtype=torch.int64),
        "tokens": torch.from_numpy(np.stack(tokens).astype(np.int64, copy=False)),
        "document_ids": torch.from_numpy(np.stack(documents).astype(np.int32, copy=False)),
    }


class _MicroBatchIds:
    """The flat list of micro-batches of the global batches from sample `start` on, for DataLoader."""

    def __init__(self, sampler: GlobalBatchSampler, start: int):
        self.sampler = sampler
        self.start = start

    def __iter__(self):
        for batch in self.sampler.global_batches(self.start):
            yield from batch

    def __len__(self) -> int:
        unit = self.sampler.micro_batch_size * self.sampler.dp_size
        return sum(size // unit for _, size in self.sampler.batch_plan(self.start))


def _ignore_stop_signals(worker_id: int) -> None:
    """Loader workers leave stop signals to the trainer: Ctrl-C and SLURM reach every process of a group, and a
    worker that died of one would fail the step the trainer finishes before it saves."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_IGN)


class MicroBatchLoader:
    """Yields, per global batch, this rank's micro-batches as dicts of tensors:
    `tokens` int64 (mbs, seq_length), `document_ids` int32 (mbs, seq_length), `sample_ids` int64 (mbs,).

    Samples are read by a torch DataLoader with `num_workers` processes; its results come back
    in order, so workers and prefetching never change which sample lands where. Iteration starts
    at the sampler's consumed count, and the count advances when a whole global batch is delivered.
    """

    def __init__(self, dataset, sampler: GlobalBatchSampler, num_workers: int = 0, pin_memory: bool = False):
        if sampler.total_samples > len(dataset):
            raise DataError(
                f"the sampler runs up to sample {sampler.total_samples} but the dataset has {len(dataset)}; "
                f"build the dataset with num_samples >= consumed samples + remaining steps x global batch size"
            )
        self.dataset = dataset
        self.sampler = sampler
        self.num_workers = num_workers
        self.pin_memory = pin_memory

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        sampler = self.sampler
        plan = sampler.batch_plan()
        unit = sampler.micro_batch_size * sampler.dp_size
        loader = DataLoader(
            _SampleFetcher(self.dataset),
            batch_sampler=_MicroBatchIds(sampler, sampler.consumed_samples),
            num_workers=self.num_workers,
            collate_fn=_collate,
            pin_memory=self.pin_memory,
            persistent_workers=False,
            worker_init_fn=_ignore_stop_signals if self.num_workers else None,
        )
        pending = []
        delivered = 0
        for micro_batch in loader:
            pending.append(micro_batch)
            start, size = plan[delivered]
            if len(pending) == size // unit:
                sampler.consumed_samples = start + size
                yield pending
                pending = []
                delivered += 1

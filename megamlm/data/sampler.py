"""Which global sample ids each data-parallel rank computes, and a loader that fetches them in order.

Global batch b holds samples [b * GBS, (b + 1) * GBS). Data-parallel rank r takes the
contiguous slice [r * GBS / dp, (r + 1) * GBS / dp) of it, split into micro-batches. The
ids depend only on (GBS, micro-batch size, dp rank, dp size, consumed samples), so the
objective, loader workers and prefetching cannot change the order.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from megamlm.data.indexed import DataError


class GlobalBatchSampler:
    """Iterates over global batches; each item is this rank's micro-batches (lists of sample ids).

    `consumed_samples` counts samples of global batches already handed out: iterating sets it
    to (b + 1) * GBS as global batch b is delivered, so a checkpoint taken after training batch
    b resumes at batch b + 1.
    """

    def __init__(
        self,
        total_samples: int,
        global_batch_size: int,
        micro_batch_size: int,
        dp_rank: int = 0,
        dp_size: int = 1,
        consumed_samples: int = 0,
    ):
        if global_batch_size < 1 or micro_batch_size < 1 or dp_size < 1:
            raise DataError("global batch size, micro-batch size and data-parallel size must be positive")
        if global_batch_size % (micro_batch_size * dp_size):
            raise DataError(
                f"global batch size {global_batch_size} is not divisible by micro-batch size {micro_batch_size} x "
                f"data-parallel size {dp_size}; pick a global batch size that is a multiple of {micro_batch_size * dp_size}"
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
        self.consumed_samples = 0
        self.load_state_dict({"consumed_samples": consumed_samples})

    @property
    def num_global_batches(self) -> int:
        return self.total_samples // self.global_batch_size

    def global_batch(self, b: int) -> list[list[int]]:
        """This rank's micro-batches of global batch b."""
        start = b * self.global_batch_size + self.dp_rank * self.local_batch_size
        mbs = self.micro_batch_size
        return [list(range(start + i * mbs, start + (i + 1) * mbs)) for i in range(self.num_micro_batches)]

    def global_batches(self, first_batch: int | None = None) -> Iterator[list[list[int]]]:
        """Global batches from `first_batch` (default: the next unconsumed one); changes no state."""
        if first_batch is None:
            first_batch = self.consumed_samples // self.global_batch_size
        for b in range(first_batch, self.num_global_batches):
            yield self.global_batch(b)

    def __iter__(self) -> Iterator[list[list[int]]]:
        for b in range(self.consumed_samples // self.global_batch_size, self.num_global_batches):
            batch = self.global_batch(b)
            self.consumed_samples = (b + 1) * self.global_batch_size
            yield batch

    def __len__(self) -> int:
        return self.num_global_batches - self.consumed_samples // self.global_batch_size

    def state_dict(self) -> dict:
        return {"consumed_samples": self.consumed_samples}

    def load_state_dict(self, state: dict) -> None:
        consumed = int(state["consumed_samples"])
        if consumed < 0 or consumed % self.global_batch_size:
            raise DataError(
                f"consumed samples {consumed} is not a whole number of global batches of {self.global_batch_size}; "
                f"resume with the global batch size the checkpoint was trained with"
            )
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
    import torch

    ids, tokens, documents = zip(*items)
    return {
        "sample_ids": torch.tensor(ids, dtype=torch.int64),
        "tokens": torch.from_numpy(np.stack(tokens).astype(np.int64, copy=False)),
        "document_ids": torch.from_numpy(np.stack(documents).astype(np.int32, copy=False)),
    }


class _MicroBatchIds:
    """The flat list of micro-batches from the sampler's next global batch on, for DataLoader."""

    def __init__(self, sampler: GlobalBatchSampler, first_batch: int):
        self.sampler = sampler
        self.first_batch = first_batch

    def __iter__(self):
        for batch in self.sampler.global_batches(self.first_batch):
            yield from batch

    def __len__(self) -> int:
        return (self.sampler.num_global_batches - self.first_batch) * self.sampler.num_micro_batches


class MicroBatchLoader:
    """Yields, per global batch, this rank's micro-batches as dicts of tensors:
    `tokens` int64 (mbs, seq_length), `document_ids` int32 (mbs, seq_length), `sample_ids` int64 (mbs,).

    Samples are read by a torch DataLoader with `num_workers` processes; its results come back
    in order, so workers and prefetching never change which sample lands where. The sampler's
    consumed count advances when a whole global batch is delivered.
    """

    def __init__(self, dataset, sampler: GlobalBatchSampler, num_workers: int = 0, pin_memory: bool = False):
        if sampler.total_samples > len(dataset):
            raise DataError(
                f"the sampler runs over {sampler.total_samples} samples but the dataset has {len(dataset)}; "
                f"build the dataset with num_samples = train iterations x global batch size"
            )
        self.dataset = dataset
        self.sampler = sampler
        self.num_workers = num_workers
        self.pin_memory = pin_memory

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        from torch.utils.data import DataLoader

        sampler = self.sampler
        first = sampler.consumed_samples // sampler.global_batch_size
        loader = DataLoader(
            _SampleFetcher(self.dataset),
            batch_sampler=_MicroBatchIds(sampler, first),
            num_workers=self.num_workers,
            collate_fn=_collate,
            pin_memory=self.pin_memory,
            persistent_workers=False,
        )
        pending = []
        b = first
        for micro_batch in loader:
            pending.append(micro_batch)
            if len(pending) == sampler.num_micro_batches:
                sampler.consumed_samples = (b + 1) * sampler.global_batch_size
                yield pending
                pending = []
                b += 1

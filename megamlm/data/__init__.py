"""Data: Megatron's indexed format, tokenizers, packed samples, blending and the batch sampler."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch.distributed as dist

from megamlm.data.blending import (
    BlendedDataset,
    load_or_build_blend_index,
    parse_data_path,
)
from megamlm.data.embedded import prepare_embedded_corpus
from megamlm.data.indexed import (
    DataError,
    IndexedDataset,
    IndexedDatasetWriter,
    best_dtype,
)
from megamlm.data.sampler import GlobalBatchSampler, MicroBatchLoader
from megamlm.data.samples import PackedSampleDataset
from megamlm.data.splits import PART_NAMES, TRAIN, VALIDATION, part_sequences
from megamlm.data.tokenizer import load_tokenizer

__all__ = [
    "BlendedDataset",
    "DataError",
    "GlobalBatchSampler",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "MicroBatchLoader",
    "PackedSampleDataset",
    "best_dtype",
    "build_train_dataset",
    "build_validation_dataset",
    "check_vocab",
    "load_tokenizer",
    "prepare_embedded_corpus",
]

# Token files up to this size are scanned in full for the vocabulary check; larger ones are
# sampled (64 evenly spread chunks of 1M tokens), which keeps start-up to seconds.
_FULL_SCAN_TOKENS = 1 << 30


def check_vocab(dataset: IndexedDataset, vocab_size: int) -> None:
    """Raise DataError when the dataset holds a token id >= vocab_size."""
    if np.issubdtype(dataset.dtype, np.integer) and np.iinfo(dataset.dtype).max < vocab_size:
        return  # the token dtype cannot hold an id that large
    tokens = dataset.tokens()
    if len(tokens) <= _FULL_SCAN_TOKENS:
        largest = dataset.max_token_id()
    else:
        chunk = min(1 << 20, len(tokens))
        starts = np.linspace(0, len(tokens) - chunk, 64).astype(np.int64)
        largest = max(int(tokens[s : s + chunk].max()) for s in starts)
    if largest >= vocab_size:
        raise DataError(
            f"{dataset.prefix}.bin holds token id {largest} but the model vocabulary has {vocab_size} ids: the data "
            f"was tokenized with another tokenizer than this run's. Re-tokenize it with tools/preprocess_data.py and "
            f"this run's --tokenizer-model; or, if the data's own tokenizer is the one to train with, pass that one "
            f"as --tokenizer-model (the vocabulary follows it; at least {largest + 1} ids)"
        )


def group_rank_and_barrier(group):
    """(rank, barrier) callables of a torch.distributed process group."""
    return (lambda: dist.get_rank(group)), (lambda: dist.barrier(group=group))


def build_train_dataset(
    data_path: Sequence[str],
    seq_length: int,
    num_samples: int,
    seed: int,
    cache_dir: str | None = None,
    vocab_size: int | None = None,
    rank: Callable[[], int] | None = None,
    barrier: Callable[[], None] | None = None,
    group=None,
    split: Sequence[float] | None = None,
):
    """The training samples for Megatron's --data-path list: `num_samples` (at least) of one stream.

    `["prefix"]` or `["shard0", "shard1"]`: one corpus (a PackedSampleDataset);
    `["0.7", "a", "0.3", "b"]`: a BlendedDataset whose sample k comes from corpus a or b in a
    fixed interleave of the weights. Sample k is a pure function of (files, blend weights, seed,
    seq_length, split): `num_samples` only sets how many samples are made available, so a shorter
    run's samples are the first samples of a longer run's. `split` (normalised train, validation,
    test weights, see `megamlm.data.splits`) keeps only the training documents of each corpus.
    Every file is opened and checked (and, with `vocab_size`, its token ids) before any index is
    built. `rank`/`barrier` callables, or a torch.distributed process `group`, make only its rank 0
    build the cached index while the other ranks wait, then memory-map it (see PackedSampleDataset).
    """
    return _build_stream(data_path, seq_length, num_samples, seed, cache_dir, vocab_size, rank, barrier, group,
                         split, TRAIN)


def build_validation_dataset(
    data_path: Sequence[str],
    seq_length: int,
    num_samples: int,
    seed: int,
    cache_dir: str | None = None,
    vocab_size: int | None = None,
    group=None,
    split: Sequence[float] | None = None,
):
    """The validation samples: with `split`, the validation documents of each corpus of `data_path` (the ones
    `build_train_dataset` leaves out); without, every document of `data_path` (--valid-data-path). The same
    stream construction as training; `first_pass_samples()` says how many leading samples repeat no window."""
    return _build_stream(data_path, seq_length, num_samples, seed, cache_dir, vocab_size, None, None, group,
                         split, VALIDATION)


def _build_stream(data_path, seq_length, num_samples, seed, cache_dir, vocab_size, rank, barrier, group, split, part):
    if group is not None:
        rank, barrier = group_rank_and_barrier(group)
    weights, prefixes = parse_data_path(data_path)
    datasets = [IndexedDataset(prefix) for prefix in prefixes]
    for dataset in datasets:
        if vocab_size is not None:
            check_vocab(dataset, vocab_size)
    options = dict(cache_dir=cache_dir, rank=rank, barrier=barrier)
    corpora = [datasets] if weights is None else [[d] for d in datasets]
    sequences = [_part_of(corpus, split, part, seq_length) for corpus in corpora]
    if weights is None:
        return PackedSampleDataset(datasets, seq_length, num_samples, seed, sequences=sequences[0], **options)
    for weight, dataset in zip(weights, datasets):
        if weight > 0 and dataset.num_tokens == 0:
            raise DataError(f"dataset {dataset.prefix} has weight {weight} but holds no tokens; drop it from --data-path")
    dataset_of, sample_in_dataset = load_or_build_blend_index(weights, num_samples, **options)
    parts = []
    for d, dataset in enumerate(datasets):
        count = int(np.count_nonzero(dataset_of == d))
        # A corpus that receives no sample (weight 0) is not indexed at all.
        parts.append(PackedSampleDataset(dataset, seq_length, count, seed, sequences=sequences[d], **options)
                     if count else None)
    return BlendedDataset(parts, dataset_of, sample_in_dataset, seq_length)


def _part_of(corpus: list[IndexedDataset], split, part: int, seq_length: int) -> tuple[int, int] | None:
    """The sequence range of `part` of a corpus under `split` (None: all of it); a DataError when it cannot hold
    one sample."""
    if split is None:
        return None
    first, end = part_sequences(corpus, split, part)
    lengths = corpus[0].sequence_lengths if len(corpus) == 1 else np.concatenate([d.sequence_lengths for d in corpus])
    held = int(lengths[first:end].sum(dtype=np.int64))
    if held < seq_length:
        names = ", ".join(d.prefix for d in corpus)
        raise DataError(f"the {PART_NAMES[part]} part of --split (weights {', '.join(f'{w:g}' for w in split)}) "
                        f"of {names} holds {end - first} sequences and {held} tokens, fewer than one sample of "
                        f"{seq_length} tokens; give that part a larger share of --split, or use --valid-data-path")
    return first, end

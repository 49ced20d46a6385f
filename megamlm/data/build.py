"""The sample streams a run trains and validates on, built from Megatron's --data-path list.

A ``StreamSpec`` says which stream: the files, the sample length, how many samples, the seed, and the optional
cache folder, vocabulary check and --split part. ``build_train_dataset`` and ``build_validation_dataset`` open and
check every file, then build (or read from the cache) the index of that stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch.distributed as dist

from megamlm.data.blending import BlendedDataset, load_or_build_blend_index, parse_data_path
from megamlm.data.documents import WINDOWS, DocumentSampleDataset
from megamlm.data.indexed import DataError, IndexedDataset
from megamlm.data.samples import PackedSampleDataset
from megamlm.data.splits import PART_NAMES, TRAIN, VALIDATION, part_sequences

# Token files up to this size are scanned in full for the vocabulary check; larger ones are
# sampled (64 evenly spread chunks of 1M tokens), which keeps start-up to seconds.
_FULL_SCAN_TOKENS = 1 << 30


@dataclass(frozen=True)
class StreamSpec:
    """One sample stream: sample k is a pure function of (files, blend weights, seed, seq_length, split);
    ``num_samples`` only sets how many samples are made available, so a shorter run's samples are the first
    samples of a longer run's."""

    data_path: Sequence[str]
    """Megatron's --data-path list: ``["prefix"]`` or ``["shard0", "shard1"]`` (one corpus), or
    ``["0.7", "a", "0.3", "b"]`` (a blend whose sample k comes from a or b in a fixed interleave of the weights)."""
    seq_length: int
    num_samples: int
    """At least this many samples are available."""
    seed: int
    cache_dir: str | None = None
    """Where the index arrays are cached (None: built in memory each time)."""
    vocab_size: int | None = None
    """With a size, every file's token ids are checked to be below it before any index is built."""
    split: Sequence[float] | None = None
    """Normalised (train, validation, test) weights of --split (``megamlm.data.splits``): each corpus keeps only
    the documents of the part built; None: every document."""
    sample_mode: str = "windows"
    """How samples are cut (``data/documents.py``): windows of the packed stream, or whole documents packed
    (``packed_documents``) or one per row (``document_per_row``)."""


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


def build_train_dataset(spec: StreamSpec, group=None, rank: Callable[[], int] | None = None,
                        barrier: Callable[[], None] | None = None):
    """The training samples of ``spec``: a PackedSampleDataset for one corpus, a BlendedDataset for a blend;
    with ``spec.split``, only the training documents of each corpus.

    Every file is opened and checked (and, with ``spec.vocab_size``, its token ids) before any index is built.
    ``rank``/``barrier`` callables, or a torch.distributed process ``group``, make only its rank 0 build the
    cached index while the other ranks wait, then memory-map it (see PackedSampleDataset).
    """
    if group is not None:
        rank, barrier = group_rank_and_barrier(group)
    return _build_stream(spec, TRAIN, rank, barrier)


def build_validation_dataset(spec: StreamSpec, group=None):
    """The validation samples: with ``spec.split``, the validation documents of each corpus (the ones
    ``build_train_dataset`` leaves out); without, every document of ``spec.data_path`` (--valid-data-path). The
    same stream construction as training; ``first_pass_samples()`` says how many leading samples repeat no
    window."""
    rank, barrier = group_rank_and_barrier(group) if group is not None else (None, None)
    return _build_stream(spec, VALIDATION, rank, barrier)


def _build_stream(spec: StreamSpec, part: int, rank, barrier):
    weights, prefixes = parse_data_path(spec.data_path)
    datasets = [IndexedDataset(prefix) for prefix in prefixes]
    for dataset in datasets:
        if spec.vocab_size is not None:
            check_vocab(dataset, spec.vocab_size)
    options = dict(cache_dir=spec.cache_dir, rank=rank, barrier=barrier)
    corpora = [datasets] if weights is None else [[d] for d in datasets]
    sequences = [part_of(corpus, spec.split, part, sample_floor(spec)) for corpus in corpora]
    if weights is None:
        return sample_dataset(datasets, spec.seq_length, spec.num_samples, spec.seed, spec.sample_mode, sequences[0],
                              **options)
    for weight, dataset in zip(weights, datasets):
        if weight > 0 and dataset.num_tokens == 0:
            raise DataError(f"dataset {dataset.prefix} has weight {weight} but holds no tokens; drop it from "
                            "--data-path")
    dataset_of, sample_in_dataset = load_or_build_blend_index(weights, spec.num_samples, **options)
    parts = []
    for d, dataset in enumerate(datasets):
        count = int(np.count_nonzero(dataset_of == d))
        # A corpus that receives no sample (weight 0) is not indexed at all.
        parts.append(sample_dataset(dataset, spec.seq_length, count, spec.seed, spec.sample_mode, sequences[d],
                                    **options) if count else None)
    return BlendedDataset(parts, dataset_of, sample_in_dataset, spec.seq_length)


def sample_floor(spec: StreamSpec) -> int:
    """The fewest tokens a corpus needs for one sample: a window's, or one token (a document) in a document mode."""
    return spec.seq_length if spec.sample_mode == WINDOWS else 1


def part_of(corpus: list[IndexedDataset], split, part: int, seq_length: int) -> tuple[int, int] | None:
    """The sequence range of `part` of a corpus under `split` (None: all of it); a DataError when it cannot hold
    one sample (``seq_length``: the tokens one sample needs)."""
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


def sample_dataset(datasets, seq_length: int, num_samples: int, seed: int, mode: str, sequences=None,
                   **cache: str | Callable | None):
    """One corpus's samples in ``mode``: windows of the packed stream (PackedSampleDataset, bitwise what it always
    was) or whole documents (DocumentSampleDataset)."""
    if mode == WINDOWS:
        return PackedSampleDataset(datasets, seq_length, num_samples, seed, sequences=sequences, **cache)
    return DocumentSampleDataset(datasets, seq_length, num_samples, seed, mode, sequences, **cache)

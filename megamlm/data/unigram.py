"""The unigram entropy of a split's tokens: the loss of a model that predicts every masked token from its
frequency alone, the plateau an MLM run must leave (issue 32: the miniature's MLM arm must end at least 0.5 nats
under it).

MLM predicts only the non-special tokens (megamlm/objectives: special ids are never selected), so the counts
leave the special tokens out. Two figures: the entropy of the split's own token frequencies (the lower bound of
any unigram predictor on that split), and the cross-entropy on that split of the frequencies of the training
part, add-one smoothed over the vocabulary (what a model that learned only the training unigram scores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from megamlm.data.indexed import IndexedDataset
from megamlm.data.splits import TRAIN, VALIDATION, part_sequences


def token_counts(dataset: IndexedDataset, first: int, end: int, vocab_size: int,
                 special_ids: Sequence[int] = ()) -> np.ndarray:
    """How often each id occurs in sequences [first, end) of ``dataset``, special ids set to zero."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for index in range(first, end):
        counts += np.bincount(np.asarray(dataset[index], dtype=np.int64), minlength=vocab_size)[:vocab_size]
    counts[list(special_ids)] = 0
    return counts


def unigram_entropy(counts: np.ndarray) -> float:
    """Entropy in nats of the frequencies ``counts`` (zeros ignored)."""
    counts = np.asarray(counts, dtype=np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def unigram_cross_entropy(train_counts: np.ndarray, counts: np.ndarray) -> float:
    """Nats per token of ``counts`` under the add-one smoothed frequencies ``train_counts``."""
    q = (np.asarray(train_counts, dtype=np.float64) + 1.0) / (train_counts.sum() + len(train_counts))
    counts = np.asarray(counts, dtype=np.float64)
    return float(-(counts * np.log(q)).sum() / counts.sum())


@dataclass(frozen=True)
class UnigramFigures:
    tokens: int
    """Non-special tokens of the split."""
    entropy: float
    """Entropy of the split's own frequencies, nats."""
    train_cross_entropy: float
    """Cross-entropy of the training part's smoothed frequencies on the split, nats."""


def split_unigram(prefix: str, weights: Sequence[float], tokenizer, part: int = VALIDATION) -> UnigramFigures:
    """The unigram figures of ``part`` of the dataset at ``prefix`` split by normalised ``weights`` (--split)."""
    dataset = IndexedDataset(prefix)
    total = sum(weights)
    weights = [w / total for w in weights]
    counts = token_counts(dataset, *part_sequences([dataset], weights, part), tokenizer.vocab_size,
                          tokenizer.special_ids)
    train = token_counts(dataset, *part_sequences([dataset], weights, TRAIN), tokenizer.vocab_size,
                         tokenizer.special_ids)
    return UnigramFigures(int(counts.sum()), unigram_entropy(counts), unigram_cross_entropy(train, counts))

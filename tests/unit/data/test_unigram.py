"""The unigram entropy of a split's tokens (megamlm/data/unigram.py), the plateau the miniature's MLM arm must leave."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from megamlm.data.unigram import split_unigram, token_counts, unigram_cross_entropy, unigram_entropy
from tests.helpers import write_dataset


def test_entropy_of_hand_made_counts():
    assert unigram_entropy(np.array([5, 5])) == pytest.approx(math.log(2))
    assert unigram_entropy(np.array([0, 3, 0, 3, 3, 3])) == pytest.approx(math.log(4))  # zeros ignored
    assert unigram_entropy(np.array([7, 0])) == 0.0
    # Add-one smoothed training frequencies (3+1)/(4+2), (1+1)/(4+2) scored on counts [1, 1].
    expected = -(math.log(4 / 6) + math.log(2 / 6)) / 2
    assert unigram_cross_entropy(np.array([3, 1]), np.array([1, 1])) == pytest.approx(expected)


def test_split_unigram_counts_the_validation_documents_without_special_tokens(tmp_path):
    # 10 documents in file order; split 8,1,1 -> documents 0-7 train, 8 validation, 9 test. Id 1 is eos (special).
    docs = [[4, 5, 1]] * 8 + [[4, 4, 6, 7, 1], [9, 1]]
    prefix = write_dataset(tmp_path / "d", docs)
    tokenizer = SimpleNamespace(vocab_size=10, special_ids=[0, 1, 2, 3])
    from megamlm.data.indexed import IndexedDataset

    counts = token_counts(IndexedDataset(prefix), 8, 9, 10, tokenizer.special_ids)
    assert counts.tolist() == [0, 0, 0, 0, 2, 0, 1, 1, 0, 0]
    figures = split_unigram(prefix, [8, 1, 1], tokenizer)
    assert figures.tokens == 4
    assert figures.entropy == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))
    train = np.zeros(10)
    train[4] = train[5] = 8
    assert figures.train_cross_entropy == pytest.approx(unigram_cross_entropy(train, counts))

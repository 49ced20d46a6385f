"""--split: contiguous document ranges, Megatron's bookends, and training samples that never touch a held-out one."""

import numpy as np
import pytest

from megamlm.config import DataConfig, split_weights
from megamlm.data import (
    DataError,
    IndexedDataset,
    IndexedDatasetWriter,
    StreamSpec,
    build_train_dataset,
    build_validation_dataset,
)
from megamlm.data.splits import part_sequences, split_document_ranges

WEIGHTS = (0.8, 0.15, 0.05)


def weights(text: str):
    return split_weights(DataConfig(split=text))


@pytest.mark.parametrize("text", ["969,30,1", "99,1", "98/2/0", "1, 1, 1", "0.7,0.2,0.1"])
@pytest.mark.parametrize("documents", [1, 7, 100, 9996, 123457])
def test_document_ranges_are_megatrons(text, documents):
    blended = pytest.importorskip("megatron.core.datasets.blended_megatron_dataset_config")
    vector = blended.parse_and_normalize_split(text)
    assert weights(text) == pytest.approx(tuple(vector))
    matrix = blended.convert_split_vector_to_split_matrix(vector)
    expected = [(int(round(m[0] * documents)), int(round(m[1] * documents))) if m else None for m in matrix]
    ours = split_document_ranges(documents, weights(text))
    assert [r if r[0] < r[1] or e is not None else None for r, e in zip(ours, expected)] == expected
    assert ours[0][0] == 0 and ours[-1][1] == documents
    assert all(a[1] == b[0] for a, b in zip(ours, ours[1:]))  # contiguous, disjoint, covering


def write_documents(prefix, sizes, sequences_per_document=1) -> IndexedDataset:
    """Document d holds tokens all equal to d, so every sample shows which documents it was cut from."""
    with IndexedDatasetWriter(prefix, np.int32) as writer:
        for d, size in enumerate(sizes):
            lengths = None if sequences_per_document == 1 else [size // 2, size - size // 2]
            writer.add_document(np.full(size, d), lengths)
    return IndexedDataset(prefix)


@pytest.mark.parametrize("sequences_per_document", [1, 2])
def test_training_samples_never_hold_a_validation_token_and_validation_samples_only_hold_them(tmp_path,
                                                                                             sequences_per_document):
    sizes = np.random.default_rng(0).integers(4, 40, 200)
    write_documents(tmp_path / "c", sizes, sequences_per_document)
    (train_first, train_end), (valid_first, valid_end), _ = split_document_ranges(200, WEIGHTS)
    assert (train_first, train_end, valid_first, valid_end) == (0, 160, 160, 190)
    train = build_train_dataset(StreamSpec([str(tmp_path / "c")], 16, num_samples=3000, seed=3, split=WEIGHTS))
    valid = build_validation_dataset(StreamSpec([str(tmp_path / "c")], 16, num_samples=60, seed=3, split=WEIGHTS))
    assert train.windows_per_epoch == int(sizes[:160].sum()) // 16  # the stream of the training documents alone
    assert len(train) / train.windows_per_epoch > 2  # several epochs
    train_tokens = {int(t) for k in range(len(train)) for t in train[k]}
    valid_tokens = {int(t) for k in range(len(valid)) for t in valid[k]}
    assert train_tokens == set(range(160))  # every training document, and nothing else
    assert valid_tokens <= set(range(160, 190)) and len(valid_tokens) > 20
    assert valid.first_pass_samples() == int(sizes[160:190].sum()) // 16


def test_without_a_split_the_stream_is_unchanged(tmp_path):
    write_documents(tmp_path / "c", np.random.default_rng(1).integers(4, 40, 50))
    plain = build_train_dataset(StreamSpec([str(tmp_path / "c")], seq_length=8, num_samples=40, seed=3))
    also = build_train_dataset(StreamSpec([str(tmp_path / "c")], seq_length=8, num_samples=40, seed=3, split=None))
    assert all(np.array_equal(plain[k], also[k]) for k in range(40))


def test_shards_of_one_corpus_are_split_over_their_concatenated_documents(tmp_path):
    a = write_documents(tmp_path / "a", [10] * 30)
    b = write_documents(tmp_path / "b", [10] * 20)
    assert part_sequences([a, b], WEIGHTS, 1) == (40, 48)  # documents 40-47 of 50: the second shard's 10-17


def test_a_blend_splits_each_corpus(tmp_path):
    write_documents(tmp_path / "a", [12] * 100)
    write_documents(tmp_path / "b", [12] * 40)
    blend = ["0.5", str(tmp_path / "a"), "0.5", str(tmp_path / "b")]
    valid = build_validation_dataset(StreamSpec(blend, seq_length=6, num_samples=20, seed=1, split=WEIGHTS))
    assert {int(t) for k in range(20) for t in valid[k]} <= set(range(80, 95)) | set(range(32, 38))
    assert valid.first_pass_samples() == 20
    short = build_validation_dataset(StreamSpec(blend, seq_length=6, num_samples=40, seed=1, split=WEIGHTS))
    assert short.first_pass_samples() < 40  # corpus b's 6 validation documents hold 12 windows


def test_a_part_that_cannot_hold_one_sample_is_named(tmp_path):
    write_documents(tmp_path / "c", [5] * 10)
    with pytest.raises(DataError, match=r"the validation part of --split \(weights 0.8, 0.15, 0.05\) of .* holds 2 "
                                        r"sequences and 10 tokens, fewer than one sample of 16 tokens"):
        build_validation_dataset(StreamSpec([str(tmp_path / "c")], seq_length=16, num_samples=4, seed=1, split=WEIGHTS))

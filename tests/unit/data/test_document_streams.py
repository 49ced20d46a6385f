"""A document sample mode across a recipe's segments (data/document_streams.py): the documents are read in each
epoch's order whatever lengths and data the phases use, each once per epoch, none split."""

import numpy as np
import pytest
from helpers import write_dataset

from megamlm.data import IndexedDataset, StreamSpec, build_train_dataset
from megamlm.data.documents import build_rows, tokens_through
from megamlm.data.phase_streams import RecipeStreamSpec, StreamSegment, build_recipe_dataset

MODES = ("packed_documents", "document_per_row")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("lengths", [(32, 16, 32), (16, 48, 48), (32, 32, 8)])
def test_documents_follow_each_epochs_order_across_lengths(tmp_path, make_documents, mode, lengths):
    docs = make_documents()
    prefix = write_dataset(tmp_path / "d", docs)
    other = write_dataset(tmp_path / "o", make_documents(seed=1))
    sizes = IndexedDataset(prefix).sequence_lengths.astype(np.int32)
    bounds = (0, 23, 61, 140)
    segments = (StreamSegment((prefix,), lengths[0], 0, 23), StreamSegment(("0.5", prefix, "0.5", other), lengths[1],
                23, 61), StreamSegment((prefix,), lengths[2], 61, 140))
    dataset = build_recipe_dataset(RecipeStreamSpec(segments, seed=3, sample_mode=mode))
    mine = [k for k in range(140) if k < 23 or k >= 61 or dataset.datasets[1].dataset_of[k - 23] == 0]
    read = []
    for k in mine:
        segment = next(s for s in range(3) if bounds[s] <= k < bounds[s + 1])
        pieces = dataset.sample_documents(k)
        assert sum(length for _, _, length in pieces) <= lengths[segment]
        assert int(np.count_nonzero(dataset.document_ids(k) >= 0)) == sum(length for _, _, length in pieces)
        start, tokens = 0, dataset[k]
        for document, offset, length in pieces:
            assert offset == 0 and length == min(int(sizes[document]), lengths[segment])  # whole, or cut
            np.testing.assert_array_equal(tokens[start:start + length], docs[document][:length])
            start += length
        read += [document for document, _, _ in pieces]
        if mode == "document_per_row":
            assert len(pieces) == 1
    nonempty = sorted(int(d) for d in np.flatnonzero(sizes))
    for start in range(0, len(read), len(nonempty)):  # epoch after epoch, each document once
        epoch = read[start:start + len(nonempty)]
        assert len(set(epoch)) == len(epoch) and set(epoch) <= set(nonempty)
        assert len(epoch) < len(nonempty) or sorted(epoch) == nonempty
    if mode == "document_per_row":  # in each epoch's seeded order, whatever the lengths
        epochs = np.concatenate([build_rows(sizes, 32, 3, e, mode)[0] for e in range(len(read) // len(docs) + 2)])
        assert read == epochs[:len(read)].tolist()
    first = build_train_dataset(StreamSpec([prefix], lengths[0], 23, seed=3, sample_mode=mode))
    for k in range(23):  # the first segment is the one-segment stream, bitwise
        np.testing.assert_array_equal(dataset[k], first[k])
    real = [int(np.count_nonzero(dataset.document_ids(k) >= 0)) for k in range(140)]
    assert [tokens_through(dataset, end) for end in (0, 10, 23, 40, 61, 100, 140)] == \
        [sum(real[:end]) for end in (0, 10, 23, 40, 61, 100, 140)]


@pytest.mark.parametrize("modes", [("windows", "packed_documents", "document_per_row", "windows"),
                                   ("document_per_row", "windows", "packed_documents", "packed_documents"),
                                   ("packed_documents", "windows", "windows", "document_per_row")])
def test_a_corpus_changes_sample_mode_between_segments_without_rereading_or_skipping(tmp_path, make_documents, modes):
    """Each segment cuts what the epoch has left in its own mode: no token is read twice before every document has
    been read (but those a windows epoch's dropped tail holds), and each segment's samples are of its mode."""
    docs = make_documents()
    prefix = write_dataset(tmp_path / "d", docs)
    bounds, lengths = (0, 9, 20, 31, 120), (32, 16, 24, 16)
    segments = tuple(StreamSegment((prefix,), length, first, end, mode)
                     for length, first, end, mode in zip(lengths, bounds, bounds[1:], modes))
    dataset = build_recipe_dataset(RecipeStreamSpec(segments, seed=5, sample_mode="windows"))
    read = [np.zeros(len(d), dtype=np.int64) for d in docs]
    for k in range(bounds[-1]):
        s = next(i for i in range(4) if bounds[i] <= k < bounds[i + 1])
        pieces = dataset.sample_documents(k)
        real = int(np.count_nonzero(dataset.document_ids(k) >= 0))
        if modes[s] == "windows":
            assert real == lengths[s] == sum(n for _, _, n in pieces)
        else:
            assert all(o == 0 and n == min(len(docs[d]), lengths[s]) for d, o, n in pieces) and real <= lengths[s]
        if any(read[d][o:o + n].any() for d, o, n in pieces):  # the first token read again: the epoch is over
            unread = [len(docs[d]) for d in range(len(docs)) if len(docs[d]) and not read[d].any()]
            assert sum(unread) < max(lengths) and k >= bounds[2]  # after two segments at least
            break
        for d, o, n in pieces:
            read[d][o:o + n] += 1
    else:
        raise AssertionError("the run never finished an epoch")
    np.testing.assert_array_equal(dataset[bounds[-1] - 1], build_recipe_dataset(
        RecipeStreamSpec(segments, seed=5, sample_mode="windows"))[bounds[-1] - 1])  # a pure function of the recipe

"""The document sample modes (megamlm/data/documents.py): no document split, each once per epoch, padding apart."""

import numpy as np
import pytest
from helpers import write_dataset

from megamlm.data import DataError, IndexedDataset, StreamSpec, build_train_dataset, build_validation_dataset
from megamlm.data.build import sample_dataset
from megamlm.data.documents import DocumentSampleDataset, build_rows, pack_rows
from megamlm.data.samples import PackedSampleDataset

MODES = ("packed_documents", "document_per_row")


@pytest.fixture(scope="module")
def austen():
    """The bundled corpus (9,996 paragraphs), tokenized once per machine."""
    from megamlm.data import prepare_embedded_corpus

    prefix, _ = prepare_embedded_corpus()
    return IndexedDataset(prefix)


def rows_of_epoch(ds, epoch):
    first = sum(ds.rows_of(e) for e in range(epoch))
    return range(first, first + ds.rows_of(epoch))


def reconstruct(ds, files, k):
    """Sample k's documents read back from its tokens and document ids alone, checked against the files."""
    tokens, ids = ds[k], ds.document_ids(k)
    assert tokens.shape == ids.shape == (ds.seq_length,) and tokens.dtype == np.int64 and ids.dtype == np.int32
    real = ids >= 0
    assert real[:int(real.sum())].all()  # padding only at the end
    assert np.all(tokens[~real] == 0)
    pieces = ds.sample_documents(k)
    numbers = ids[real]
    assert np.array_equal(numbers, np.repeat(np.arange(len(pieces)), [n for _, _, n in pieces]))
    start = 0
    for number, (document, offset, length) in enumerate(pieces):
        assert offset == 0 and length == min(len(files[document]), ds.seq_length)  # whole, or cut at seq_length
        np.testing.assert_array_equal(tokens[start:start + length], files[document][:length])
        assert np.all(ids[start:start + length] == number)
        start += length
    return [document for document, _, _ in pieces]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seq_length", [64, 512])
def test_austen_no_document_split_and_each_document_once_per_epoch(austen, mode, seq_length):
    ds = DocumentSampleDataset(austen, seq_length, 1, seed=5, mode=mode)
    ds.ensure(ds.rows_of(0) + 3)
    ds.ensure(sum(ds.rows_of(e) for e in range(2)))
    files = [austen[i] for i in range(len(austen))]
    nonempty = {i for i, f in enumerate(files) if len(f)}
    for epoch in range(2):
        seen = [d for k in rows_of_epoch(ds, epoch) for d in reconstruct(ds, files, k)]
        assert len(seen) == len(set(seen)) and set(seen) == nonempty  # every document once, none split
    if mode == "document_per_row":
        assert ds.rows_of(0) == len(nonempty)
        assert all(len(ds.sample_documents(k)) == 1 for k in range(50))
    else:  # packed: best fit leaves under 1% of the rows' tokens to padding on these paragraphs (~90 tokens)
        rows = ds.rows_of(0)
        assert ds.tokens_through(rows) > 0.99 * rows * seq_length


def test_epochs_have_their_own_order_and_a_seed_its_own(austen):
    a = DocumentSampleDataset(austen, 128, 1, seed=5, mode="packed_documents")
    a.ensure(a.rows_of(0) + 1)
    b = DocumentSampleDataset(austen, 128, 1, seed=6, mode="packed_documents")
    assert not np.array_equal(a.epochs[0][0], a.epochs[1][0])
    assert not np.array_equal(a.epochs[0][0], b.epochs[0][0])


def test_the_epoch_visits_documents_in_the_windows_epoch_order(tmp_path, make_documents):
    docs = make_documents()
    files = IndexedDataset(write_dataset(tmp_path / "d", docs))
    windows = PackedSampleDataset(files, 16, 10, seed=3)
    order = windows.epochs[0].document_order
    order = order[[len(docs[d]) > 0 for d in order]]
    per_row = DocumentSampleDataset(files, 16, 10, seed=3, mode="document_per_row")
    np.testing.assert_array_equal(per_row.epochs[0][0], order)
    packed = DocumentSampleDataset(files, 16, 10, seed=3, mode="packed_documents")
    assert sorted(packed.epochs[0][0]) == sorted(order)


def test_a_shorter_run_is_a_prefix_of_a_longer_one(tmp_path, make_documents):
    files = IndexedDataset(write_dataset(tmp_path / "d", make_documents()))
    for mode in MODES:
        short = DocumentSampleDataset(files, 32, 5, seed=1, mode=mode)
        long = DocumentSampleDataset(files, 32, 200, seed=1, mode=mode)
        assert long.num_epochs > 1
        for k in range(5):
            np.testing.assert_array_equal(short[k], long[k])
            np.testing.assert_array_equal(short.document_ids(k), long.document_ids(k))


def rows(lengths, mode="packed_documents"):
    """The rows pack_rows makes of documents of these lengths at 8 tokens, as lists of positions."""
    positions, starts = pack_rows(np.array(lengths), 8, mode)
    return [part.tolist() for part in np.split(positions, starts[1:-1])]


def test_best_fit_packing(monkeypatch):
    # 3 opens row A (room 5), 4 goes to A (room 1), 6 opens B (room 2), 2 fills B (emitted), 1 fills A (emitted).
    assert rows([3, 4, 6, 2, 1]) == [[2, 3], [0, 1, 4]]
    assert rows([8, 1, 7]) == [[0], [1, 2]]  # a full row is emitted at once
    assert rows([3, 4, 2], "document_per_row") == [[0], [1], [2]]
    monkeypatch.setattr("megamlm.data.documents.OPEN_ROWS", 2)
    # 7 finds two rows open (rooms 3 and 2): the fullest (6, room 2) is emitted, then 3 fills the first row.
    assert rows([5, 6, 7, 3, 2]) == [[1], [0, 3], [2], [4]]
    lengths = np.random.default_rng(0).integers(1, 9, 500)
    positions, starts = pack_rows(lengths, 8, "packed_documents")
    assert sorted(positions.tolist()) == list(range(500))
    assert all(lengths[positions[a:b]].sum() <= 8 for a, b in zip(starts[:-1], starts[1:]))


def test_cache_is_reused_and_named_by_the_mode(tmp_path, make_documents, monkeypatch):
    files = IndexedDataset(write_dataset(tmp_path / "d", make_documents()))
    cache = str(tmp_path / "cache")
    fresh = {mode: DocumentSampleDataset(files, 32, 100, seed=2, mode=mode, cache_dir=cache) for mode in MODES}
    assert len(list((tmp_path / "cache").glob("documents-*-description.json"))) == sum(
        d.num_epochs for d in fresh.values())

    def no_build(*args, **kwargs):
        raise AssertionError("the cached rows were rebuilt")

    monkeypatch.setattr("megamlm.data.documents.build_rows", no_build)
    for mode in MODES:
        cached = DocumentSampleDataset(files, 32, 100, seed=2, mode=mode, cache_dir=cache)
        for k in (0, 17, 99):
            np.testing.assert_array_equal(cached[k], fresh[mode][k])


def test_only_rank_zero_builds(tmp_path, make_documents):
    files = IndexedDataset(write_dataset(tmp_path / "d", make_documents()))
    waited = []
    with pytest.raises(DataError, match="missing or malformed after rank 0 built it"):
        DocumentSampleDataset(files, 32, 10, seed=2, mode="packed_documents", cache_dir=str(tmp_path / "c"),
                              rank=lambda: 1, barrier=lambda: waited.append(1))
    assert waited == [1]


def test_streams_build_the_mode_for_training_and_validation(tmp_path, make_documents):
    prefix = write_dataset(tmp_path / "d", make_documents())
    for mode in MODES:
        spec = StreamSpec([prefix], 32, 20, seed=1, sample_mode=mode, split=(0.8, 0.2, 0.0))
        train, valid = build_train_dataset(spec), build_validation_dataset(spec)
        assert isinstance(train, DocumentSampleDataset) and isinstance(valid, DocumentSampleDataset)
        assert train.mode == valid.mode == mode
        blend = build_train_dataset(StreamSpec(["0.5", prefix, "0.5", prefix], 32, 20, seed=1, sample_mode=mode))
        assert all(isinstance(part, DocumentSampleDataset) for part in blend.datasets)
        assert blend.first_pass_samples() > 0
    windows = build_train_dataset(StreamSpec([prefix], 32, 20, seed=1))
    assert isinstance(windows, PackedSampleDataset)
    with pytest.raises(DataError, match="unknown sample mode"):
        sample_dataset([IndexedDataset(prefix)], 32, 1, 1, "rows")


def test_build_rows_skips_empty_documents():
    sizes = np.array([0, 5, 0, 9, 3], dtype=np.int32)
    order, row_starts = build_rows(sizes, 8, seed=1, epoch=0, mode="packed_documents")
    assert sorted(order.tolist()) == [1, 3, 4] and row_starts[-1] == 3


def test_tokens_through_counts_no_padding(tmp_path, make_documents):
    from megamlm.data.documents import tokens_through

    prefix = write_dataset(tmp_path / "d", make_documents())
    for mode in MODES:
        ds = DocumentSampleDataset(IndexedDataset(prefix), 32, 150, seed=1, mode=mode)
        assert ds.num_epochs > 1
        brute = np.concatenate([[0], np.cumsum([int(np.count_nonzero(ds.document_ids(k) >= 0)) for k in range(150)])])
        assert [tokens_through(ds, end) for end in range(151)] == brute.tolist()
        blend = build_train_dataset(StreamSpec(["0.3", prefix, "0.7", prefix], 32, 60, seed=1, sample_mode=mode))
        real = [int(np.count_nonzero(blend.document_ids(k) >= 0)) for k in range(60)]
        assert tokens_through(blend, 60) == sum(real) and tokens_through(blend, 7) == sum(real[:7])
    windows = build_train_dataset(StreamSpec([prefix], 32, 20, seed=1))
    assert tokens_through(windows, 20) == 20 * 32


@pytest.mark.parametrize("mode", MODES)
def test_batches_of_whole_documents_never_mask_or_target_padding_and_restart_positions(austen, mode):
    from megamlm.objectives.batch import make_batch
    from megamlm.objectives.masking import IGNORE_INDEX, MaskingSpec

    spec = MaskingSpec(0.9, 1.0, 0.0, 0.0, mask_id=3, special_ids=(3,), random_vocab_size=100)
    ds = DocumentSampleDataset(austen, 64, 1, seed=5, mode=mode)
    rows = ds.rows_of(0)
    ds.ensure(rows)
    ids = list(range(rows - 32, rows))  # the epoch's last rows: packed ones end with the rows left open, padded
    tokens, documents = np.stack([ds[k] for k in ids]), np.stack([ds.document_ids(k) for k in ids])
    padding = documents < 0
    assert padding.any() and (~padding).any()
    for objective in ("mlm", "clm", "mntp"):
        batch = make_batch(objective, tokens, ids, 7, spec, documents, whole_documents=True)
        targets, inputs = batch.targets.numpy(), batch.input_ids.numpy()
        assert np.all(targets[padding] == IGNORE_INDEX) and np.array_equal(inputs[padding], tokens[padding])
        assert np.array_equal(batch.document_ids.numpy(), documents)
        positions = batch.position_ids.numpy()
        for row, docs in zip(positions, documents):
            for number in set(docs[docs >= 0].tolist()):
                np.testing.assert_array_equal(row[docs == number], np.arange(np.count_nonzero(docs == number)))
        if objective == "clm":  # a target only where the next token is of the same document
            same = np.zeros_like(padding)
            same[:, :-1] = (documents[:, 1:] == documents[:, :-1]) & (documents[:, :-1] >= 0)
            assert np.array_equal(targets != IGNORE_INDEX, same)
            np.testing.assert_array_equal(targets[:, :-1][same[:, :-1]], tokens[:, 1:][same[:, :-1]])
        if objective == "mntp":  # the target of position i is token i+1 of the same document
            scored = targets != IGNORE_INDEX
            assert not np.any(scored & ~same)
        else:
            assert (targets != IGNORE_INDEX).any()
    windows = make_batch("mlm", tokens, ids, 7, spec)  # without the flag: the windows mode's batch, padding and all
    assert windows.position_ids is None and (windows.targets.numpy()[padding] != IGNORE_INDEX).any()


def test_inspect_data_shows_a_document_modes_rows(tmp_path, make_documents, capsys):
    from helpers import tool_main

    prefix = write_dataset(tmp_path / "d", make_documents())
    inspect = tool_main("inspect_data")
    run = ["--data-path", prefix, "--seq-length", "32", "--seed", "9", "--sample-mode", "document_per_row"]
    ds = DocumentSampleDataset(IndexedDataset(prefix), 32, 10, seed=9, mode="document_per_row")
    short = next(k for k in range(10) if ds.sample_tokens(k) < 32)
    assert inspect(["sample", *run, "--index", str(short)]) == 0
    out = capsys.readouterr().out
    assert f"sample {short}: 32 tokens ({32 - ds.sample_tokens(short)} of them padding)" in out
    (document, _, length), = ds.sample_documents(short)
    assert f"documents: {document}[0:{length}]" in out

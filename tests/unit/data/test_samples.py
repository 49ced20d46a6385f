import json

import numpy as np
import pytest
from helpers import write_dataset

from megamlm.data import DataError, IndexedDataset, StreamSpec, build_train_dataset, index_cache
from megamlm.data.sample_index import build_epoch, build_sample_index_numpy
from megamlm.data.samples import PackedSampleDataset


def reference_samples(docs, ds, count):
    """Samples and document ids straight from the definition: window k % W of epoch k // W's packed stream."""
    seq_length, windows = ds.seq_length, ds.windows_per_epoch
    for k in range(count):
        epoch, position = divmod(k, windows)
        order = ds.epochs[epoch].document_order
        stream = np.concatenate([docs[d] for d in order])
        owner = np.repeat(np.arange(len(order)), [len(docs[d]) for d in order])
        w = int(ds.epochs[epoch].shuffle_index[position])
        window = slice(w * seq_length, (w + 1) * seq_length)
        owners = owner[window]
        yield stream[window], np.concatenate([[0], np.cumsum(owners[1:] != owners[:-1])])


@pytest.mark.parametrize("seq_length,num_samples", [(16, 50), (64, 200), (7, 1), (1000, 9)])
def test_samples_are_windows_of_each_epochs_shuffled_packed_stream(tmp_path, make_documents, seq_length, num_samples):
    docs = make_documents()
    ds = PackedSampleDataset(IndexedDataset(write_dataset(tmp_path / "d", docs)), seq_length, num_samples, seed=3)
    assert len(ds) == num_samples
    assert ds.windows_per_epoch == sum(len(d) for d in docs) // seq_length
    assert ds.num_epochs == -(-num_samples // ds.windows_per_epoch)
    for k, (tokens, document_ids) in enumerate(reference_samples(docs, ds, num_samples)):
        sample = ds[k]
        assert sample.dtype == np.int64 and sample.shape == (seq_length,)
        np.testing.assert_array_equal(sample, tokens)
        np.testing.assert_array_equal(ds.document_ids(k), document_ids)
        assert ds.document_ids(k).dtype == np.int32


def token_coverage(ds, docs, samples):
    """How often each token of each document is in one of `samples` (from the pieces of each sample)."""
    seen = [np.zeros(len(d), dtype=np.int64) for d in docs]
    for k in samples:
        for document, offset, length in ds.sample_documents(k):
            seen[document][offset : offset + length] += 1
    return seen


@pytest.mark.parametrize("epochs", [1.01, 1.2, 2.5])
def test_every_epoch_consumes_each_window_exactly_once(tmp_path, make_documents, epochs):
    docs = make_documents()
    seq_length = 16
    tokens = sum(len(d) for d in docs)
    windows = tokens // seq_length
    num_samples = int(epochs * windows)
    ds = PackedSampleDataset(IndexedDataset(write_dataset(tmp_path / "d", docs)), seq_length, num_samples, seed=4)
    assert ds.windows_per_epoch == windows
    for epoch in range(int(np.ceil(epochs))):
        samples = range(epoch * windows, min((epoch + 1) * windows, num_samples))
        # each epoch packs every document once
        assert sorted(ds.epochs[epoch].document_order.tolist()) == list(range(len(docs)))
        seen = np.concatenate(token_coverage(ds, docs, samples))
        assert seen.max() == 1  # no token twice within an epoch
        if len(samples) == windows:  # a whole epoch: every token but the dropped tail (< one window)
            assert tokens - seen.sum() == tokens % seq_length
        # and, from the definition, the epoch's samples are distinct windows of its packed stream
        positions = [ds.locate(k) for k in samples]
        assert all(e == epoch for e, _ in positions)
        assert len({w for _, w in positions}) == len(samples)
    if num_samples >= windows + 10:
        # the partial last epoch is in its own seeded order, not epoch 0's again
        first = [ds.locate(k)[1] for k in range(0, 10)]
        second = [ds.locate(k)[1] for k in range(windows, windows + 10)]
        assert first != second


def test_a_shorter_run_is_a_prefix_of_a_longer_run(tmp_path, make_documents):
    docs = make_documents()
    corpus = IndexedDataset(write_dataset(tmp_path / "d", docs))
    windows = sum(len(d) for d in docs) // 16
    cache = tmp_path / "cache"
    lengths = [1, 7, windows - 1, windows, windows + 1, 3 * windows + 5]
    runs = [PackedSampleDataset(corpus, 16, n, seed=2, cache_dir=cache if n % 2 else None) for n in lengths]
    longest = runs[-1]
    for run in runs[:-1]:
        for k in range(len(run)):
            np.testing.assert_array_equal(run[k], longest[k])
            np.testing.assert_array_equal(run.document_ids(k), longest.document_ids(k))
    # the same through build_train_dataset, with and without the cache
    short = build_train_dataset(StreamSpec([str(tmp_path / "d")], 16, 40, seed=2, cache_dir=cache))
    long = build_train_dataset(StreamSpec([str(tmp_path / "d")], 16, 2 * windows + 3, seed=2))
    assert all(np.array_equal(short[k], long[k]) for k in range(40))


def test_epochs_and_determinism(tmp_path, make_documents):
    docs = make_documents()
    corpus = IndexedDataset(write_dataset(tmp_path / "d", docs))
    tokens = corpus.num_tokens
    ds = PackedSampleDataset(corpus, 32, num_samples=3 * (tokens // 32), seed=1)
    assert ds.num_epochs == 3
    orders = [epoch.document_order.tolist() for epoch in ds.epochs]
    assert all(sorted(order) == list(range(len(docs))) for order in orders)
    assert orders[0] != orders[1] != orders[2]  # each epoch its own document order
    again = PackedSampleDataset(IndexedDataset(tmp_path / "d"), 32, 3 * (tokens // 32), seed=1)
    other_seed = PackedSampleDataset(corpus, 32, 3 * (tokens // 32), seed=2)
    assert all(np.array_equal(ds[k], again[k]) for k in range(len(ds)))
    assert not all(np.array_equal(ds[k], other_seed[k]) for k in range(20))


def test_shards_concatenate_like_one_file(tmp_path, make_documents):
    docs = make_documents()
    whole = PackedSampleDataset(IndexedDataset(write_dataset(tmp_path / "all", docs)), 24, 200, seed=5)
    shards = [IndexedDataset(write_dataset(tmp_path / "a", docs[:13])),
              IndexedDataset(write_dataset(tmp_path / "b", docs[13:]))]
    split = PackedSampleDataset(shards, 24, 200, seed=5)
    assert whole.num_epochs > 1
    for k in range(200):
        np.testing.assert_array_equal(whole[k], split[k])
        np.testing.assert_array_equal(whole.document_ids(k), split.document_ids(k))


@pytest.mark.parametrize("seq_length", [1, 11, 1000])
def test_numpy_sample_index_matches_a_token_walk(make_documents, seq_length):
    sizes = np.array([len(d) for d in make_documents()], dtype=np.int32)
    document_order = np.random.RandomState(0).permutation(len(sizes)).astype(np.int32)
    windows = int(sizes.sum()) // seq_length
    got = build_sample_index_numpy(sizes, document_order, seq_length, windows)
    walk = []
    for position, document in enumerate(document_order):
        walk += [(position, offset) for offset in range(sizes[document])]
    assert [tuple(row) for row in got] == walk[::seq_length][:windows]


# ---- the cached index -----------------------------------------------------------------------


def test_cache_matches_fresh_build_and_is_reused(tmp_path, make_documents, monkeypatch):
    corpus = IndexedDataset(write_dataset(tmp_path / "d", make_documents()))
    cache = tmp_path / "cache"
    windows = corpus.num_tokens // 16
    first = PackedSampleDataset(corpus, 16, windows + 1, seed=7, cache_dir=cache)  # two epochs
    for epoch in (0, 1):
        fresh = build_epoch(corpus.sequence_lengths, 16, 7, epoch)
        for cached, built in zip(first.epochs[epoch], fresh):
            np.testing.assert_array_equal(cached, built)
    assert len(list(cache.glob("index-*.npy"))) == 6 and len(list(cache.glob("*description.json"))) == 2

    def no_build(*args, **kwargs):
        raise AssertionError("a valid cache must not be rebuilt")

    monkeypatch.setattr(index_cache, "build_epoch", no_build)
    second = PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache)  # a shorter run: epoch 0 only
    assert second.num_epochs == 1 and isinstance(second.epochs[0].sample_index, np.memmap)
    np.testing.assert_array_equal(second[5], first[5])


def test_cache_entries_follow_seed_seq_length_and_epoch_only(tmp_path, make_documents):
    corpus = IndexedDataset(write_dataset(tmp_path / "d", make_documents()))
    cache = tmp_path / "cache"

    def entries():
        return len(list(cache.glob("index-*-description.json")))

    PackedSampleDataset(corpus, 16, 40, seed=1, cache_dir=cache)
    assert entries() == 1
    PackedSampleDataset(corpus, 16, 41, seed=1, cache_dir=cache)  # another run length, same epoch: reused
    assert entries() == 1
    PackedSampleDataset(corpus, 16, 40, seed=2, cache_dir=cache)  # another seed
    assert entries() == 2
    PackedSampleDataset(corpus, 8, 40, seed=1, cache_dir=cache)  # another seq_length
    assert entries() == 3
    windows = corpus.num_tokens // 16
    PackedSampleDataset(corpus, 16, 2 * windows, seed=1, cache_dir=cache)  # one more epoch: one more entry
    assert entries() == 4
    # new data under the same file name: different document sizes, different entry
    write_dataset(tmp_path / "d", make_documents(seed=9))
    PackedSampleDataset(IndexedDataset(tmp_path / "d"), 16, 40, seed=1, cache_dir=cache)
    assert entries() == 5
    descriptions = [json.loads(p.read_text()) for p in cache.glob("*description.json")]
    assert {d["format_version"] for d in descriptions} == {index_cache.INDEX_FORMAT_VERSION}
    assert all("num_samples" not in d for d in descriptions)


def test_an_old_format_entry_is_rebuilt_not_reused(tmp_path, make_documents, monkeypatch):
    corpus = IndexedDataset(write_dataset(tmp_path / "d", make_documents()))
    cache = tmp_path / "cache"
    expected = PackedSampleDataset(corpus, 16, 40, seed=7)
    # An entry written by an older format (other arrays under the same settings) ...
    monkeypatch.setattr(index_cache, "INDEX_FORMAT_VERSION", index_cache.INDEX_FORMAT_VERSION - 1)
    PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache)
    old = next(cache.glob("*description.json"))
    for path in cache.glob("*shuffle_index.npy"):
        np.save(path, np.arange(len(np.load(path)), dtype=np.uint32))  # what an old builder might hold
    monkeypatch.undo()
    # ... has another name, so the current format builds its own entry
    current = PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache)
    assert all(np.array_equal(current[k], expected[k]) for k in range(40))
    assert len(list(cache.glob("*description.json"))) == 2
    # and an old description found under the current name (e.g. copied there) is rebuilt too
    new = next(p for p in cache.glob("*description.json") if p != old)
    description = json.loads(new.read_text())
    description["format_version"] -= 1
    new.write_text(json.dumps(description))
    for path in cache.glob(new.name.replace("description.json", "shuffle_index.npy")):
        np.save(path, np.arange(len(np.load(path)), dtype=np.uint32))
    rebuilt = PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache)
    assert all(np.array_equal(rebuilt[k], expected[k]) for k in range(40))
    assert json.loads(new.read_text())["format_version"] == index_cache.INDEX_FORMAT_VERSION


@pytest.mark.parametrize("damage", ["description", "array"])
def test_stale_or_damaged_cache_is_rebuilt(tmp_path, make_documents, damage):
    corpus = IndexedDataset(write_dataset(tmp_path / "d", make_documents()))
    cache = tmp_path / "cache"
    good = PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache)
    expected = [good[k] for k in range(40)]
    if damage == "description":
        path = next(cache.glob("*description.json"))
        description = json.loads(path.read_text())
        description["seed"] = 8  # e.g. an entry copied from a run with other settings
        path.write_text(json.dumps(description))
    else:
        path = next(cache.glob("*shuffle_index.npy"))
        np.save(path, np.arange(3, dtype=np.uint32))
    rebuilt = PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache)
    assert [np.array_equal(rebuilt[k], expected[k]) for k in range(40)] == [True] * 40
    assert json.loads(next(cache.glob("*description.json")).read_text())["seed"] == 7


def test_only_rank_zero_builds(tmp_path, make_documents):
    corpus = IndexedDataset(write_dataset(tmp_path / "d", make_documents()))
    cache = tmp_path / "cache"
    windows = corpus.num_tokens // 16
    waited = []
    with pytest.raises(DataError, match="every rank can read"):
        PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache, rank=lambda: 1, barrier=lambda: waited.append(1))
    assert waited == [1] and not list(cache.glob("*.npy"))
    # rank 0 builds (three epochs, one barrier), then rank 1 memory-maps what it built
    order = []
    n = 2 * windows + 1
    rank0 = PackedSampleDataset(corpus, 16, n, seed=7, cache_dir=cache, rank=lambda: 0, barrier=lambda: order.append(0))
    rank1 = PackedSampleDataset(corpus, 16, n, seed=7, cache_dir=cache, rank=lambda: 1, barrier=lambda: order.append(1))
    assert order == [0, 1] and rank1.num_epochs == 3
    for k in (3, windows + 3, 2 * windows):
        np.testing.assert_array_equal(rank0[k], rank1[k])


# ---- build_train_dataset --------------------------------------------------------------------


def test_build_train_dataset_checks_inputs(tmp_path, make_documents):
    write_dataset(tmp_path / "d", make_documents(vocab=1000))
    prefix = str(tmp_path / "d")
    ds = build_train_dataset(StreamSpec([prefix], 16, 10, seed=0, vocab_size=1000))
    assert len(ds) == 10 and ds.seq_length == 16
    with pytest.raises(DataError, match=r"d\.bin holds token id 99\d .* vocabulary has 500 ids"):
        build_train_dataset(StreamSpec([prefix], 16, 10, seed=0, vocab_size=500))
    write_dataset(tmp_path / "empty", [[], []])
    with pytest.raises(DataError, match="holds no tokens"):
        build_train_dataset(StreamSpec([str(tmp_path / "empty")], 16, 10, seed=0))
    write_dataset(tmp_path / "tiny", [[1, 2, 3], [], [4]])
    with pytest.raises(DataError, match="holds 4 tokens, fewer than one sample of seq_length 16"):
        build_train_dataset(StreamSpec([str(tmp_path / "tiny")], 16, 10, seed=0))
    tiny = build_train_dataset(StreamSpec([str(tmp_path / "tiny")], 2, 10, seed=0))
    assert len(tiny) == 10  # 2 windows per epoch, 5 epochs
    with pytest.raises(DataError, match="not found"):
        build_train_dataset(StreamSpec([str(tmp_path / "nope")], 16, 10, seed=0))
    with pytest.raises(DataError, match="does not parse"):
        build_train_dataset(StreamSpec(["0.5", prefix, "0.5"], 16, 10, seed=0))


@pytest.mark.parametrize("n", [1, 1000, 300_000])
def test_seeded_permutation(n):
    from megamlm.data.sample_index import seeded_permutation

    p = seeded_permutation(n, seed=5, purpose=0)
    assert np.array_equal(np.sort(p), np.arange(n))
    assert np.array_equal(p, seeded_permutation(n, seed=5, purpose=0))
    assert np.array_equal(p, seeded_permutation(n, seed=5, purpose=0, use_cpp=False))
    if n > 1:
        assert not np.array_equal(p, seeded_permutation(n, seed=6, purpose=0))
        assert not np.array_equal(p, seeded_permutation(n, seed=5, purpose=1))
        assert not np.array_equal(p, seeded_permutation(n, seed=5, purpose=0, epoch=1))
    if n >= 1000:
        # no trace of the input order: values are uncorrelated with positions, halves mix evenly
        assert abs(np.corrcoef(np.arange(n), p)[0, 1]) < 5 / np.sqrt(n)
        assert abs(np.mean(p[: n // 2] < n // 2) - 0.5) < 5 / np.sqrt(n)


def test_vocab_check_samples_huge_files(tmp_path, monkeypatch):
    from megamlm.data import build as data

    docs = [np.full(5000, 10, dtype=np.int64) for _ in range(4)]
    docs[3][-1] = 900  # in the last chunk, which the sampled scan always reads
    write_dataset(tmp_path / "d", docs)
    dataset = IndexedDataset(tmp_path / "d")
    monkeypatch.setattr(data, "_FULL_SCAN_TOKENS", 100)
    with pytest.raises(DataError, match="token id 900"):
        data.check_vocab(dataset, 500)
    data.check_vocab(dataset, 901)
    data.check_vocab(IndexedDataset(tmp_path / "d"), 2**17)  # uint16 ids cannot reach it: nothing read


def test_unwritable_cache_folder(tmp_path, make_documents):
    corpus = IndexedDataset(write_dataset(tmp_path / "d", make_documents()))
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(DataError, match="cannot write the index cache"):
        PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=blocker / "cache")

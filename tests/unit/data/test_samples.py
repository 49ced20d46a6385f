import json

import numpy as np
import pytest

from megamlm.data import DataError, IndexedDataset, IndexedDatasetWriter, build_train_dataset
from megamlm.data import index_cache
from megamlm.data.samples import PackedSampleDataset
from megamlm.data.sample_index import build_indices, build_sample_index_numpy


def write(prefix, docs):
    with IndexedDatasetWriter(prefix, np.uint16) as writer:
        for doc in docs:
            writer.add_document(doc)
    return IndexedDataset(prefix)


def reference_samples(docs, document_index, shuffle_index, seq_length, count):
    """Samples and document ids straight from the definition: windows of the packed stream."""
    stream = np.concatenate([docs[d] for d in document_index])
    owner = np.repeat(np.arange(len(document_index)), [len(docs[d]) for d in document_index])
    for k in range(count):
        w = int(shuffle_index[k])
        window = slice(w * seq_length, (w + 1) * seq_length)
        owners = owner[window]
        yield stream[window], np.concatenate([[0], np.cumsum(owners[1:] != owners[:-1])])


@pytest.mark.parametrize("seq_length,num_samples", [(16, 50), (64, 200), (7, 1)])
def test_samples_are_windows_of_the_shuffled_packed_stream(tmp_path, make_documents, seq_length, num_samples):
    docs = make_documents()
    ds = PackedSampleDataset(write(tmp_path / "d", docs), seq_length, num_samples, seed=3)
    assert len(ds) == num_samples
    expected = reference_samples(docs, ds.document_index, ds.shuffle_index, seq_length, num_samples)
    for k, (tokens, document_ids) in enumerate(expected):
        sample = ds[k]
        assert sample.dtype == np.int64 and sample.shape == (seq_length,)
        np.testing.assert_array_equal(sample, tokens)
        np.testing.assert_array_equal(ds.document_ids(k), document_ids)
        assert ds.document_ids(k).dtype == np.int32


def test_epochs_and_determinism(tmp_path, make_documents):
    docs = make_documents()
    corpus = write(tmp_path / "d", docs)
    tokens = corpus.num_tokens
    ds = PackedSampleDataset(corpus, 32, num_samples=3 * tokens // 32, seed=1)
    counts = np.bincount(ds.document_index, minlength=len(docs))
    assert set(counts) == {3}  # three epochs, every document in each
    again = PackedSampleDataset(IndexedDataset(tmp_path / "d"), 32, 3 * tokens // 32, seed=1)
    other_seed = PackedSampleDataset(corpus, 32, 3 * tokens // 32, seed=2)
    assert all(np.array_equal(ds[k], again[k]) for k in range(len(ds)))
    assert not all(np.array_equal(ds[k], other_seed[k]) for k in range(20))


def test_shards_concatenate_like_one_file(tmp_path, make_documents):
    docs = make_documents()
    whole = PackedSampleDataset(write(tmp_path / "all", docs), 24, 60, seed=5)
    shards = [write(tmp_path / "a", docs[:13]), write(tmp_path / "b", docs[13:])]
    split = PackedSampleDataset(shards, 24, 60, seed=5)
    for k in range(60):
        np.testing.assert_array_equal(whole[k], split[k])
        np.testing.assert_array_equal(whole.document_ids(k), split.document_ids(k))


def test_numpy_sample_index_matches_a_token_walk(make_documents):
    sizes = np.array([len(d) for d in make_documents()], dtype=np.int32)
    rng = np.random.RandomState(0)
    document_index = rng.permutation(np.tile(np.arange(len(sizes), dtype=np.int32), 2))
    seq_length = 11
    windows = int(sizes.sum()) * 2 // seq_length
    got = build_sample_index_numpy(sizes, document_index, seq_length, windows)
    walk = []
    for position, document in enumerate(document_index):
        walk += [(position, offset) for offset in range(sizes[document])]
    assert [tuple(row) for row in got] == walk[::seq_length][:windows]


# ---- the cached index -----------------------------------------------------------------------


def test_cache_matches_fresh_build_and_is_reused(tmp_path, make_documents, monkeypatch):
    corpus = write(tmp_path / "d", make_documents())
    cache = tmp_path / "cache"
    first = PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache)
    fresh = build_indices(corpus.sequence_lengths, 16, 40, 7)
    for cached, built in zip((first.document_index, first.sample_index, first.shuffle_index), fresh):
        np.testing.assert_array_equal(cached, built)
    assert len(list(cache.glob("*.npy"))) == 3

    def no_build(*args, **kwargs):
        raise AssertionError("a valid cache must not be rebuilt")

    monkeypatch.setattr(index_cache, "build_indices", no_build)
    second = PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache)
    assert isinstance(second.sample_index, np.memmap)
    np.testing.assert_array_equal(second[5], first[5])


def test_other_settings_get_another_cache_entry(tmp_path, make_documents):
    corpus = write(tmp_path / "d", make_documents())
    cache = tmp_path / "cache"
    for seed, seq_length, num_samples in [(1, 16, 40), (2, 16, 40), (1, 8, 40), (1, 16, 41)]:
        PackedSampleDataset(corpus, seq_length, num_samples, seed=seed, cache_dir=cache)
    assert len(list(cache.glob("*description.json"))) == 4
    # new data under the same file name: different document sizes, different entry
    write(tmp_path / "d", make_documents(seed=9))
    PackedSampleDataset(IndexedDataset(tmp_path / "d"), 16, 40, seed=1, cache_dir=cache)
    assert len(list(cache.glob("*description.json"))) == 5


@pytest.mark.parametrize("damage", ["description", "array"])
def test_stale_or_damaged_cache_is_rebuilt(tmp_path, make_documents, damage):
    corpus = write(tmp_path / "d", make_documents())
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
    corpus = write(tmp_path / "d", make_documents())
    cache = tmp_path / "cache"
    waited = []
    with pytest.raises(DataError, match="every rank can read"):
        PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache, rank=lambda: 1, barrier=lambda: waited.append(1))
    assert waited == [1] and not list(cache.glob("*.npy"))
    # rank 0 builds, then rank 1 memory-maps what it built
    order = []
    rank0 = PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache, rank=lambda: 0, barrier=lambda: order.append(0))
    rank1 = PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=cache, rank=lambda: 1, barrier=lambda: order.append(1))
    assert order == [0, 1]
    np.testing.assert_array_equal(rank0[3], rank1[3])


# ---- build_train_dataset --------------------------------------------------------------------


def test_build_train_dataset_checks_inputs(tmp_path, make_documents):
    write(tmp_path / "d", make_documents(vocab=1000))
    prefix = str(tmp_path / "d")
    ds = build_train_dataset([prefix], 16, 10, seed=0, vocab_size=1000)
    assert len(ds) == 10 and ds.seq_length == 16
    with pytest.raises(DataError, match=r"d\.bin holds token id 99\d .* vocabulary has 500 ids"):
        build_train_dataset([prefix], 16, 10, seed=0, vocab_size=500)
    write(tmp_path / "empty", [[], []])
    with pytest.raises(DataError, match="holds no tokens"):
        build_train_dataset([str(tmp_path / "empty")], 16, 10, seed=0)
    with pytest.raises(DataError, match="not found"):
        build_train_dataset([str(tmp_path / "nope")], 16, 10, seed=0)
    with pytest.raises(DataError, match="does not parse"):
        build_train_dataset(["0.5", prefix, "0.5"], 16, 10, seed=0)


@pytest.mark.parametrize("n", [1, 1000, 300_000])
def test_seeded_permutation(n):
    from megamlm.data.sample_index import seeded_permutation

    p = seeded_permutation(n, seed=5, purpose=0)
    assert np.array_equal(np.sort(p), np.arange(n))
    assert np.array_equal(p, seeded_permutation(n, seed=5, purpose=0))
    if n > 1:
        assert not np.array_equal(p, seeded_permutation(n, seed=6, purpose=0))
        assert not np.array_equal(p, seeded_permutation(n, seed=5, purpose=1))
    if n >= 1000:
        # no trace of the input order: values are uncorrelated with positions, halves mix evenly
        assert abs(np.corrcoef(np.arange(n), p)[0, 1]) < 5 / np.sqrt(n)
        assert abs(np.mean(p[: n // 2] < n // 2) - 0.5) < 5 / np.sqrt(n)


def test_vocab_check_samples_huge_files(tmp_path, monkeypatch):
    import megamlm.data as data

    docs = [np.full(5000, 10, dtype=np.int64) for _ in range(4)]
    docs[3][-1] = 900  # in the last chunk, which the sampled scan always reads
    write(tmp_path / "d", docs)
    dataset = IndexedDataset(tmp_path / "d")
    monkeypatch.setattr(data, "_FULL_SCAN_TOKENS", 100)
    with pytest.raises(DataError, match="token id 900"):
        data.check_vocab(dataset, 500)
    data.check_vocab(dataset, 901)
    data.check_vocab(IndexedDataset(tmp_path / "d"), 2**17)  # uint16 ids cannot reach it: nothing read


def test_unwritable_cache_folder(tmp_path, make_documents):
    corpus = write(tmp_path / "d", make_documents())
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(DataError, match="cannot write the index cache"):
        PackedSampleDataset(corpus, 16, 40, seed=7, cache_dir=blocker / "cache")

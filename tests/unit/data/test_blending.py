import numpy as np
import pytest
from helpers import write_dataset

from megamlm.data import BlendedDataset, DataError, StreamSpec, build_train_dataset
from megamlm.data.blending import build_blend_index_numpy, parse_data_path


def test_parse_data_path():
    assert parse_data_path(["a"]) == (None, ["a"])
    assert parse_data_path(["a", "b"]) == (None, ["a", "b"])
    assert parse_data_path(["0.7", "a", "0.3", "b"]) == ([0.7, 0.3], ["a", "b"])
    assert parse_data_path(["2", "a", "1", "b"]) == ([2.0, 1.0], ["a", "b"])


@pytest.mark.parametrize(
    "bad,match",
    [
        ([], "empty"),
        (["0.7", "a", "b"], "does not parse"),
        (["0.7", "a", "x", "b"], "does not parse"),
        (["a", "0.3"], "does not parse"),
        (["-1", "a", "2", "b"], "non-negative"),
        (["0", "a", "0", "b"], "not all zero"),
        (["nan", "a"], "finite"),
    ],
)
def test_bad_weights(bad, match):
    with pytest.raises(DataError, match=match):
        parse_data_path(bad)


@pytest.mark.parametrize("weights", [[0.7, 0.3], [1, 1, 2], [0.5, 0.0, 0.5], [0.01, 0.99]])
def test_blend_index_follows_the_weights_at_every_prefix(weights):
    n = 5000
    owner, number = build_blend_index_numpy(weights, n)
    assert len(owner) == n
    w = np.asarray(weights) / np.sum(weights)
    counts = np.zeros(len(w))
    for i, d in enumerate(owner):
        assert number[i] == counts[d]  # each dataset's samples are taken in order 0, 1, 2, ...
        counts[d] += 1
        assert np.all(np.abs(counts - w * (i + 1)) <= 1.0 + 1e-9)


def test_blended_dataset(tmp_path, make_documents):
    a = write_dataset(tmp_path / "a", [np.full(30, 1), np.full(50, 2)])
    b = write_dataset(tmp_path / "b", [np.full(40, 7)])
    ds = build_train_dataset(StreamSpec(["0.75", a, "0.25", b], 8, 100, seed=3, cache_dir=tmp_path / "cache"))
    assert isinstance(ds, BlendedDataset) and len(ds) == 100
    from_b = [k for k in range(100) if set(ds[k]) == {7}]
    assert len(from_b) == 25
    again = build_train_dataset(StreamSpec(["0.75", a, "0.25", b], 8, 100, seed=3))
    assert all(np.array_equal(ds[k], again[k]) for k in range(100))
    assert ds.document_ids(from_b[0]).tolist() == [0] * 8
    with pytest.raises(DataError, match="holds no tokens"):
        build_train_dataset(StreamSpec(["0.5", a, "0.5", write_dataset(tmp_path / "e", [[]])], 8, 10, seed=0))


def test_a_shorter_blended_run_is_a_prefix_of_a_longer_run(tmp_path, make_documents):
    a = write_dataset(tmp_path / "a", make_documents(seed=1))
    b = write_dataset(tmp_path / "b", make_documents(seed=2, count=10))  # small: many epochs in the long run
    path = ["0.6", a, "0.4", b]
    cache = tmp_path / "cache"
    long = build_train_dataset(StreamSpec(path, 16, 600, seed=3))
    assert long.datasets[1].num_epochs > 2
    for n, cache_dir in [(1, None), (37, cache), (300, cache), (599, None), (40, cache)]:
        short = build_train_dataset(StreamSpec(path, 16, n, seed=3, cache_dir=cache_dir))
        assert len(short) == n
        np.testing.assert_array_equal(short.dataset_of, long.dataset_of[:n])
        np.testing.assert_array_equal(short.sample_in_dataset, long.sample_in_dataset[:n])
        for k in range(n):
            np.testing.assert_array_equal(short[k], long[k])
            np.testing.assert_array_equal(short.document_ids(k), long.document_ids(k))
    # component d's j-th sample is sample j of d's own stream, whatever the blend's length
    alone = build_train_dataset(StreamSpec([b], 16, 300, seed=3))
    for k in range(600):
        if long.dataset_of[k] == 1:
            np.testing.assert_array_equal(long[k], alone[int(long.sample_in_dataset[k])])
    # one blend cache entry for these weights, grown when a longer run needed more of it
    assert len(list(cache.glob("blend-*-description.json"))) == 1
    assert len(np.load(next(cache.glob("blend-*-owner.npy")))) == 300

"""The C++ index builders (csrc/data_helpers.cpp) against their numpy twins."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from megamlm.data import _helpers_loader
from megamlm.data.blending import build_blend_index, build_blend_index_numpy, normalize_weights
from megamlm.data.sample_index import (
    EpochIndex,
    build_document_order,
    build_epoch,
    build_sample_index_numpy,
    sample_index_dtype,
)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def helpers(tmp_path_factory):
    """The extension compiled by setup.py into a temporary folder (tests setup.py as well)."""
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler: megamlm uses the numpy builders")
    out = tmp_path_factory.mktemp("helpers")
    result = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(out / "lib"),
         "--build-temp", str(out / "tmp")],
        cwd=REPO, capture_output=True, text=True,
    )
    built = list((out / "lib").rglob("_helpers*"))
    assert result.returncode == 0 and built, result.stderr[-2000:]
    spec = importlib.util.spec_from_file_location("_helpers", built[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpp_sample_index(helpers, sizes, document_order, seq_length, windows):
    out = np.empty((windows, 2), dtype=sample_index_dtype(len(document_order)))
    helpers.build_sample_index(sizes, document_order, seq_length, out)
    return out


@pytest.fixture
def with_helpers(helpers, monkeypatch):
    """megamlm's builders with use_cpp=True call the freshly compiled helper."""
    monkeypatch.setattr(_helpers_loader, "_cached", [helpers])
    return helpers


def corpus_sizes(case):
    rng = np.random.RandomState(len(case))
    if case == "mixed":  # empty documents and documents far longer than any window
        sizes = rng.randint(0, 500, size=20000).astype(np.int32)
        sizes[::11] = 0
        sizes[5] = 100000
    elif case == "many":  # over 65536 documents: the bucketed permutation, grouped by C++ or argsort
        sizes = rng.randint(1, 40, size=200_000).astype(np.int32)
    elif case == "empty_edges":  # empty documents everywhere, the first and last included
        sizes = rng.randint(0, 3, size=5000).astype(np.int32)
        sizes[0] = sizes[-1] = 0
    elif case == "one_document":
        sizes = np.array([12345], dtype=np.int32)
    elif case == "exact_multiple":  # tokens_per_epoch (12288) a multiple of every seq_length tested
        sizes = np.full(193, 64, dtype=np.int32)
        sizes[1] = 0
    return sizes


@pytest.mark.parametrize("case", ["mixed", "many", "empty_edges", "one_document", "exact_multiple"])
@pytest.mark.parametrize("seq_length", [1, 3, 128, 4096])
def test_epoch_arrays_identical(with_helpers, case, seq_length):
    sizes = corpus_sizes(case)
    tokens = int(sizes.sum())
    if case == "exact_multiple":
        assert tokens % seq_length == 0
    for epoch in (0, 3):
        expected = build_epoch(sizes, seq_length, seed=1, epoch=epoch, use_cpp=False)
        got = build_epoch(sizes, seq_length, seed=1, epoch=epoch, use_cpp=True)
        for name, a, b in zip(EpochIndex._fields, got, expected):
            assert a.dtype == b.dtype, name
            np.testing.assert_array_equal(a, b, err_msg=name)
        assert len(got.sample_index) == tokens // seq_length  # a partial last window is dropped
        # the last window ends inside the epoch: nothing reads past its last document
        position, offset = got.sample_index[-1]
        remaining = sizes[got.document_order[position:]].sum() - offset
        assert remaining >= seq_length and (tokens % seq_length) == remaining - seq_length
    # the sample index alone, as the helper is called, in both output widths
    document_order = build_document_order(len(sizes), seed=2, epoch=0)
    windows = tokens // seq_length
    expected = build_sample_index_numpy(sizes, document_order, seq_length, windows)
    got = cpp_sample_index(with_helpers, sizes, document_order, seq_length, windows)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    wide = np.empty((windows, 2), dtype=np.int64)  # as used beyond 2**31 documents
    with_helpers.build_sample_index(sizes, document_order, seq_length, wide)
    np.testing.assert_array_equal(wide, expected)


@pytest.mark.parametrize("weights", [[0.7, 0.3], [1, 1, 2], [0.5, 0.0, 0.5], [0.001, 0.999], [1 / 3] * 3,
                                     list(np.random.RandomState(0).rand(40))])
def test_blend_index_identical(helpers, weights):
    n = 100000
    owner, number = build_blend_index_numpy(weights, n)
    got_owner, got_number = np.empty(n, np.int16), np.empty(n, np.int64)
    helpers.build_blend_index(normalize_weights(weights), got_owner, got_number)
    np.testing.assert_array_equal(got_owner, owner)
    np.testing.assert_array_equal(got_number, number)


@pytest.mark.parametrize("weights", [[0.7, 0.3], [1, 1, 2], [0.5, 0.0, 0.5], [0.001, 0.999]])
def test_blend_index_is_prefix_stable_in_both_builders(with_helpers, weights):
    long_owner, long_number = build_blend_index_numpy(weights, 50000)
    for n in (1, 2, 3, 999, 12345):
        for use_cpp in (False, True):
            owner, number = build_blend_index(weights, n, use_cpp=use_cpp)
            np.testing.assert_array_equal(owner, long_owner[:n])
            np.testing.assert_array_equal(number, long_number[:n])


def test_bad_calls_raise_instead_of_writing_out_of_bounds(helpers):
    sizes = np.array([3, 4], dtype=np.int32)
    document_index = np.array([0, 1], dtype=np.int32)
    with pytest.raises(ValueError, match="fewer tokens"):
        helpers.build_sample_index(sizes, document_index, 2, np.empty((5, 2), np.int32))
    with pytest.raises(ValueError, match="wrong dtype"):
        helpers.build_sample_index(sizes.astype(np.int64), document_index, 2, np.empty((3, 2), np.int32))
    with pytest.raises(ValueError, match="non-negative"):
        helpers.build_blend_index(np.array([-1.0, 2.0]), np.empty(3, np.int16), np.empty(3, np.int64))


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64])
def test_group_by_bucket_identical_to_stable_argsort(helpers, dtype):
    bucket_of = np.random.default_rng(3).integers(0, 300, 200_000, dtype=np.uint16)
    out = np.empty(len(bucket_of), dtype=dtype)
    helpers.group_by_bucket(bucket_of, out)
    np.testing.assert_array_equal(out, np.argsort(bucket_of, kind="stable"))
    with pytest.raises(ValueError, match="as many elements"):
        helpers.group_by_bucket(bucket_of, np.empty(5, dtype=dtype))


@pytest.mark.parametrize("seq_length,open_rows", [(8, 64), (128, 64), (1024, 3), (1024, 1)])
def test_best_fit_packing_identical(with_helpers, monkeypatch, seq_length, open_rows):
    from megamlm.data.documents import pack_rows

    monkeypatch.setattr("megamlm.data.documents.OPEN_ROWS", open_rows)
    rng = np.random.default_rng(seq_length + open_rows)
    for lengths in (rng.integers(1, seq_length + 1, 5000), np.minimum(rng.geometric(3 / seq_length, 5000), seq_length),
                    np.full(100, seq_length), np.zeros(0, dtype=np.int64)):
        cpp, python = pack_rows(lengths, seq_length, "packed_documents"), pack_rows(lengths, seq_length,
                                                                                   "packed_documents", use_cpp=False)
        for a, b in zip(cpp, python):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype == np.int64
    with pytest.raises(ValueError, match="between 1 and seq_length"):
        with_helpers.pack_best_fit(np.array([3, 9]), 8, 4, np.empty(2, dtype=np.int64), np.empty(3, dtype=np.int64))

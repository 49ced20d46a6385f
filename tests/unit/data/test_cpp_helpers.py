"""The C++ index builders (csrc/data_helpers.cpp) against their numpy twins."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from megamlm.data.blending import build_blend_index_numpy, normalize_weights
from megamlm.data.sample_index import build_document_index, build_sample_index_numpy, sample_index_dtype

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def helpers(tmp_path_factory):
    """The extension compiled by setup.py into a temporary folder (tests setup.py as well)."""
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler: megamlm uses the numpy builders")
    out = tmp_path_factory.mktemp("helpers")
    result = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(out / "lib"), "--build-temp", str(out / "tmp")],
        cwd=REPO, capture_output=True, text=True,
    )
    built = list((out / "lib").rglob("_helpers*"))
    assert result.returncode == 0 and built, result.stderr[-2000:]
    spec = importlib.util.spec_from_file_location("_helpers", built[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpp_sample_index(helpers, sizes, document_index, seq_length, windows):
    out = np.empty((windows, 2), dtype=sample_index_dtype(len(document_index)))
    helpers.build_sample_index(sizes, document_index, seq_length, out)
    return out


@pytest.mark.parametrize("seq_length", [3, 128, 4096])
def test_sample_index_identical(helpers, seq_length):
    rng = np.random.RandomState(seq_length)
    sizes = rng.randint(0, 500, size=20000).astype(np.int32)
    sizes[::11] = 0  # empty documents
    sizes[5] = 100000  # a very long one
    epochs = 2
    document_index = build_document_index(len(sizes), epochs, seed=1)
    windows = int(sizes.sum()) * epochs // seq_length
    expected = build_sample_index_numpy(sizes, document_index, seq_length, windows)
    got = cpp_sample_index(helpers, sizes, document_index, seq_length, windows)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    # int64 output, as used beyond 2**31 document-index entries
    wide = np.empty((windows, 2), dtype=np.int64)
    helpers.build_sample_index(sizes, document_index, seq_length, wide)
    np.testing.assert_array_equal(wide, expected)


@pytest.mark.parametrize("weights", [[0.7, 0.3], [1, 1, 2], [0.5, 0.0, 0.5], [0.001, 0.999], [1 / 3] * 3, list(np.random.RandomState(0).rand(40))])
def test_blend_index_identical(helpers, weights):
    n = 100000
    owner, number = build_blend_index_numpy(weights, n)
    got_owner, got_number = np.empty(n, np.int16), np.empty(n, np.int64)
    helpers.build_blend_index(normalize_weights(weights), got_owner, got_number)
    np.testing.assert_array_equal(got_owner, owner)
    np.testing.assert_array_equal(got_number, number)


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

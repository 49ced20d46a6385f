import os
import pickle
import struct

import numpy as np
import pytest
from helpers import write_dataset

from megamlm.data.indexed import MAGIC, DataError, IndexedDataset, IndexedDatasetWriter, best_dtype


def spec_bytes(docs, dtype_code, itemsize):
    """The .idx bytes the format specification prescribes, assembled by hand."""
    lengths = [len(d) for d in docs]
    pointers, position = [], 0
    for n in lengths:
        pointers.append(position)
        position += n * itemsize
    out = MAGIC + struct.pack("<Q", 1) + struct.pack("<B", dtype_code)
    out += struct.pack("<Q", len(docs)) + struct.pack("<Q", len(docs) + 1)
    out += b"".join(struct.pack("<i", n) for n in lengths)
    out += b"".join(struct.pack("<q", p) for p in pointers)
    out += b"".join(struct.pack("<q", i) for i in range(len(docs) + 1))
    return out


@pytest.mark.parametrize("dtype,code", [(np.uint16, 8), (np.int32, 4), (np.int64, 5), (np.uint8, 1)])
def test_bytes_follow_the_format_spec(tmp_path, dtype, code, make_documents):
    docs = make_documents(vocab=200)
    prefix = write_dataset(tmp_path / "d", docs, dtype)
    assert open(prefix + ".idx", "rb").read() == spec_bytes(docs, code, np.dtype(dtype).itemsize)
    expected_bin = b"".join(np.asarray(d, dtype=dtype).tobytes() for d in docs)
    assert open(prefix + ".bin", "rb").read() == expected_bin


def test_round_trip_with_empty_and_long_documents(tmp_path, make_documents):
    docs = make_documents()
    ds = IndexedDataset(write_dataset(tmp_path / "d", docs))
    assert len(ds) == len(docs)
    assert ds.dtype == np.uint16
    assert ds.num_tokens == sum(len(d) for d in docs)
    assert list(ds.document_indices) == list(range(len(docs) + 1))
    for i, doc in enumerate(docs):
        np.testing.assert_array_equal(ds[i], doc)
    long = len(docs) // 2
    np.testing.assert_array_equal(ds.get(long, 100, 37), docs[long][100:137])
    np.testing.assert_array_equal(ds[-1], docs[-1])
    assert [len(x) for x in ds[2:5]] == [len(d) for d in docs[2:5]]
    assert ds.max_token_id() == max(int(d.max()) for d in docs if len(d))
    with pytest.raises(IndexError):
        ds[len(docs)]
    with pytest.raises(IndexError):
        ds.get(long, len(docs[long]) - 1, 2)


def test_add_item_end_document_makes_multi_sequence_documents(tmp_path):
    with IndexedDatasetWriter(tmp_path / "d", np.int32) as writer:
        writer.add_item([1, 2])
        writer.add_item([3])
        writer.end_document()
        writer.add_document([4, 5, 6], lengths=[1, 2])
    ds = IndexedDataset(tmp_path / "d")
    assert list(ds.sequence_lengths) == [2, 1, 1, 2]
    assert list(ds.document_indices) == [0, 2, 4]
    assert ds.num_documents == 2


def test_writer_is_atomic(tmp_path):
    prefix = tmp_path / "d"
    with pytest.raises(RuntimeError):
        with IndexedDatasetWriter(prefix, np.uint16) as writer:
            writer.add_document([1, 2, 3])
            raise RuntimeError("crash")
    assert os.listdir(tmp_path) == []


def test_writer_rejects_ids_beyond_dtype(tmp_path):
    writer = IndexedDatasetWriter(tmp_path / "d", np.uint16)
    with pytest.raises(DataError, match="does not fit"):
        writer.add_document([70000])
    writer.abort()


def test_best_dtype():
    assert best_dtype(8192) is np.uint16
    assert best_dtype(65499) is np.uint16
    assert best_dtype(65500) is np.int32
    assert best_dtype(128256) is np.int32


def test_pickles_by_name(tmp_path, make_documents):
    docs = make_documents()
    ds = IndexedDataset(write_dataset(tmp_path / "d", docs))
    payload = pickle.dumps(ds)
    assert len(payload) < 500  # the memory maps are not copied
    np.testing.assert_array_equal(pickle.loads(payload)[3], docs[3])


def test_empty_dataset_opens(tmp_path):
    ds = IndexedDataset(write_dataset(tmp_path / "d", []))
    assert len(ds) == 0 and ds.num_tokens == 0


# ---- bad input: each gives one clear DataError naming the file ----------------------------------


@pytest.fixture
def good(tmp_path, make_documents):
    return write_dataset(tmp_path / "d", make_documents())


def patch(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_missing_file(tmp_path, good):
    os.remove(good + ".bin")
    with pytest.raises(DataError, match=r"d\.bin not found.*preprocess_data"):
        IndexedDataset(good)
    with pytest.raises(DataError, match="not found"):
        IndexedDataset(tmp_path / "nothing")


def test_wrong_magic(good):
    patch(good + ".idx", 0, b"NOTANIDX\x00")
    with pytest.raises(DataError, match=r"d\.idx is not a Megatron indexed dataset"):
        IndexedDataset(good)


def test_wrong_version(good):
    patch(good + ".idx", 9, struct.pack("<Q", 2))
    with pytest.raises(DataError, match="version 2"):
        IndexedDataset(good)


def test_unknown_dtype_code(good):
    patch(good + ".idx", 17, struct.pack("<B", 42))
    with pytest.raises(DataError, match="dtype code 42"):
        IndexedDataset(good)


@pytest.mark.parametrize("keep", [20, 200])
def test_truncated_idx(good, keep):
    with open(good + ".idx", "r+b") as f:
        f.truncate(keep)
    with pytest.raises(DataError, match=r"d\.idx .*truncated"):
        IndexedDataset(good)


def test_bin_size_disagrees_with_index(good):
    with open(good + ".bin", "ab") as f:
        f.write(b"\x00\x00")
    with pytest.raises(DataError, match=r"d\.bin is .* bytes but .*do not belong together"):
        IndexedDataset(good)
    with open(good + ".bin", "r+b") as f:
        f.truncate(10)
    with pytest.raises(DataError, match="truncated"):
        IndexedDataset(good)


def test_corrupt_pointers_and_document_index(good):
    ds = IndexedDataset(good)
    n = len(ds)
    pointer_offset = 34 + 4 * n
    original = open(good + ".idx", "rb").read()
    patch(good + ".idx", pointer_offset + 8 * 3, struct.pack("<q", 1))
    with pytest.raises(DataError, match="pointers that disagree"):
        IndexedDataset(good)
    open(good + ".idx", "wb").write(original)
    patch(good + ".idx", 34 + 12 * n, struct.pack("<q", 5))
    with pytest.raises(DataError, match="document index"):
        IndexedDataset(good)


def test_multimodal_index_is_named(good):
    n = len(IndexedDataset(good))
    with open(good + ".idx", "ab") as f:
        f.write(b"\x00" * n)  # Megatron's multimodal files end with one int8 mode per sequence
    with pytest.raises(DataError, match="multimodal index"):
        IndexedDataset(good)

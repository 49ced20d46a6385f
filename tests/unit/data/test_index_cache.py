"""The index cache verifies what it reads back: a damaged entry is a warning and a rebuild, never reused."""

import json

import numpy as np
import pytest

from megamlm.data.blending import load_or_build_blend_index
from megamlm.data.index_cache import checksum, is_permutation_like, load_or_build_epochs


@pytest.fixture
def sizes():
    return np.random.default_rng(3).integers(1, 300, 200, dtype=np.int32)


def build(sizes, cache, epochs=2):
    """The arrays, copied out of their memory maps (the tests then change the files)."""
    return [tuple(np.array(a) for a in e) for e in load_or_build_epochs(sizes, 64, 11, epochs, cache_dir=str(cache))]


def same(a, b) -> bool:
    return all(np.array_equal(x, y) for ex, ey in zip(a, b) for x, y in zip(ex, ey))


def test_an_entry_records_each_arrays_checksum_and_reads_back_without_a_word(tmp_path, sizes, capsys):
    first = build(sizes, tmp_path)
    description = json.loads(next(tmp_path.glob("index-*-description.json")).read_text())
    assert set(description["arrays"]) == {"document_order", "sample_index", "shuffle_index"}
    assert all(set(r) == {"shape", "dtype", "crc32"} for r in description["arrays"].values())
    assert same(build(sizes, tmp_path), first) and "warning" not in capsys.readouterr().out


def edit_shuffle(cache, change):
    for path in sorted(cache.glob("index-*-shuffle_index.npy")):
        array = np.load(path)
        np.save(path, change(array))


@pytest.mark.parametrize("change,reason", [
    (np.zeros_like, "does not match its checksum"),
    (lambda a: a[::-1].copy(), "does not match its checksum"),  # still a permutation: only the checksum sees it
    (lambda a: a[:-1].copy(), "another shape or dtype"),
    (lambda a: a.astype(np.int64), "another shape or dtype"),
])
def test_a_changed_array_is_a_warning_and_a_rebuild(tmp_path, sizes, capsys, change, reason):
    first = build(sizes, tmp_path)
    edit_shuffle(tmp_path, change)
    capsys.readouterr()
    assert same(build(sizes, tmp_path), first)
    out = capsys.readouterr().out
    assert out.count("warning: index cache entry") == 2 and reason in out and "rebuilding it" in out, out
    assert same(build(sizes, tmp_path), first) and "warning" not in capsys.readouterr().out


def test_entries_out_of_range_are_caught_even_with_a_matching_checksum(tmp_path, sizes, capsys):
    first = build(sizes, tmp_path, epochs=1)
    [path] = tmp_path.glob("index-*-sample_index.npy")
    array = np.load(path)
    array[3, 0] = len(sizes) + 7
    np.save(path, array)
    description_path = next(tmp_path.glob("index-*-description.json"))
    description = json.loads(description_path.read_text())
    description["arrays"]["sample_index"]["crc32"] = checksum(array)
    description_path.write_text(json.dumps(description))
    capsys.readouterr()
    assert same(build(sizes, tmp_path, epochs=1), first)
    assert "entries out of range" in capsys.readouterr().out


def test_an_entry_of_an_earlier_version_without_checksums_is_rebuilt(tmp_path, sizes, capsys):
    first = build(sizes, tmp_path, epochs=1)
    description_path = next(tmp_path.glob("index-*-description.json"))
    description = json.loads(description_path.read_text())
    del description["arrays"]
    description_path.write_text(json.dumps(description))
    capsys.readouterr()
    assert same(build(sizes, tmp_path, epochs=1), first)
    assert "written without checksums" in capsys.readouterr().out
    assert "arrays" in json.loads(description_path.read_text())


def test_a_blend_grown_for_a_longer_run_is_rebuilt_without_a_warning_but_a_damaged_one_with(tmp_path, capsys):
    short = [np.array(a) for a in load_or_build_blend_index([0.5, 0.3, 0.2], 100, cache_dir=str(tmp_path))]
    longer = [np.array(a) for a in load_or_build_blend_index([0.5, 0.3, 0.2], 400, cache_dir=str(tmp_path))]
    assert np.array_equal(longer[0][:100], short[0]) and "warning" not in capsys.readouterr().out
    [owner] = tmp_path.glob("blend-*-owner.npy")
    array = np.load(owner)
    array[5] = 9  # no such dataset
    np.save(owner, array)
    again = load_or_build_blend_index([0.5, 0.3, 0.2], 400, cache_dir=str(tmp_path))
    assert np.array_equal(again[0], longer[0]) and "does not match its checksum" in capsys.readouterr().out


def test_is_permutation_like():
    assert is_permutation_like(np.random.default_rng(0).permutation(1000).astype(np.uint32))
    assert is_permutation_like(np.array([], dtype=np.int32))
    assert not is_permutation_like(np.zeros(1000, dtype=np.uint32))
    assert not is_permutation_like(np.array([0, 1, 1, 2]))
    assert not is_permutation_like(np.array([0, 1, 5, 2]))

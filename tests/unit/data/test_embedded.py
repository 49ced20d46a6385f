import gzip
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from megamlm.data import IndexedDataset, load_tokenizer, prepare_embedded_corpus
from megamlm.data.embedded import CORPUS_FILE, default_cache_root


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedded")
    start = time.process_time()  # CPU seconds, which a shared machine does not stretch as it does wall time
    prefix, tokenizer_path = prepare_embedded_corpus(root)
    assert time.process_time() - start < 30  # a few seconds
    return root, prefix, tokenizer_path


def test_prepare_tokenizes_once_and_reuses(prepared):
    tmp_path, prefix, tokenizer_path = prepared
    tok = load_tokenizer(tokenizer_path)
    ds = IndexedDataset(prefix)
    with gzip.open(CORPUS_FILE, "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    assert len(texts) == len(ds) == 9996
    for i in (0, 1234, 9995):
        assert ds[i][-1] == tok.eos_id
        assert tok.decode(ds[i][:-1]) == texts[i]
    stamp = os.path.getmtime(prefix + ".bin")
    assert prepare_embedded_corpus(tmp_path) == (prefix, tokenizer_path)
    assert os.path.getmtime(prefix + ".bin") == stamp
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(os.path.dirname(prefix))]


def test_damaged_cache_is_rebuilt(prepared, tmp_path):
    root, good_prefix, _ = prepared
    folder = Path(good_prefix).parent
    shutil.copytree(folder, tmp_path / folder.name)
    prefix = str(tmp_path / folder.name / Path(good_prefix).name)
    expected = IndexedDataset(good_prefix)[7].copy()
    with open(prefix + ".bin", "r+b") as f:
        f.truncate(100)
    prefix_again, _ = prepare_embedded_corpus(tmp_path)
    assert prefix_again == prefix
    np.testing.assert_array_equal(IndexedDataset(prefix)[7], expected)


def test_cache_location_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAMLM_CACHE", str(tmp_path / "env"))
    assert default_cache_root() == tmp_path / "env"
    monkeypatch.delenv("MEGAMLM_CACHE")
    assert default_cache_root() == Path.home() / ".cache" / "megamlm"


@pytest.mark.slow
def test_another_tokenizer_gets_its_own_folder(prepared, tmp_path):
    """A smaller vocabulary (tools/train_tokenizer.py) tokenizes the same corpus into a folder of its own."""
    from tests.helpers import load_tool

    root, prefix, _ = prepared
    small = tmp_path / "tokenizer-512.json"
    load_tool("train_tokenizer").train([str(CORPUS_FILE)], 512).save(str(small))
    other, tokenizer_path = prepare_embedded_corpus(root, tokenizer_file=small)
    assert tokenizer_path == str(small) and os.path.dirname(other) != os.path.dirname(prefix)
    dataset, tokenizer = IndexedDataset(other), load_tokenizer(str(small))
    assert len(dataset) == 9996 and tokenizer.vocab_size == 512
    assert dataset.num_tokens > IndexedDataset(prefix).num_tokens  # fewer merges, more tokens
    with gzip.open(CORPUS_FILE, "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    assert tokenizer.decode(dataset[1234][:-1]) == texts[1234] and dataset[1234][-1] == tokenizer.eos_id

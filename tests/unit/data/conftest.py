from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"


@pytest.fixture
def llama3_dir():
    path = SHARED / "tokenizers" / "llama3"
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"shared Llama 3 tokenizer not found at {path}")
    return path


@pytest.fixture(scope="session")
def llama3_tokenizer():
    """Llama 3's tokenizer.json loaded once (it takes seconds)."""
    path = SHARED / "tokenizers" / "llama3"
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"shared Llama 3 tokenizer not found at {path}")
    from megamlm.data import load_tokenizer

    return load_tokenizer(path)


@pytest.fixture
def austen_jsonl():
    path = SHARED / "data" / "austen" / "austen.jsonl"
    if not path.is_file():
        pytest.skip(f"shared Austen corpus not found at {path}")
    return path


def _make_documents(seed=0, count=40, max_len=50, vocab=1000, empty_every=7):
    """Random documents with some empty ones and one long one."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, vocab, rng.integers(1, max_len)) for _ in range(count)]
    for i in range(0, count, empty_every):
        docs[i] = np.zeros(0, dtype=np.int64)
    docs[count // 2] = rng.integers(0, vocab, max_len * 20)
    return docs


@pytest.fixture
def make_documents():
    return _make_documents

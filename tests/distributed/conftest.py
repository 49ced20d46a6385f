import sys
from pathlib import Path

import pytest

# Spawned ranks import their worker functions by module name: keep this folder importable (children inherit sys.path).
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(scope="session")
def cache(cache_dir):
    """One MEGAMLM_CACHE (the tokenized bundled corpus, index files) for every trainer test, tests/conftest.py's;
    spawned ranks inherit it."""
    return cache_dir


@pytest.fixture(scope="package", autouse=True)
def kept_worlds():
    """The gloo worlds harness.spawn keeps between tests end with this folder's tests."""
    from harness import close_worlds

    yield
    close_worlds()

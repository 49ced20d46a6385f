import os
import sys
from pathlib import Path

import pytest

# Spawned ranks import their worker functions by module name: keep this folder importable (children inherit sys.path).
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    """One MEGAMLM_CACHE (the tokenized bundled corpus, index files) for every trainer test; spawned ranks inherit
    it."""
    path = str(tmp_path_factory.mktemp("megamlm-cache"))
    previous = os.environ.get("MEGAMLM_CACHE")
    os.environ["MEGAMLM_CACHE"] = path
    yield path
    if previous is None:
        os.environ.pop("MEGAMLM_CACHE", None)
    else:
        os.environ["MEGAMLM_CACHE"] = previous

"""Fixtures shared by the e2e and documentation tests."""

import os

import pytest


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One tokenized copy of the bundled corpus for the whole session (MEGAMLM_CACHE)."""
    path = str(tmp_path_factory.mktemp("megamlm-cache"))
    previous = os.environ.get("MEGAMLM_CACHE")
    os.environ["MEGAMLM_CACHE"] = path
    yield path
    if previous is None:
        os.environ.pop("MEGAMLM_CACHE", None)
    else:
        os.environ["MEGAMLM_CACHE"] = previous

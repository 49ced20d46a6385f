"""Fixtures and helper paths shared by the test folders."""

import os
import sys
from pathlib import Path

import pytest

# Shared test helpers are imported by module name from every test folder (and by spawned ranks, which inherit
# sys.path): tests/helpers.py, the tiny shapes, models, batches, datasets and flags; tests/step_recorder.py, every
# step of a run; tests/unit/hf/decoder_families.py, the tiny decoder families.
TESTS = Path(__file__).resolve().parent
for HELPERS in (str(TESTS), str(TESTS / "unit" / "hf")):
    if HELPERS not in sys.path:
        sys.path.insert(0, HELPERS)


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

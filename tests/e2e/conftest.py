import pytest

from megamlm.config import parse_args
from megamlm.training.trainer import pretrain

# Small enough for seconds per run on 2 cores, large enough for the loss to move.
FAST = ["--seq-length", "64", "--global-batch-size", "8", "--micro-batch-size", "4", "--log-interval", "5"]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One tokenized copy of the bundled corpus for the whole session."""
    return str(tmp_path_factory.mktemp("megamlm-cache"))


@pytest.fixture
def run(cache_dir, monkeypatch):
    monkeypatch.setenv("MEGAMLM_CACHE", cache_dir)

    def _run(*argv):
        return pretrain(parse_args(FAST + [str(a) for a in argv]))

    return _run

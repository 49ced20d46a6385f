from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import helpers
import pytest
import torch
from helpers import FAST, TINY, write_dataset
from step_recorder import StepRecorder

from megamlm.config import parse_args
from megamlm.data import IndexedDataset, prepare_embedded_corpus
from megamlm.training.trainer import pretrain


@pytest.fixture(scope="session")
def fast_flags():
    """The FAST settings every in-process run of these tests starts from."""
    return list(FAST)


@pytest.fixture(scope="session")
def run(cache_dir):
    """Train in-process on the bundled corpus with the FAST settings plus ``argv``; returns the RunResult's fields
    and the StepRecorder's (losses, objectives, sample_ids, ... per step)."""
    return run_recorded


def run_recorded(*argv, on_step=None):
    recorder = StepRecorder()

    def observe(report):
        recorder(report)
        if on_step is not None:
            on_step(report)

    result = pretrain(parse_args(FAST + [str(a) for a in argv]), on_step=observe)
    return SimpleNamespace(**vars(result), **vars(recorder))


@contextmanager
def intra_op_threads(count: int):
    threads = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def one_thread():
    """One intra-op thread: bitwise comparisons between runs need the same arithmetic order."""
    with intra_op_threads(1):
        yield


@pytest.fixture(scope="module")
def module_one_thread():
    """``one_thread`` for a module-scoped fixture whose runs are compared bitwise: pytest builds module-scoped
    fixtures before any function-scoped one, so without it such a run takes every core while the runs compared with
    it take one (on some processors that changes the last bits)."""
    with intra_op_threads(1):
        yield


@pytest.fixture(scope="session")
def tiny(run):
    """``run`` with the TINY settings too."""
    return lambda *argv: run(*TINY, *argv)


@pytest.fixture(scope="session")
def tree_digest():
    """helpers.tree_digest: compare a folder's before and after to show nothing changed."""
    return helpers.tree_digest


@pytest.fixture(scope="session")
def tiny_flags():
    """The flags an in-process ``tiny`` run starts from (for ``megamlm.cli.main``)."""
    return FAST + TINY


@pytest.fixture
def other_corpus(tmp_path, cache_dir):
    """(prefix, tokenizer) of other data in the bundled corpus's vocabulary: its second half."""
    prefix, tokenizer = prepare_embedded_corpus(cache_dir)
    source = IndexedDataset(prefix)
    other = write_dataset(tmp_path / "other" / "part_text_document",
                          (source[i] for i in range(len(source) // 2, len(source))), source.dtype)
    return other, tokenizer


@pytest.fixture(scope="session")
def austen_books(tmp_path_factory, cache_dir):
    """A folder holding data/austen/<book>_text_document, as examples/recipes/austen_books.py writes it (the data
    of the shipped tiny recipes, named relative to where pretrain.py runs)."""
    import importlib.util

    script = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "austen_books.py"
    spec = importlib.util.spec_from_file_location("austen_books", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = tmp_path_factory.mktemp("reader")
    module.split_by_book(folder / "data" / "austen", cache_dir)
    return folder

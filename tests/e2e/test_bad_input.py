"""Each user error gets one clear message before any work starts, and nothing on disk is damaged."""

import numpy as np
import pytest

from megamlm.checkpoint import CheckpointError
from megamlm.cli import main
from megamlm.config import ConfigError
from megamlm.data import DataError, IndexedDatasetWriter, prepare_embedded_corpus


def expect_cli_error(capsys, argv, message):
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err
    assert err.count("\n") == 1  # one line, no traceback


def test_missing_data_file(capsys, tmp_path, cache_dir, monkeypatch):
    monkeypatch.setenv("MEGAMLM_CACHE", cache_dir)
    _, tokenizer = prepare_embedded_corpus()
    expect_cli_error(capsys, ["--data-path", tmp_path / "nope", "--tokenizer-model", tokenizer], "nope")


def test_data_without_tokenizer(capsys, tmp_path):
    expect_cli_error(capsys, ["--data-path", tmp_path / "x"], "--tokenizer-model")


def test_load_of_a_missing_checkpoint(capsys, tmp_path):
    expect_cli_error(capsys, ["--load", tmp_path / "missing"], "does not exist")


def test_load_of_an_incomplete_checkpoint_leaves_it_untouched(capsys, tmp_path):
    broken = tmp_path / "iter_0000010"
    broken.mkdir()
    (broken / "train_state.pt").write_bytes(b"partial")
    expect_cli_error(capsys, ["--load", broken], "incomplete")
    assert (broken / "train_state.pt").read_bytes() == b"partial"


def test_data_whose_vocabulary_does_not_fit_the_model(capsys, tmp_path, cache_dir, monkeypatch):
    monkeypatch.setenv("MEGAMLM_CACHE", cache_dir)
    _, tokenizer = prepare_embedded_corpus()  # 8,192 ids
    prefix = tmp_path / "wide"
    with IndexedDatasetWriter(prefix, dtype=np.int32) as writer:
        writer.add_document(np.arange(9000, 9500))
    expect_cli_error(capsys, ["--data-path", prefix, "--tokenizer-model", tokenizer], "token id 9499")


def test_tokenizer_larger_than_the_model_vocabulary(capsys, cache_dir, monkeypatch):
    monkeypatch.setenv("MEGAMLM_CACHE", cache_dir)
    expect_cli_error(capsys, ["--vocab-size", "4096"], "the tokenizer has 8192 ids")


@pytest.mark.parametrize("argv,message", [
    (["--objective", "unknown"], "argument --objective: invalid choice: 'unknown'"),
    (["--switch", "1.5"], "--switch must be a fraction"),
    (["--mask-ratio", "0"], "--mask-ratio"),
    (["--num-query-groups", "3"], "not divisible by --num-query-groups"),
    (["--global-batch-size", "6", "--micro-batch-size", "4"], "not divisible by --micro-batch-size"),
    (["--compile", "fast"], "argument --compile: invalid choice: 'fast'"),
    (["--device", "cpu", "--compile", "cudagraphs"], "--compile cudagraphs needs one GPU process"),
    (["--device", "cpu", "--attention-backend", "sdpa_cudnn"], "--attention-backend sdpa_cudnn runs on a GPU"),
])
def test_flag_errors_through_the_command_line(capsys, argv, message):
    expect_cli_error(capsys, argv, message)


def test_error_classes_are_user_errors_and_value_errors():
    from megamlm.errors import ResumeError, UserError
    from megamlm.parallel.dims import LayoutError
    from megamlm.parallel.launch import LaunchError

    for cls in (ConfigError, DataError, CheckpointError, ResumeError, LayoutError):
        assert issubclass(cls, ValueError) and issubclass(cls, UserError)
    assert issubclass(LaunchError, UserError)

"""--sample-mode packed_documents and document_per_row in a run: resume inside either is exact, tokens are counted
without padding, the order does not follow the batch layout, and a bad mode or length is one line, exit 2."""

import numpy as np
import pytest
from helpers import expect_one_line

from megamlm.cli import main
from megamlm.data import StreamSpec, build_train_dataset, prepare_embedded_corpus
from megamlm.data.documents import tokens_through
from megamlm.data.phase_streams import RecipeStreamSpec, StreamSegment, build_recipe_dataset
from megamlm.training.metrics_file import read_metrics

MODES = ("packed_documents", "document_per_row")
GBS = 4  # the TINY settings' global batch (conftest.py)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("mode", MODES)
def test_a_run_stopped_and_resumed_inside_the_mode_reaches_the_straight_runs_losses(tiny, tmp_path, mode):
    schedule = ["--sample-mode", mode, "--objective", "clm_then_mlm", "--switch", "0.5", "--train-iters", "6"]
    straight = tiny(*schedule)
    stopped = tiny(*schedule, "--save", tmp_path / "a", "--exit-interval", "2")
    assert sorted(stopped.losses) == [1, 2]
    resumed = tiny(*schedule, "--load", tmp_path / "a", "--save", tmp_path / "a")
    assert resumed.start_step == 2 and sorted(resumed.losses) == [3, 4, 5, 6]
    for step in range(1, 7):
        run = stopped if step <= 2 else resumed
        assert run.losses[step] == straight.losses[step], step  # bitwise on CPU
        assert run.sample_ids[step] == straight.sample_ids[step]


@pytest.mark.parametrize("mode", MODES)
def test_tokens_are_counted_without_padding(tiny, tmp_path, mode, cache_dir):
    tiny("--sample-mode", mode, "--train-iters", "4", "--log-interval", "2", "--save", tmp_path / "r")
    train = read_metrics(tmp_path / "r", "train")
    prefix, _ = prepare_embedded_corpus(cache_dir)
    stream = build_train_dataset(StreamSpec([prefix], 32, 4 * GBS, seed=1234, sample_mode=mode))
    real = [int(np.count_nonzero(stream.document_ids(k) >= 0)) for k in range(4 * GBS)]
    if mode == "document_per_row":  # a paragraph shorter than 32 tokens leaves padding (packed rows start full)
        assert sum(real) < 4 * GBS * 32
    counted = {r["step"]: r["tokens"] for r in train}
    assert counted[2] == sum(real[:2 * GBS]) == tokens_through(stream, 2 * GBS)
    assert counted[4] == sum(real)


def test_a_windows_run_is_unchanged_by_the_setting(tiny):
    """The default mode named explicitly is the run it always was, bitwise."""
    plain = tiny("--train-iters", "4")
    named = tiny("--train-iters", "4", "--sample-mode", "windows")
    assert named.losses == plain.losses


@pytest.mark.parametrize("mode", MODES)
def test_the_micro_batch_size_does_not_change_a_step(tiny, mode):
    """Rows are samples: a global batch of 4 as 2 x 2 or 4 x 1 micro-batches trains the same samples and (up to
    the summation order) the same loss."""
    two = tiny("--sample-mode", mode, "--train-iters", "4")
    four = tiny("--sample-mode", mode, "--train-iters", "4", "--micro-batch-size", "1")
    assert [k for s in sorted(two.sample_ids) for k in two.sample_ids[s]] == \
        [k for s in sorted(four.sample_ids) for k in four.sample_ids[s]]
    for step in (1, 2):
        assert four.losses[step] == pytest.approx(two.losses[step], rel=1e-5)


@pytest.mark.parametrize("argv,message", [
    (["--sample-mode", "packed_documents", "--seq-length", "1"], "--sample-mode packed_documents needs --seq-length"),
    (["--sample-mode", "document_per_row", "--seq-length", "1"], "--sample-mode document_per_row needs --seq-length"),
    (["--sample-mode", "rows"], "argument --sample-mode: invalid choice: 'rows'"),
])
def test_bad_sample_mode_input_is_one_line(capsys, argv, message):
    expect_one_line(capsys, main(argv), message)


@pytest.mark.parametrize("mode", MODES)
def test_a_recipe_that_changes_length_and_data_resumes_inside_each_phase_bitwise(tiny, tmp_path, cache_dir, mode):
    """Phases at 32 then 64 tokens, the second on a blend: the rows continue each epoch's documents (see
    data/document_streams.py) and a stop inside each phase resumes to the straight run's losses."""
    import yaml
    from helpers import write_dataset

    from megamlm.data import IndexedDataset

    prefix, _ = prepare_embedded_corpus(cache_dir)
    source = IndexedDataset(prefix)
    half = write_dataset(tmp_path / "half", (source[i] for i in range(len(source) // 2)), source.dtype)
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump({"phases": [
        {"steps": 3, "seq_length": 32}, {"seq_length": 64, "data_path": ["0.5", prefix, "0.5", half]}]}))
    run = ["--config", config, "--sample-mode", mode, "--seq-length", "64", "--train-iters", "6"]
    straight = tiny(*run)
    first = tiny(*run, "--save", tmp_path / "a", "--exit-interval", "2")
    second = tiny(*run, "--save", tmp_path / "a", "--exit-interval", "4")
    third = tiny(*run, "--save", tmp_path / "a")
    assert sorted(first.losses) == [1, 2] and sorted(second.losses) == [3, 4] and sorted(third.losses) == [5, 6]
    for part in (first, second, third):
        for step, loss in part.losses.items():
            assert loss == straight.losses[step], step  # bitwise on CPU


def test_the_sample_mode_is_a_phase_setting_and_a_stop_inside_each_phase_resumes_bitwise(tiny, tmp_path, cache_dir):
    """Windows at 32 tokens, then packed documents at 64, then one document per row: each phase's rows are of its
    mode (padding only where documents are whole), the token count follows, and resumes are exact."""
    import yaml

    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump({"phases": [
        {"steps": 2, "seq_length": 32}, {"steps": 2, "seq_length": 64, "sample_mode": "packed_documents"},
        {"sample_mode": "document_per_row"}]}))
    run = ["--config", config, "--seq-length", "64", "--train-iters", "6", "--log-interval", "1"]
    straight = tiny(*run, "--save", tmp_path / "s")
    first = tiny(*run, "--save", tmp_path / "a", "--exit-interval", "3")
    second = tiny(*run, "--save", tmp_path / "a")
    assert sorted(first.losses) == [1, 2, 3] and sorted(second.losses) == [4, 5, 6]
    for part in (first, second):
        for step, loss in part.losses.items():
            assert loss == straight.losses[step], step  # bitwise on CPU
    prefix, _ = prepare_embedded_corpus(cache_dir)
    segments = (StreamSegment((prefix,), 32, 0, 8, "windows"), StreamSegment((prefix,), 64, 8, 16, "packed_documents"),
                StreamSegment((prefix,), 64, 16, 24, "document_per_row"))
    stream = build_recipe_dataset(RecipeStreamSpec(segments, seed=1234))
    real = [int(np.count_nonzero(stream.document_ids(k) >= 0)) for k in range(24)]
    tokens = {r["step"]: r["tokens"] for r in read_metrics(tmp_path / "s", "train")}
    assert tokens[2] == 2 * GBS * 32 and tokens[6] == sum(real)  # windows: every token; documents: no padding
    assert [len(stream.sample_documents(k)) == 1 for k in range(16, 24)] == [True] * 8  # a row per document
    with pytest.raises(Exception, match="phase 2.sample_mode 'rows' is not one of"):
        config.write_text(yaml.safe_dump({"phases": [{"steps": 2}, {"sample_mode": "rows"}]}))
        tiny(*run)


def test_a_document_phase_of_one_token_rows_is_one_line(capsys, tmp_path):
    import yaml

    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump({"phases": [{"steps": 2}, {"seq_length": 1, "sample_mode": "packed_documents"}]}))
    expect_one_line(capsys, main(["--config", str(config), "--train-iters", "4"]),
                    "phase 2.seq_length 1: its sample mode packed_documents needs rows of at least 2 tokens")

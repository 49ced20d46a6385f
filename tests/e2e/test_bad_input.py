"""Each user error gets one clear message before any work starts, and nothing on disk is damaged."""

import importlib.util

import numpy as np
import pytest
from helpers import TINY_BATCH, TINY_SHAPE, expect_one_line, tool_main, write_dataset
from helpers import tree_digest as snapshot

from megamlm.checkpoint import CheckpointError
from megamlm.cli import main
from megamlm.config import ConfigError
from megamlm.data import DataError, prepare_embedded_corpus


def expect_cli_error(capsys, argv, message):
    expect_one_line(capsys, main([str(a) for a in argv]), message)


def test_missing_data_file(capsys, tmp_path, cache_dir, monkeypatch):
    monkeypatch.setenv("MEGAMLM_CACHE", cache_dir)
    _, tokenizer = prepare_embedded_corpus()
    expect_cli_error(capsys, ["--data-path", tmp_path / "nope", "--tokenizer-model", tokenizer], "nope")


def test_data_without_tokenizer(capsys, tmp_path):
    for suffix in (".bin", ".idx"):  # the files exist (a missing one is named first: test_sidecar_tokenizer.py)
        (tmp_path / f"x{suffix}").write_bytes(b"")
    expect_cli_error(capsys, ["--data-path", tmp_path / "x"], "--tokenizer-model")


def test_a_missing_tokenizer_for_the_bundled_corpus(capsys, tmp_path):
    expect_cli_error(capsys, ["--tokenizer-model", tmp_path / "nope.json"], "nope.json: no such file")


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
    write_dataset(prefix, [np.arange(9000, 9500)], np.int32)
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
    # issue 22: flags that would do nothing in the combination given
    (["--objective", "clm", "--switch", "0.5"], "--switch places the objective switch, but --objective clm has one"),
    (["--objective", "mlm", "--switch-step", "3"], "--switch-step places the objective switch, but --objective mlm"),
    (["--switch", "0.5"], "--objective mlm has one objective"),  # mlm is the default
    (["--lr-decay-style", "constant", "--min-lr", "1e-5"], "--lr-decay-style constant never decays; drop --min-lr"),
])
def test_flag_errors_through_the_command_line(capsys, argv, message):
    expect_cli_error(capsys, argv, message)


def test_error_classes_are_user_errors_and_value_errors():
    from megamlm.errors import LayoutError, ResumeError, UserError
    from megamlm.parallel.launch import LaunchError

    for cls in (ConfigError, DataError, CheckpointError, ResumeError, LayoutError):
        assert issubclass(cls, ValueError) and issubclass(cls, UserError)
    assert issubclass(LaunchError, UserError)


# ---- issue 17: every bad input below ends in one line and exit code 2, and leaves the files on disk as they were --

import builtins  # noqa: E402
import errno  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from megamlm.checkpoint.integrity import MARKER  # noqa: E402
from megamlm.data.embedded import TOKENIZER_FILE  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SMALL = [*TINY_SHAPE, *TINY_BATCH, "--log-interval", "1"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_non_utf8_bytes_in_a_jsonl_name_the_line(capsys, tmp_path, workers):
    corpus = tmp_path / "in" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_bytes(b'{"text": "fine"}\n{"text": "also fine"}\n{"text": "caf\xe9"}\n')
    before = snapshot(tmp_path)
    status = tool_main("preprocess_data")(["--input", str(corpus), "--output-prefix", str(tmp_path / "out" / "c"),
                                           "--tokenizer-model", str(TOKENIZER_FILE), "--workers", workers,
                                           "--no-progress"])
    expect_one_line(capsys, status, f"{corpus} line 3 is not UTF-8 text (byte 0xe9 at column 14)")
    assert snapshot(tmp_path) == before


def test_an_empty_input_is_an_error_not_an_empty_dataset(capsys, tmp_path):
    for name, content in (("empty.jsonl", ""), ("blank.jsonl", '{"text": ""}\n\n{"text": ""}\n')):
        (tmp_path / name).write_text(content)
        before = snapshot(tmp_path)
        status = tool_main("preprocess_data")(["--input", str(tmp_path / name), "--output-prefix",
                                               str(tmp_path / "c"), "--tokenizer-model", str(TOKENIZER_FILE),
                                               "--no-progress"])
        expect_one_line(capsys, status, "gave no tokens")
        assert snapshot(tmp_path) == before


@pytest.mark.parametrize("suffix", [".bin", ".idx"])
def test_an_unreadable_dataset_file_is_named(capsys, tmp_path, cache_dir, monkeypatch, suffix):
    prefix, tokenizer = prepare_embedded_corpus()
    data = tmp_path / "data"
    for part in (".bin", ".idx"):
        shutil.copy(prefix + part, str(data) + part)
    before = snapshot(tmp_path)
    unreadable = str(data) + suffix
    os.chmod(unreadable, 0)
    if os.geteuid() == 0:  # root reads any file: make open() answer as it would for anyone else
        real_open = builtins.open

        def denying_open(file, *args, **kwargs):
            if os.fspath(file) == unreadable:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), unreadable)
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", denying_open)
    status = main([*SMALL, "--data-path", str(data), "--tokenizer-model", tokenizer, "--save", str(tmp_path / "ck")])
    expect_one_line(capsys, status, f"cannot read dataset file {unreadable}: Permission denied")
    monkeypatch.undo()
    os.chmod(unreadable, before[Path(unreadable).name][1] & 0o777)
    assert snapshot(tmp_path) == before and not (tmp_path / "ck").exists()


@pytest.mark.parametrize("argv,message", [
    (["--lr", "-1"], "--lr must be > 0, got -1.0"),
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--min-lr", "inf"], "--min-lr must be a finite number"),
    (["--adam-beta2", "1.5"], "--adam-beta2 must be >= 0 and < 1, got 1.5"),
    (["--adam-eps", "0"], "--adam-eps must be > 0"),
    (["--weight-decay", "-0.1"], "--weight-decay must be >= 0"),
    (["--clip-grad", "-1"], "--clip-grad must be >= 0"),
    (["--seed", "-1"], "--seed must be >= 0"),
    (["--lr-warmup-iters", "-5"], "--lr-warmup-iters must be >= 0"),
    (["--vocab-size", "0"], "--vocab-size must be >= 1"),
    (["--init-method-std", "0"], "--init-method-std must be > 0"),
    (["--min-lr", "0.1", "--lr", "0.01"], "--min-lr 0.1 is above the peak --lr 0.01"),
    (["--micro-batch-size", "0"], "--micro-batch-size must be positive, got 0"),
    (["--train-iters", "abc"], "argument --train-iters: invalid int value: 'abc'"),
])
def test_numeric_flags_out_of_range(capsys, argv, message):
    expect_cli_error(capsys, argv, message)


@pytest.mark.parametrize("text,message", [
    ("training:\n  lr: [0.1\n", "is not valid YAML at line 3, column 1"),
    ("training:\n\tlr: 0.1\n", "is not valid YAML at line 2"),
    ("- a\n- b\n", "must hold sections"),
    ("training: 5\n", "section training must be a mapping"),
    ("training:\n  lr: fast\n", "training.lr must be a number, got 'fast'"),
    ("training:\n  train_iters: 1.5\n", "training.train_iters must be a whole number, got 1.5"),
    ("model:\n  model: null\n", "model.model needs a value"),
    # issue 22: PyYAML keeps the last of two equal keys; a section or a setting given twice is refused
    ("model:\n  model: tiny\ntraining:\n  lr: 0.1\nmodel:\n  seq_length: 64\n",
     "at line 5, column 1: key 'model' given twice (first at line 1)"),
    ("training:\n  lr: 0.1\n  min_lr: 0.0\n  lr: 0.2\n", "at line 4, column 3: key 'lr' given twice (first at line 2)"),
    ("training: {lr: 0.1, lr: 0.2}\n", "key 'lr' given twice (first at line 1)"),
])
def test_a_malformed_yaml_config_is_named_with_its_line(capsys, tmp_path, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    expect_cli_error(capsys, ["--config", path], f"config file {path}")
    expect_cli_error(capsys, ["--config", path], message)


def test_yaml_floats_without_a_dot_are_numbers(tmp_path):
    from megamlm.config import parse_args

    path = tmp_path / "run.yaml"
    path.write_text("training:\n  lr: 5e-4\n  min_lr: 0\n")
    cfg = parse_args(["--config", str(path)])
    assert cfg.training.lr == 5e-4 and cfg.training.min_lr == 0.0 and isinstance(cfg.training.min_lr, float)


def test_triton_kernels_without_a_gpu_are_refused_before_any_work(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    # The README's [test] install has no triton: the missing package is named first; with it (CI adds [kernels]),
    # the device is.
    expected = ("--kernel-backend triton runs Triton kernels on a CUDA/ROCm GPU, and this run is on cpu"
                if importlib.util.find_spec("triton") else
                '--kernel-backend triton needs the triton package, which is not installed; pip install "megamlm[kern')
    expect_cli_error(capsys, ["--kernel-backend", "triton", "--save", tmp_path / "ck"], expected)
    assert not (tmp_path / "ck").exists()


def tiny_run(tmp_path, *argv) -> int:
    return main([*SMALL, "--save", str(tmp_path), *map(str, argv)])


def test_an_old_checkpoint_without_marker_and_damaged_shards_is_skipped_for_the_previous_one(tmp_path, cache_dir,
                                                                                           capsys):
    assert tiny_run(tmp_path, "--train-iters", "4", "--save-interval", "2") == 0
    for folder in tmp_path.glob("iter_*"):
        (folder / MARKER).unlink()  # as saved before completion markers existed
    newest = tmp_path / "iter_0000004"
    shard = sorted(newest.glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:1000])
    capsys.readouterr()
    assert tiny_run(tmp_path, "--train-iters", "6", "--save-interval", "2", "--override-schedule") == 0
    out = capsys.readouterr().out
    assert f"skipping checkpoint {newest}" in out and "checked by its structure" in out
    assert f"branched from {tmp_path / 'iter_0000002'} at step 2" in out  # its 4-step schedule agrees up to step 2


def test_every_checkpoint_damaged_is_refused_unless_overwrite_damaged(tmp_path, cache_dir, capsys):
    assert tiny_run(tmp_path, "--train-iters", "2") == 0
    shard = sorted((tmp_path / "iter_0000002").glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:1000])
    before = snapshot(tmp_path)
    capsys.readouterr()
    status = tiny_run(tmp_path, "--train-iters", "2")
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert f"every checkpoint in --save {tmp_path} is damaged" in err and "--overwrite-damaged" in err
    assert snapshot(tmp_path) == before
    assert tiny_run(tmp_path, "--train-iters", "2", "--overwrite-damaged") == 0
    assert snapshot(tmp_path)["iter_0000002/" + shard.name] != before["iter_0000002/" + shard.name]


def test_the_same_folder_as_save_and_load_starts_a_run_then_resumes_it(tmp_path, cache_dir, capsys):
    folder = tmp_path / "ckpt" / "tiny"
    argv = ["--train-iters", "4", "--exit-interval", "2", "--load", folder]
    assert main([*SMALL, "--save", str(folder), *map(str, argv)]) == 0
    assert "holds no checkpoint to resume yet: starting from scratch" in capsys.readouterr().out
    assert main([*SMALL, "--save", str(folder), *map(str, argv)]) == 0
    assert f"resumed from {folder / 'iter_0000002'} at step 2" in capsys.readouterr().out


HOLD = """
import sys, time
from megamlm.checkpoint.lock import SaveFolderLock
SaveFolderLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_launch_on_a_folder_in_use_is_refused_and_a_killed_run_leaves_a_stale_lock(tmp_path, cache_dir,
                                                                                         capsys):
    assert tiny_run(tmp_path, "--train-iters", "2") == 0
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(tmp_path)
        capsys.readouterr()
        expect_one_line(capsys, tiny_run(tmp_path, "--train-iters", "4", "--override-schedule"),
                        f"--save {tmp_path} is in use by another run (pid {holder.pid} on host ")
        assert snapshot(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()
    assert tiny_run(tmp_path, "--train-iters", "4", "--override-schedule") == 0
    out = capsys.readouterr().out
    assert f"held a stale lock of pid {holder.pid}" in out and f"from {tmp_path / 'iter_0000002'} at step 2" in out


def test_data_tokenized_by_another_tokenizer_is_refused_when_its_sidecar_says_so(capsys, tmp_path, cache_dir):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<|bos|>", "<|eos|>", "<|pad|>", "<|mask|>", "the", "a", "of"]
    small = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="the"))
    small.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    small.save(str(tmp_path / "small.json"))
    (tmp_path / "c.jsonl").write_text('{"text": "the a of the a"}\n' * 50)
    assert tool_main("preprocess_data")(["--input", str(tmp_path / "c.jsonl"), "--output-prefix",
                                         str(tmp_path / "c"), "--tokenizer-model", str(tmp_path / "small.json"),
                                         "--append-eod", "--no-progress"]) == 0
    sidecar = json.loads((tmp_path / "c_text_document.megamlm.json").read_text())
    assert sidecar["tokenizer"]["vocab_size"] == 7 and sidecar["settings"]["append_eod"] is True
    before = snapshot(tmp_path)
    capsys.readouterr()
    expect_cli_error(capsys, [*SMALL, "--data-path", tmp_path / "c_text_document", "--tokenizer-model",
                              TOKENIZER_FILE, "--save", tmp_path / "ck"],
                     f"{tmp_path / 'c_text_document'} was tokenized by {tmp_path / 'small.json'} (7 ids")
    assert snapshot(tmp_path) == before


def test_the_vocabulary_message_first_suggests_retokenizing(capsys, tmp_path, cache_dir):
    _, tokenizer = prepare_embedded_corpus()
    prefix = tmp_path / "wide"
    write_dataset(prefix, [np.arange(9000, 9500)], np.int32)
    assert main(["--data-path", str(prefix), "--tokenizer-model", tokenizer]) == 2
    err = capsys.readouterr().err
    assert err.index("Re-tokenize it with tools/preprocess_data.py") < err.index("pass that one as --tokenizer-model")
    assert "--vocab-size" not in err


# ---- issue 22: flags that do nothing, duplicate keys, studies, environment arguments ----------------------------

MINIMAL_STUDY = "name: mini\nsizes: [tiny]\nseeds: [1]\ngrids:\n  - budgets: [100]\n    clm_fractions: [0, 0.5]\n"


def test_a_study_file_with_a_key_twice_is_refused_naming_the_key_and_line(capsys, tmp_path):
    for text, message in ((MINIMAL_STUDY + "seeds: [2]\n", "at line 7, column 1: key 'seeds' given twice (first at "
                           "line 3)"),
                          (MINIMAL_STUDY + "    budgets: [50]\n", "at line 7, column 5: key 'budgets' given twice "
                           "(first at line 5)")):
        study = tmp_path / "study.yaml"
        study.write_text(text)
        before = snapshot(tmp_path)
        expect_one_line(capsys, tool_main("plan_study")([str(study)]), f"{study} is not valid YAML {message}")
        assert snapshot(tmp_path) == before


def test_evaluation_checkpoint_steps_outside_every_run_are_refused(capsys, tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(MINIMAL_STUDY + "evaluation:\n  tasks: [austen-qa]\n  checkpoint_steps: [50, 100, 150, 400]\n")
    expect_one_line(capsys, tool_main("plan_study")([str(study)]),
                    "evaluation.checkpoint_steps [150, 400] lie outside every run (the longest trains steps 1-100)")
    study.write_text(MINIMAL_STUDY + "evaluation:\n  tasks: [austen-qa]\n  checkpoint_steps: [50]\n")
    assert tool_main("plan_study")([str(study)]) == 0
    assert tool_main("plan_study")([str(study), "--scale", "0.1"]) == 0  # the steps scale with the budgets


def test_a_minimal_study_without_batch_sizes_is_priced_with_the_presets_recipe_batch(capsys, tmp_path):
    from megamlm.config import batch_start
    from megamlm.study.planning.load import load_study
    from megamlm.study.planning.plan import build_plan

    study = tmp_path / "study.yaml"
    study.write_text(MINIMAL_STUDY)
    assert tool_main("plan_study")([str(study)]) == 0
    plan = build_plan(load_study(study))
    run = plan.runs[0]
    assert run.global_batch_size == batch_start("tiny")[1] and run.tokens_per_step > 0
    assert "--global-batch-size" not in plan.flags(run)  # the launch fits it to its world size


def test_the_planner_passes_no_switch_to_a_one_objective_run(tmp_path):
    from megamlm.study.planning.load import load_study
    from megamlm.study.planning.plan import build_plan

    (tmp_path / "base.yaml").write_text("objective:\n  objective: clm_then_mlm\n  switch_step: 30\n")  # as the paper's
    study = tmp_path / "study.yaml"
    study.write_text(MINIMAL_STUDY.replace("[0, 0.5]", "[0, 0.5, 1]") + "pretrain:\n  config: base.yaml\n")
    plan = build_plan(load_study(study))
    assert sorted(run.objective for run in plan.runs) == ["clm", "clm_then_mlm", "mlm"]
    for run in plan.runs:
        flags = plan.flags(run)
        assert ("--switch" in flags or "--switch-step" in flags) == (run.switch_step is not None), (run.name, flags)


@pytest.mark.parametrize("program", ["pretrain", "evaluate"])
def test_an_unbalanced_quote_in_the_environments_arguments_is_one_line(capsys, monkeypatch, program):
    monkeypatch.setenv(f"MEGAMLM_{program.upper()}_ARGS", "--train-iters '20")
    monkeypatch.setattr(sys, "argv", [program])
    run = main if program == "pretrain" else tool_main("evaluate")
    expect_one_line(capsys, run(None), f"MEGAMLM_{program.upper()}_ARGS does not parse as shell words "
                                       "(No closing quotation)")


# ---- issue 22: a disk that fills during training stops the run like a signal, with every file whole ------------

def failing_write(monkeypatch, module, name, after: int, torn: bool = True):
    """``module.name`` (a write) succeeds ``after`` times, then writes half (``torn``) and raises ENOSPC."""
    real, calls = getattr(module, name), []

    def write(*args, **kwargs):
        calls.append(1)
        if len(calls) <= after:
            return real(*args, **kwargs)
        if torn and isinstance(args[-1], bytes):
            real(args[0], args[-1][:len(args[-1]) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(module, name, write)


def test_a_full_disk_under_metrics_jsonl_saves_a_checkpoint_and_leaves_no_torn_line(tmp_path, cache_dir, capsys,
                                                                                   monkeypatch):
    from megamlm.checkpoint.catalog import LATEST
    from megamlm.training import metrics_file
    from megamlm.training.metrics_file import read_metrics

    failing_write(monkeypatch, metrics_file, "_write_all", after=2)  # the records of steps 1 and 2 are written
    capsys.readouterr()
    assert tiny_run(tmp_path, "--train-iters", "6") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: stopped after step 3: writing metrics.jsonl failed: No "
                                                   f"space left on device (ENOSPC): {tmp_path / 'metrics.jsonl'}"), err
    assert f"saved checkpoint {tmp_path / 'iter_0000003'}: free space, then relaunch the same command" in err
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]  # whole lines only: the half line was cut back
    assert (tmp_path / LATEST).read_text().strip() == "3"
    monkeypatch.undo()
    assert tiny_run(tmp_path, "--train-iters", "6") == 0  # the disk has room again: it resumes at step 3
    assert [r["step"] for r in read_metrics(tmp_path, "train")] == [1, 2, 4, 5, 6]


def test_a_full_disk_under_tensorboard_events_stops_the_run_in_one_line(tmp_path, cache_dir, capsys, monkeypatch):
    from torch.utils.tensorboard import SummaryWriter

    failing_write(monkeypatch, SummaryWriter, "add_scalar", after=8, torn=False)
    capsys.readouterr()
    assert tiny_run(tmp_path / "run", "--train-iters", "6", "--tensorboard-dir", tmp_path / "tb") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "writing the TensorBoard events failed: No space left on device (ENOSPC)" in err
    assert "saved checkpoint" in err and (tmp_path / "run" / "iter_0000002").is_dir(), err


def test_a_tensorboard_dir_that_is_a_file_is_refused_before_any_work(tmp_path, cache_dir, capsys):
    (tmp_path / "tb").write_text("a file")
    before = snapshot(tmp_path)
    expect_cli_error(capsys, [*SMALL, "--train-iters", "2", "--tensorboard-dir", tmp_path / "tb", "--save",
                              tmp_path / "run"], f"--tensorboard-dir {tmp_path / 'tb'} is a file, not a folder")
    assert snapshot(tmp_path) == before and not (tmp_path / "run").exists()


# ---- issue 22: damaged inputs and unwritable outputs of the tools -------------------------------------------------

def _gzip_of_lines(count: int) -> bytes:
    import gzip
    import random

    rng = random.Random(0)
    return gzip.compress("".join(json.dumps({"text": " ".join(str(rng.random()) for _ in range(12))}) + "\n"
                                 for _ in range(count)).encode())


@pytest.mark.parametrize("name,content,message", [
    ("c.parquet", b"PAR1 not really a parquet file", "is not a readable parquet file (ArrowInvalid: "),
    ("c.jsonl.gz", b"\x1f\x8b\x08\x00" + b"garbage" * 20, "is not a readable gzip file (zlib.error: "),
    ("c.jsonl.gz", _gzip_of_lines(3000)[:4000], "is not a readable gzip file (EOFError: "),
])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_damaged_compressed_or_parquet_input_is_one_line(capsys, tmp_path, name, content, message, workers):
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    corpus = tmp_path / "in" / name
    corpus.parent.mkdir()
    corpus.write_bytes(content)
    (tmp_path / "out").mkdir()
    before = snapshot(tmp_path)
    status = tool_main("preprocess_data")(["--input", str(corpus), "--output-prefix", str(tmp_path / "out" / "c"),
                                           "--tokenizer-model", str(TOKENIZER_FILE), "--workers", workers,
                                           "--no-progress"])
    expect_one_line(capsys, status, f"{corpus} {message}")
    assert snapshot(tmp_path) == before


def test_preprocess_into_a_folder_it_cannot_write_is_one_line(capsys, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "some text"}\n')
    (tmp_path / "blocker").write_text("a file")
    before = snapshot(tmp_path)
    argv = ["--input", str(corpus), "--tokenizer-model", str(TOKENIZER_FILE), "--no-progress", "--output-prefix"]
    status = tool_main("preprocess_data")([*argv, str(tmp_path / "blocker" / "sub" / "c")])
    expect_one_line(capsys, status, f"{tmp_path / 'blocker'} is a file, not a folder; choose another --output-prefix")
    from megamlm.data import indexed  # a folder that refuses writes (as root, permissions do not: simulated)

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / "out" / "c_text_document.bin"))
    monkeypatch.setattr(indexed.IndexedDatasetWriter, "__init__", refuse)
    status = tool_main("preprocess_data")([*argv, str(tmp_path / "out" / "c")])
    expect_one_line(capsys, status, f"Permission denied (EACCES): {tmp_path / 'out' / 'c_text_document.bin'}")
    assert snapshot(tmp_path) == before


# ---- issue 22: outputs of the tools are never replaced without --force ------------------------------------------

def test_evaluate_refuses_a_foreign_output_folder_and_an_output_that_is_a_file(capsys, tmp_path):
    from megamlm.eval.runner import check_output_folder

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("my notes")
    (tmp_path / "a_file").write_text("a file")
    before = snapshot(tmp_path)
    evaluate = tool_main("evaluate")
    argv = ["--model", f"m={tmp_path / 'no_model'}", "--tasks", "austen-qa", "--devices", "cpu", "--output"]
    expect_one_line(capsys, evaluate([*argv, str(foreign)]),
                    f"--output {foreign} holds files tools/evaluate.py did not write (notes.txt); choose a new or "
                    "empty folder, or pass --force")
    expect_one_line(capsys, evaluate([*argv, str(tmp_path / "a_file")]), "is a file, not a folder")
    assert snapshot(tmp_path) == before
    check_output_folder(foreign, force=True)  # --force writes into it
    (tmp_path / "earlier" / "runs").mkdir(parents=True)  # an earlier evaluation's folder: resumed
    (tmp_path / "earlier" / "results.md").write_text("# Fine-tuning results\n")
    check_output_folder(tmp_path / "earlier")
    check_output_folder(tmp_path / "new")


def test_plan_study_emit_refuses_existing_scripts_unless_force(capsys, tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(MINIMAL_STUDY)
    plan_study = tool_main("plan_study")
    script = tmp_path / "local.sh"
    script.write_text("# my own script\n")
    before = snapshot(tmp_path)
    expect_one_line(capsys, plan_study([str(study), "--emit", "local", str(script)]),
                    f"{script} already exists; pass --force to replace it")
    assert snapshot(tmp_path) == before
    assert plan_study([str(study), "--emit", "local", str(script), "--force"]) == 0
    assert script.read_text().startswith("#!/bin/bash") and not list(tmp_path.glob(".*.tmp"))
    slurm = tmp_path / "slurm"
    assert plan_study([str(study), "--emit", "slurm", str(slurm)]) == 0
    before = snapshot(tmp_path)
    capsys.readouterr()
    expect_one_line(capsys, plan_study([str(study), "--emit", "slurm", str(slurm)]),
                    "already exists (4 of the 4 scripts do); pass --force to replace them")  # + report.sbatch
    assert snapshot(tmp_path) == before
    assert plan_study([str(study), "--emit", "slurm", str(slurm), "--force"]) == 0
    assert not list(slurm.glob(".*.tmp"))


def test_study_report_refuses_to_replace_a_file_that_is_not_a_report(capsys, tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(MINIMAL_STUDY)
    other = tmp_path / "README.md"
    other.write_text("# my readme\n")
    before = snapshot(tmp_path)
    expect_one_line(capsys, tool_main("study_report")([str(study), "--output", str(other), "--no-figures"]),
                    f"{other} exists and is not a study report; pass --force to replace it")
    assert snapshot(tmp_path) == before


# ---- issue 22: every entry point, an output it cannot write: one line naming the path, exit 2 -------------------

def _unwritable_cases(tmp_path: Path) -> dict:
    """Each entry point with its output under ``blocker``, a file (root ignores permissions: a file where a folder is
    needed fails for everyone)."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"some words of text {i}"}) + "\n" for i in range(50)))
    assert tool_main("preprocess_data")(["--input", str(corpus), "--output-prefix", str(tmp_path / "d" / "c"),
                                         "--tokenizer-model", str(TOKENIZER_FILE), "--no-progress"]) == 0
    study = tmp_path / "study.yaml"
    study.write_text(MINIMAL_STUDY)
    out = tmp_path / "blocker" / "out"
    dataset = str(tmp_path / "d" / "c_text_document")
    return {
        "pretrain": lambda: main([*SMALL, "--train-iters", "1", "--save", str(out)]),
        "preprocess_data": lambda: tool_main("preprocess_data")([
            "--input", str(corpus), "--output-prefix", str(out / "c"), "--tokenizer-model", str(TOKENIZER_FILE),
            "--no-progress"]),
        "merge_datasets": lambda: tool_main("merge_datasets")(["--input", dataset, dataset, "--output-prefix",
                                                               str(out / "m")]),
        "train_tokenizer": lambda: tool_main("train_tokenizer")(["--input", str(corpus), "--output",
                                                                 str(out / "t.json"), "--vocab-size", "300"]),
        "plan_study local": lambda: tool_main("plan_study")([str(study), "--emit", "local", str(out / "run.sh")]),
        "plan_study slurm": lambda: tool_main("plan_study")([str(study), "--emit", "slurm", str(out)]),
        "study_report": lambda: tool_main("study_report")([str(study), "--output", str(out / "R.md"),
                                                           "--no-figures"]),
        "evaluate": lambda: tool_main("evaluate")(["--model", f"m={tmp_path / 'no_model'}", "--tasks", "austen-qa",
                                                   "--devices", "cpu", "--output", str(out)]),
    }


@pytest.mark.parametrize("tool", ["pretrain", "preprocess_data", "merge_datasets", "train_tokenizer",
                                  "plan_study local", "plan_study slurm", "study_report", "evaluate"])
def test_every_entry_point_says_in_one_line_that_it_cannot_write_its_output(capsys, tmp_path, cache_dir, tool):
    run = _unwritable_cases(tmp_path)[tool]
    (tmp_path / "blocker").write_text("a file")
    before = snapshot(tmp_path)
    capsys.readouterr()
    status = run()
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert str(tmp_path / "blocker") in err, err
    assert any(word in err for word in ("(ENOTDIR)", "(EEXIST)", "not a folder")), err
    assert snapshot(tmp_path) == before


def test_a_full_disk_that_also_refuses_the_checkpoint_says_so(tmp_path, cache_dir, capsys, monkeypatch):
    from megamlm.checkpoint import manager as checkpoint_manager
    from megamlm.checkpoint.checkpointer import CheckpointSaveError
    from megamlm.training import metrics_file

    failing_write(monkeypatch, metrics_file, "_write_all", after=1)

    def no_room(save_dir, step, *args, **kwargs):
        raise CheckpointSaveError(f"could not save the checkpoint of step {step}: No space left on device (ENOSPC)")
    monkeypatch.setattr(checkpoint_manager, "save_checkpoint", no_room)
    capsys.readouterr()
    assert tiny_run(tmp_path, "--train-iters", "6") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: stopped after step 2: writing metrics.jsonl failed"), err
    assert "no checkpoint could be written either (could not save the checkpoint of step 2: No space left" in err
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1]

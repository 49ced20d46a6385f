"""examples/decoder_adaptation/run.py (issue 34, item 5) at a tiny scale: a tiny Llama-shaped decoder built here as a
Hugging Face folder stands in for SmolLM2; every stage runs and the report lists every row."""

import json
import re
import sys
from pathlib import Path

import pytest
from helpers import expect_one_line, load_tool, save_tiny_llama

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / ".." / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / "brown" / "brown.jsonl").is_file(),
                                reason="shared/data (beside the repository) is not present")
TINY = ["--steps", "2", "--seq-length", "32", "--batch-size", "2", "--probe-train", "60", "--probe-eval", "12",
        "--probe-test", "16", "--probe-max-length", "32", "--heldout-windows", "2", "--seeds", "1,2"]


def _run():
    return load_tool("run", "examples/decoder_adaptation").main


def tiny_decoder(folder: Path) -> Path:
    """A 2-layer Llama with a tied LM head and a byte-level BPE of 600 ids trained on a little Austen."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    sys.path.insert(0, str(REPO / "examples"))
    try:
        from cpt_hf_decoder import austen_paragraphs
    finally:
        sys.path.remove(str(REPO / "examples"))
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<pad>", "<bos>", "<eos>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(austen_paragraphs(200), trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                                     unk_token="<unk>", mask_token="<mask>", pad_token="<pad>")
    return save_tiny_llama(folder, tokenizer, max_positions=128)


@needs_data
@pytest.mark.slow
def test_the_pipeline_reports_every_row_and_stage(tmp_path):
    model = tiny_decoder(tmp_path / "decoder")
    report = tmp_path / "REPORT.md"
    assert _run()(["--model", str(model), "--workdir", str(tmp_path / "work"), "--report", str(report), *TINY]) == 0
    text = report.read_text()
    for row in ("the decoder as is (causal) (`decoder`) | causal |",
                "the decoder, bidirectional, untrained (`decoder`) | bidirectional |",
                "bidirectional + MNTP, seed 1 (`mntp-s1`) | bidirectional |",
                "bidirectional + MNTP, seed 2 (`mntp-s2`) | bidirectional |",
                "bidirectional + MLM, seed 1 (`mlm-s1`) | bidirectional |",
                "bidirectional + MLM, seed 2 (`mlm-s2`) | bidirectional |",
                "| **MNTP, mean of 2 seeds** | bidirectional |", "| **MLM, mean of 2 seeds** | bidirectional |",
                "-s1 merged with its source (`", "random init of the same shape (baseline) (`random-init`)",
                "| majority class |", "| lexical baseline `tf-idf+logreg` (no model) |",
                "| lexical baseline `naive-bayes` (no model) |"):
        assert row in text, row
    results = [line for line in text.splitlines() if line.startswith("| ") and "(`" in line]
    assert len(results) == 8, results
    for stage in ("import", "tokenize", "train mntp-s1", "train mlm-s1", "train mntp-s2", "train mlm-s2",
                  "probe (7 rows)", "lexical baselines", "merge", "probe (merged)", "held-out loss", "total"):
        assert f"| {stage} |" in text, stage
    assert "--objective mntp" in text and "Command:\n\n```text\npython examples/decoder_adaptation/run.py" in text
    assert "--weights 0.5,0.5" in text and "16 test (a fixed random subset)" in text
    assert "Adaptation seeds 1, 2: for each" in text and "LR 0.0001, warmup 1 steps" in text
    assert re.search(r"Measured on \d+ CPU cores: [\d.]+ minutes wall \(the stages below\); load average over the "
                     r"last minute [\d.]+ at the start and [\d.]+ at the end", text)
    # Informative is decided on validation; the recipes are compared per seed on the same test examples, or the
    # report says no task can compare them.
    assert "Informative tasks, decided on validation before any test score is read" in text
    comparisons = text.split("## Comparisons on the same test examples")[1].split("\n## ")[0]
    assert ("### MNTP against MLM, per adaptation seed" in comparisons
            or "No task is informative at these sizes: the recipes cannot be compared here." in comparisons)
    # Each seed's two arms saw the same samples; the two seeds saw other samples (their order is the seed's).
    def data(name):
        return next(line.split("] ", 1)[1] for line in (tmp_path / "work" / f"train_{name}.log").read_text()
                    .splitlines() if "| samples " in line)
    assert data("mntp-s1") == data("mlm-s1") and data("mntp-s2") == data("mlm-s2"), data
    assert "samples 0-3 of the stream" in data("mntp-s1")


def test_the_comparison_section_applies_the_rule_over_seeds(tmp_path):
    """MNTP against MLM on the same test examples, per seed, Holm over the family; a recipe is ahead only where
    every seed's paired test is significant and points the same way."""
    from types import SimpleNamespace

    import numpy as np

    report = load_tool("adaptation_report", "examples/decoder_adaptation")
    rng = np.random.default_rng(0)
    results = []
    for name, right, attention in (("mntp-s1", 0.9, "bidirectional"), ("mlm-s1", 0.6, "bidirectional"),
                                   ("mntp-s2", 0.9, "bidirectional"), ("mlm-s2", 0.6, "bidirectional"),
                                   ("decoder", 0.6, "bidirectional"), ("decoder", 0.5, "causal")):
        correct = rng.random(300) < right
        folder = tmp_path / "probe" / name / attention
        folder.mkdir(parents=True)
        kept = {"model": name, "task": "t", "seed": None, "metric": "accuracy",
                "test": {"aggregate": "mean", "ids": list(range(300)), "parts": [[100.0 * c] for c in correct]}}
        (folder / "t.predictions.json").write_text(json.dumps(kept))
        results.append({"model": name, "attention": attention, "task": "t", "random_init": False,
                        "predictions_path": "t.predictions.json", "test": 100.0 * correct.mean()})
    args = SimpleNamespace(seeds=[1, 2])
    lines = report._comparisons(args, results, ["t"], {"t": True}, tmp_path)
    text = "\n".join(lines)
    assert "| mntp-s1 − mlm-s1 | t | 1 | 300 |" in text and "McNemar exact" in text
    assert "- **t**: MNTP ahead on every seed (each Holm-adjusted p < 0.05)." in text
    assert "cannot go below p = 0.5 two-sided" in text  # two seeds: 2/4
    # the untouched causal decoder is in the paired tests too: MNTP (90% right) ahead of it (50%) on every seed
    causal = text.split("### Each adapted model against the untouched decoder as it is (causal)")[1]
    assert "| mntp-s1 − decoder | t | 1 | 300 |" in causal
    assert "- **t**, MNTP: MNTP ahead on every seed (each Holm-adjusted p < 0.05)." in causal
    # One seed reversed: no difference shown.
    flipped = tmp_path / "probe" / "mlm-s2" / "bidirectional" / "t.predictions.json"
    kept = json.loads(flipped.read_text())
    kept["test"]["parts"] = [[100.0] for _ in range(300)]
    flipped.write_text(json.dumps(kept))
    text = "\n".join(report._comparisons(args, results, ["t"], {"t": True}, tmp_path))
    assert "- **t**: no difference shown (MNTP ahead on 1 of 2 seeds" in text
    assert report._comparisons(args, results, ["t"], {"t": False}, tmp_path)[-1].startswith("No task is informative")


@needs_data
@pytest.mark.parametrize("extra,message", [
    (["--steps", "1"], "--steps 1 is too small"),
    (["--seeds", "1,1"], "--seeds 1,1: give distinct seeds"),
    (["--seeds", "one"], "--seeds 'one' is not a list of integers"),
    (["--probe-test", "2"], "--probe-test 2 is too small"),
    (["--merge-weight", "1.5"], "--merge-weight must lie in (0, 1)"),
    (["--tasks", "no-such-task"], "unknown task 'no-such-task'"),
    (["--model", "/nonexistent.gguf"], "not a .gguf file or a Hugging Face folder"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, extra, message):
    argv = ["--workdir", str(tmp_path / "work"), "--report", str(tmp_path / "REPORT.md"), *extra]
    if "--model" not in extra:
        argv += ["--model", str(tmp_path)]  # never reached: the flag checks come first
        (tmp_path / "config.json").write_text("{}")
    expect_one_line(capsys, _run()(argv), message)
    assert not (tmp_path / "work").exists() and not (tmp_path / "REPORT.md").exists()


def test_a_used_workdir_is_refused_without_force(tmp_path, capsys):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "keep.txt").write_text("mine")
    (tmp_path / "config.json").write_text("{}")
    status = _run()(["--model", str(tmp_path), "--workdir", str(tmp_path / "work"), "--data-dir", str(DATA),
                     "--report", str(tmp_path / "REPORT.md")])
    if not (DATA / "brown" / "brown.jsonl").is_file():
        expect_one_line(capsys, status, "has no brown/brown.jsonl")
    else:
        expect_one_line(capsys, status, "is not an empty folder; choose a new one or pass --force")
    assert (tmp_path / "work" / "keep.txt").read_text() == "mine"


def test_the_model_is_a_required_flag_not_a_path_outside_the_repository(tmp_path, capsys):
    """Issue 42: --model defaulted to ../shared/models/..., a file outside the repository."""
    with pytest.raises(SystemExit) as stopped:
        _run()(["--workdir", str(tmp_path / "work")])
    assert stopped.value.code == 2 and "--model" in capsys.readouterr().err
    assert '"models"' not in (REPO / "examples/decoder_adaptation/run.py").read_text()


def test_the_report_names_no_path_of_the_machine_it_ran_on(tmp_path):
    """Issue 42: REPORT.md printed /work/..., /tmp/... paths; they are WORKDIR, DATA_DIR, MODEL_DIR, REPORT_DIR and
    the repository root '.', named in the report, and the committed report holds none."""
    from argparse import Namespace

    report = load_tool("adaptation_report", "examples/decoder_adaptation")
    args = Namespace(workdir=tmp_path / "adapt", data_dir=REPO / ".." / "shared" / "data",
                     model=tmp_path / "models" / "m.gguf", report=tmp_path / "logs" / "REPORT.md")
    text = (f"run.py --model {tmp_path}/models/m.gguf --data-dir {(REPO / '..' / 'shared' / 'data').resolve()} "
            f"--workdir {tmp_path}/adapt --report {tmp_path}/logs/REPORT.md\n{REPO}/pretrain.py --save "
            f"{tmp_path}/adapt/mntp --data-path {REPO}/../shared/data/x")
    assert report.machine_free(text, args) == (
        "run.py --model MODEL_DIR/m.gguf --data-dir DATA_DIR --workdir WORKDIR --report REPORT_DIR/REPORT.md\n"
        "./pretrain.py --save WORKDIR/mntp --data-path DATA_DIR/x")
    # A path that only begins with another is not inside it: the report beside the workdir keeps its own folder.
    beside = Namespace(workdir=tmp_path / "adapt", data_dir=tmp_path / "data", model=tmp_path / "m" / "m.gguf",
                       report=tmp_path / "adapt_REPORT.md")
    assert report.machine_free(f"--workdir {tmp_path}/adapt --report {tmp_path}/adapt_REPORT.md", beside) == \
        "--workdir WORKDIR --report REPORT_DIR/adapt_REPORT.md"
    committed = (REPO / "examples/decoder_adaptation/REPORT.md").read_text()
    assert not any(place in committed for place in ("/work/", "/tmp/", "/home/", "/root/")), committed[:600]
    assert report.PLACES in committed


def test_the_committed_report_is_run_py_at_its_defaults_with_seeds_whole_test_sets_and_paired_tests():
    """Issue 45, item 6: examples/decoder_adaptation/REPORT.md was written by run.py as it is, at its defaults (3
    adaptation seeds, whole test sets), and compares MNTP with MLM per seed on the same test examples."""
    import shlex

    run = load_tool("run", "examples/decoder_adaptation")
    committed = (REPO / "examples/decoder_adaptation/REPORT.md").read_text()
    [command] = re.findall(r"```text\npython examples/decoder_adaptation/run.py (.*)\n```", committed)
    parser = run.build_parser()
    given = parser.parse_args(shlex.split(command))
    places = {"model", "workdir", "report", "data_dir", "force"}
    for action in parser._actions:
        if action.dest not in places and action.dest != "help":
            assert getattr(given, action.dest) == action.default, (action.dest, command)
    assert given.model.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "predates" not in committed  # the note the first design's report carried
    assert "Adaptation seeds 1, 2, 3:" in committed and "every test example" in committed
    assert "| **MNTP, mean of 3 seeds** |" in committed and "| **MLM, mean of 3 seeds** |" in committed
    verdicts = re.search(r"Informative tasks, decided on validation.*?: (.*?)\. The comparisons", committed).group(1)
    informative = [t.split(":")[0] for t in verdicts.split(", ") if t.endswith("yes")]
    if not informative:
        assert "No task is informative at these sizes" in committed
        return
    table = committed.split("### MNTP against MLM, per adaptation seed")[1].split("Rule, fixed before the run")[0]
    for task in informative:
        seeds = re.findall(rf"\| mntp-s(\d) − mlm-s\1 \| {re.escape(task)} \| \1 \| (\d+) \|", table)
        assert sorted(s for s, _ in seeds) == ["1", "2", "3"], (task, table)
        assert all(int(n) >= 500 for _, n in seeds)  # whole test sets (573, 1,068), not the first design's 64
        assert re.search(rf"- \*\*{re.escape(task)}\*\*: ", committed)

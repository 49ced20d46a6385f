"""Issue 55, item 0: a recipe on your own data, end to end, as a new user runs it. Their own corpus (small Python
source documents), their own BPE tokenizer (tools/train_tokenizer.py), two datasets (tools/preprocess_data.py, each
with its sidecar naming the tokenizer) and a three-phase --config recipe whose phases name their data: no run-level
--data-path, no --tokenizer-model, with --split. The run trains on their data alone (nothing of the bundled corpus
is read or tokenized), validates on the held-out documents of the phases' own data (named in the log and in every
validation record), and its export's model card states the tokens, data and phases the log shows."""

import json
import random
import re

import pytest
import yaml
from helpers import TINY_SHAPE, tool_main

from megamlm.cli import main
from megamlm.training.metrics_file import read_metrics

NAMES = ("alpha", "beta", "gamma", "delta", "parse", "load", "save", "merge", "split", "count")


def python_document(i: int, rng: random.Random) -> str:
    a, b = rng.choice(NAMES), rng.choice(NAMES)
    return (f"def {a}_{i}(x, y):\n    \"\"\"Return the {a} of x and y.\"\"\"\n    total = 0\n"
            f"    for item in range(x):\n        total += item * y + {i}\n    return total\n\n\n"
            f"class {b.title()}{i}:\n    def __init__(self):\n        self.value = {i}\n\n"
            f"    def run(self):\n        return {a}_{i}(self.value, {i % 7})\n")


@pytest.fixture(scope="module")
def own_data(tmp_path_factory):
    """(folder, tokenizer file, prefix of dataset A, of dataset B): the user's corpus, tokenizer and data."""
    folder, rng = tmp_path_factory.mktemp("own"), random.Random(0)
    for name, numbers in (("code_a", range(0, 60)), ("code_b", range(60, 120))):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"content": python_document(i, rng)}) + "\n"
                                                      for i in numbers))
    tokenizer = folder / "tok" / "tokenizer.json"
    assert tool_main("train_tokenizer")(["--input", str(folder / "code_a.jsonl"), str(folder / "code_b.jsonl"),
                                         "--output", str(tokenizer), "--vocab-size", "400",
                                         "--json-keys", "content"]) == 0
    for name in ("code_a", "code_b"):
        assert tool_main("preprocess_data")(["--input", str(folder / f"{name}.jsonl"), "--json-keys", "content",
                                             "--output-prefix", str(folder / "data" / name), "--tokenizer-model",
                                             str(tokenizer), "--append-eod", "--no-progress"]) == 0
    a, b = (str(folder / "data" / f"{name}_content_document") for name in ("code_a", "code_b"))
    return folder, str(tokenizer), a, b


def recipe(folder, a, b, phase3=None):
    phases = [{"steps": 4, "seq_length": 16, "data_path": [a]},
              {"steps": 4, "seq_length": 32, "data_path": ["0.5", a, "0.5", b], "mask_ratio": 0.2},
              {"data_path": [b], "lr_decay": True, **(phase3 or {})}]
    path = folder / f"recipe{len(list(folder.glob('recipe*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump({"phases": phases}))
    return str(path)


RUN = [*TINY_SHAPE, "--seq-length", "32", "--global-batch-size", "4", "--micro-batch-size", "4",
       "--train-iters", "12", "--split", "80,20,0", "--eval-interval", "4", "--eval-iters", "1", "--log-interval", "2",
       "--lr-warmup-iters", "2"]


@pytest.fixture(scope="module")
def trained(own_data, tmp_path_factory):
    folder, tokenizer, a, b = own_data
    out = tmp_path_factory.mktemp("run")
    cache = out / "cache"
    import contextlib
    import io

    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        status = main([*RUN, "--config", recipe(folder, a, b), "--save", str(out / "ckpt"),
                       "--data-cache-path", str(cache)])
    return status, log.getvalue(), out


def test_the_run_trains_on_its_own_data_and_tokenizer_alone(own_data, trained):
    _, tokenizer, a, b = own_data
    status, log, out = trained
    assert status == 0, log
    assert f"the tokenizer that made {a}" in log, log
    assert f"tokenizer {tokenizer}" in log, log
    # Nothing of the bundled corpus was tokenized into the cache nor named anywhere.
    assert "austen" not in log.lower(), log
    assert not [p for p in (out / "cache").rglob("*") if "austen" in p.name.lower()]
    assert "austen" not in (out / "ckpt" / "run_record.json").read_text().lower()


def test_validation_holds_out_the_phases_own_data_and_names_it(own_data, trained):
    _, _, a, b = own_data
    status, log, out = trained
    assert status == 0, log
    records = read_metrics(out / "ckpt", kind="validation")
    assert [r["step"] for r in records] == [4, 8, 12]
    named = [r["validation_data"] for r in records]
    assert all(named) and a in named[0] and b in named[2] and "--split" in named[0], named
    assert f"held-out samples of {named[0]}" in log, log


def test_the_record_and_metrics_state_the_recipe_as_it_ran(own_data, trained):
    _, _, a, b = own_data
    status, log, out = trained
    record = json.loads((out / "ckpt" / "run_record.json").read_text())
    assert [p["tokens"] for p in record["recipe"]] == [4 * 4 * 16, 4 * 4 * 32, 4 * 4 * 32]
    assert [p["data_path"] for p in record["recipe"]] == [[a], ["0.5", a, "0.5", b], [b]]
    train = read_metrics(out / "ckpt", kind="train")
    assert train[-1]["tokens"] == 4 * 4 * (16 + 32 + 32)
    # Each record names the phase (from 1, as the log) that trained its step.
    assert [(r["step"], r["phase"]) for r in train] == [(2, 1), (4, 1), (6, 2), (8, 2), (10, 3), (12, 3)]
    assert [r["phase"] for r in read_metrics(out / "ckpt", kind="validation")] == [1, 2, 3]


def test_the_model_card_states_tokens_data_and_phases_as_the_log_does(own_data, trained, tmp_path):
    _, _, a, b = own_data
    status, log, out = trained
    assert status == 0, log
    assert tool_main("convert_to_hf")(["--input", str(out / "ckpt"), "--output", str(tmp_path / "hf")]) == 0
    card = (tmp_path / "hf" / "README.md").read_text()
    tokens = 4 * 4 * (16 + 32 + 32)
    assert f"Tokens seen: {tokens:,}" in card, card
    assert "austen" not in card.lower() and a in card and b in card, card
    for number in (1, 2, 3):
        assert f"phase {number}" in card.lower(), card
    assert "seq 16" in card or "16 tokens" in card, card


def test_dry_run_and_launch_agree_on_the_phases_tokenizer(own_data, trained, capsys):
    folder, tokenizer, a, b = own_data
    capsys.readouterr()
    assert main([*RUN, "--config", recipe(folder, a, b), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"--tokenizer-model {tokenizer}: the tokenizer that made {a}" in out, out
    vocab = re.search(r"vocab \d+", out).group()
    assert vocab != "vocab 8192" and vocab in re.search(r"model: .*", trained[1]).group(), (out, trained[1])


def test_phases_made_by_other_tokenizers_are_one_line(own_data, tmp_path, capsys):
    folder, _, a, b = own_data
    other = tmp_path / "other.json"
    tool_main("train_tokenizer")(["--input", str(folder / "code_b.jsonl"), "--output", str(other),
                                  "--vocab-size", "300", "--json-keys", "content"])
    assert tool_main("preprocess_data")(["--input", str(folder / "code_b.jsonl"), "--json-keys", "content",
                                         "--output-prefix", str(tmp_path / "c"), "--tokenizer-model", str(other),
                                         "--no-progress"]) == 0
    c = str(tmp_path / "c_content_document")
    capsys.readouterr()
    for launch in ([], ["--dry-run"]):
        assert main([*RUN, "--config", recipe(folder, a, b, {"data_path": [c]}), "--save", str(tmp_path / "s"),
                     *launch]) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "phase 3" in err and "phase 1" in err and "--tokenizer-model" in err, err
        assert not (tmp_path / "s").exists()


def test_the_data_tools_share_the_json_keys_flag(own_data, tmp_path, capsys):
    """tools/train_tokenizer.py --json-keys, as tools/preprocess_data.py names it; --json-key, its old name, still
    works; a field no record has is one line, exit 2, nothing written."""
    folder = own_data[0]
    train = tool_main("train_tokenizer")
    common = ["--input", str(folder / "code_a.jsonl"), "--vocab-size", "300"]
    assert train([*common, "--output", str(tmp_path / "new.json"), "--json-keys", "content"]) == 0
    assert train([*common, "--output", str(tmp_path / "old.json"), "--json-key", "content"]) == 0
    assert (tmp_path / "new.json").read_bytes() == (tmp_path / "old.json").read_bytes()
    capsys.readouterr()
    status = train([*common, "--output", str(tmp_path / "none.json"), "--json-keys", "text"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "--json-keys" in err, err
    assert not list(tmp_path.glob("none.json*"))


def test_the_plots_mark_each_phase_boundary_with_what_changes(trained, tmp_path):
    from megamlm.training.run_curves import load_run, plot_runs

    status, log, out = trained
    assert load_run(out / "ckpt").boundaries == ((4, "length 16->32, data, mask 0.4->0.2"), (8, "data, decay"))
    pytest.importorskip("matplotlib")
    written = plot_runs([out / "ckpt"], tmp_path / "fig")
    assert [p.name for p in written][-1] == "training_loss.png" and written[-1].stat().st_size > 10_000


def test_a_phase_tokenizer_that_is_not_here_is_one_line_in_the_dry_run_and_the_launch(own_data, tmp_path, capsys):
    import shutil

    folder, _, a, b = own_data
    for suffix in (".bin", ".idx", ".megamlm.json"):
        shutil.copy(a + suffix, tmp_path / f"moved{suffix}")
    sidecar = json.loads((tmp_path / "moved.megamlm.json").read_text())
    sidecar["tokenizer"]["path"] = str(tmp_path / "gone" / "tokenizer.json")
    (tmp_path / "moved.megamlm.json").write_text(json.dumps(sidecar))
    moved = str(tmp_path / "moved")
    capsys.readouterr()
    for launch in (["--dry-run"], ["--save", str(tmp_path / "s")]):
        assert main([*RUN, "--config", recipe(folder, moved, moved), *launch]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "phase 1's data" in err and "is not here" in err, err
    assert not (tmp_path / "s").exists()

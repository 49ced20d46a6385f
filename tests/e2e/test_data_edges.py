"""Datasets at the edges: no output replaced without --force, no mix of tokenizers, no damaged cache reused.

Each refusal is one line on stderr with exit code 2, and leaves every file as it was (checksums before/after).
"""

import json
from pathlib import Path

import pytest
from helpers import expect_one_line, tool_main
from helpers import tree_digest as snapshot

from megamlm.cli import main
from megamlm.data.embedded import TOKENIZER_FILE

SMALL = ["--num-layers", "1", "--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads", "2",
         "--num-query-groups", "2", "--seq-length", "32", "--global-batch-size", "4", "--micro-batch-size", "2",
         "--log-interval", "1"]


def word_tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<|bos|>", "<|eos|>", "<|pad|>", "<|mask|>", "the", "a", "of"]
    small = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="the"))
    small.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    small.save(str(path))
    return path


def preprocess(capsys, corpus: Path, prefix: Path, tokenizer=TOKENIZER_FILE, *extra) -> int:
    status = tool_main("preprocess_data")(["--input", str(corpus), "--output-prefix", str(prefix), "--tokenizer-model",
                                           str(tokenizer), "--append-eod", "--no-progress", *map(str, extra)])
    if status == 0:
        capsys.readouterr()
    return status


def corpus(tmp_path: Path, name: str, text: str, lines: int = 40) -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps({"text": f"{text} {i}"}) + "\n" for i in range(lines + 1)))
    return path


def test_preprocess_refuses_an_existing_dataset_without_force_and_replaces_it_with(tmp_path, capsys):
    out = tmp_path / "out"
    assert preprocess(capsys, corpus(tmp_path, "a.jsonl", "the first corpus"), out / "c") == 0
    before = snapshot(out)
    assert set(before) == {"c_text_document.bin", "c_text_document.idx", "c_text_document.megamlm.json"}
    other = corpus(tmp_path, "b.jsonl", "another corpus altogether", lines=60)
    expect_one_line(capsys, preprocess(capsys, other, out / "c"), f"output {out / 'c_text_document.bin'} already "
                    "exists", "--force")
    assert snapshot(out) == before
    assert preprocess(capsys, other, out / "c", TOKENIZER_FILE, "--force") == 0
    after = snapshot(out)
    assert set(after) == set(before) and all(after[name] != before[name] for name in before)
    assert not list(out.glob("*.tmp*"))


def test_preprocess_with_force_leaves_no_shard_of_an_earlier_run_behind(tmp_path, capsys):
    out = tmp_path / "out"
    text = corpus(tmp_path, "a.jsonl", "the first corpus", lines=30)
    assert preprocess(capsys, text, out / "c", TOKENIZER_FILE, "--shard-documents", "10") == 0
    shards = sorted(p.name for p in out.glob("*.bin"))
    assert len(shards) == 4
    before = snapshot(out)
    expect_one_line(capsys, preprocess(capsys, text, out / "c", TOKENIZER_FILE, "--shard-documents", "20"),
                    "already exists", "--force")
    assert snapshot(out) == before
    assert preprocess(capsys, text, out / "c", TOKENIZER_FILE, "--shard-documents", "20", "--force") == 0
    assert sorted(p.name for p in out.glob("*.bin")) == shards[:2]
    assert len(list(out.glob("*.megamlm.json"))) == 2 and len(list(out.glob("*.idx"))) == 2


def test_merge_refuses_an_existing_output_without_force(tmp_path, capsys):
    out = tmp_path / "out"
    assert preprocess(capsys, corpus(tmp_path, "a.jsonl", "the first corpus"), out / "a") == 0
    assert preprocess(capsys, corpus(tmp_path, "b.jsonl", "the second corpus"), out / "b") == 0
    merge = tool_main("merge_datasets")
    inputs = ["--input", str(out / "a_text_document"), str(out / "b_text_document")]
    assert merge([*inputs, "--output-prefix", str(tmp_path / "m" / "ab")]) == 0
    capsys.readouterr()
    before = snapshot(tmp_path)
    expect_one_line(capsys, merge([*inputs[:2], str(out / "a_text_document"), "--output-prefix",
                                   str(tmp_path / "m" / "ab")]), f"output {tmp_path / 'm' / 'ab.bin'} already exists",
                    "--force")
    assert snapshot(tmp_path) == before
    assert merge([*inputs[:2], str(out / "a_text_document"), "--output-prefix", str(tmp_path / "m" / "ab"),
                  "--force"]) == 0
    assert snapshot(tmp_path)["m/ab.bin"] != before["m/ab.bin"]
    record = json.loads((tmp_path / "m" / "ab.megamlm.json").read_text())
    assert record["settings"]["inputs"] == ["a_text_document", "a_text_document"]


def test_merge_refuses_datasets_of_different_tokenizers(tmp_path, capsys):
    out = tmp_path / "out"
    small = word_tokenizer(tmp_path / "small.json")
    assert preprocess(capsys, corpus(tmp_path, "a.jsonl", "the a of"), out / "a") == 0
    assert preprocess(capsys, corpus(tmp_path, "b.jsonl", "the a of"), out / "b", small) == 0
    before = snapshot(tmp_path)
    status = tool_main("merge_datasets")(["--input", str(out / "a_text_document"), str(out / "b_text_document"),
                                          "--output-prefix", str(tmp_path / "m" / "ab")])
    expect_one_line(capsys, status, f"{out / 'b_text_document'} by {small} (7 ids", "cannot be combined")
    assert snapshot(tmp_path) == before and not (tmp_path / "m").exists()


def test_validation_data_of_another_tokenizer_is_refused_like_training_data(tmp_path, capsys, cache_dir):
    small = word_tokenizer(tmp_path / "small.json")
    (tmp_path / "c.jsonl").write_text('{"text": "the a of the a"}\n' * 50)
    assert preprocess(capsys, tmp_path / "c.jsonl", tmp_path / "c", small) == 0
    before = snapshot(tmp_path)
    expect_one_line(capsys, main([*SMALL, "--train-iters", "2", "--valid-data-path", str(tmp_path / "c_text_document"),
                                  "--save", str(tmp_path / "ck")]),
                    f"{tmp_path / 'c_text_document'} was tokenized by {small} (7 ids")
    assert snapshot(tmp_path) == before


# ---- the cached sample index is verified when it is read ------------------------------------------------------

import numpy as np  # noqa: E402

from megamlm.data.index_cache import checksum  # noqa: E402


def zero_shuffle(cache: Path) -> list[Path]:
    """Every cached shuffle index replaced by zeros of its shape and dtype (a valid .npy, the wrong order)."""
    files = sorted(cache.rglob("index-*-shuffle_index.npy"))
    for path in files:
        array = np.load(path)
        np.save(path, np.zeros_like(array))
    return files


def out_of_range_with_its_checksum(cache: Path) -> list[Path]:
    """Shuffle entries past the end, with the description's checksum updated: only the structure check sees it."""
    files = sorted(cache.rglob("index-*-shuffle_index.npy"))
    for path in files:
        array = np.load(path)
        array[0] = len(array) + 5
        np.save(path, array)
        description = path.with_name(path.name.replace("shuffle_index.npy", "description.json"))
        record = json.loads(description.read_text())
        record["arrays"]["shuffle_index"]["crc32"] = checksum(array)
        description.write_text(json.dumps(record))
    return files


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("damage,reason", [(zero_shuffle, "does not match its checksum"),
                                           (out_of_range_with_its_checksum, "entries out of range")])
def test_a_damaged_cached_index_is_rebuilt_with_a_warning_and_trains_the_same_samples(tmp_path, tiny, capsys, damage,
                                                                                      reason):
    cache = tmp_path / "cache"
    reference = tiny("--train-iters", "4", "--data-cache-path", cache)
    assert damage(cache)
    capsys.readouterr()
    again = tiny("--train-iters", "4", "--data-cache-path", cache)
    out = capsys.readouterr().out
    assert "warning: index cache entry" in out and reason in out and "rebuilding it" in out, out
    assert again.losses == reference.losses and again.sample_ids == reference.sample_ids
    capsys.readouterr()
    tiny("--train-iters", "4", "--data-cache-path", cache)
    assert "warning: index cache entry" not in capsys.readouterr().out  # the rebuilt entry is whole

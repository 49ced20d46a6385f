"""tools/preprocess_data.py (inputs, workers, shards), tools/merge_datasets.py and tools/inspect_data.py."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import load_tool as tool
from helpers import write_dataset

from megamlm.data import IndexedDataset, StreamSpec, build_train_dataset
from megamlm.data.embedded import TOKENIZER_FILE


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    words = "the of and to a in that was her not she be it had as for with his you".split()
    records = [{"text": " ".join(rng.choice(words, rng.integers(0, 400))), "id": i} for i in range(600)]
    plain = folder / "c.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder, records


def run_preprocess(inputs, prefix, *extra):
    args = ["--input", *map(str, inputs), "--output-prefix", str(prefix), "--tokenizer-type", "HuggingFaceTokenizer",
            "--tokenizer-model", str(TOKENIZER_FILE), "--append-eod", "--no-progress", *extra]
    assert tool("preprocess_data").main(args) == 0


def read_all(prefix):
    ds = IndexedDataset(prefix)
    return [ds[i].tolist() for i in range(len(ds))], ds.document_indices.tolist()


def test_input_formats_and_workers_give_identical_files(corpus, tmp_path, capsys):
    folder, records = corpus
    run_preprocess([folder / "c.jsonl"], tmp_path / "plain", "--workers", "1")
    assert "600 documents" in capsys.readouterr().out  # the summary line
    expected = [(tmp_path / f"plain_text_document{s}").read_bytes() for s in (".bin", ".idx")]

    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write((folder / "c.jsonl").read_text())
    zstandard = pytest.importorskip("zstandard")
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress((folder / "c.jsonl").read_bytes()))
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(records), tmp_path / "c.parquet", row_group_size=100)
    for name, source, workers in [("gz", "c.jsonl.gz", "2"), ("zst", "c.jsonl.zst", "1"), ("pq", "c.parquet", "2")]:
        run_preprocess([tmp_path / source], tmp_path / name, "--workers", workers)
        got = [(tmp_path / f"{name}_text_document{s}").read_bytes() for s in (".bin", ".idx")]
        assert got == expected, name


def test_shards_then_merge_equal_one_file(corpus, tmp_path):
    folder, _ = corpus
    run_preprocess([folder / "c.jsonl"], tmp_path / "one")
    run_preprocess([folder / "c.jsonl"], tmp_path / "shards" / "c", "--shard-documents", "250", "--workers", "2")
    shard_prefixes = sorted(str(p.with_suffix("")) for p in (tmp_path / "shards").glob("*.idx"))
    assert [Path(p).name for p in shard_prefixes] == [f"c_{i:05d}_text_document" for i in range(3)]
    assert [IndexedDataset(p).num_documents for p in shard_prefixes] == [250, 250, 100]
    # shards train like the single file, without merging
    whole = build_train_dataset(StreamSpec([str(tmp_path / "one_text_document")], 64, 30, seed=4))
    sharded = build_train_dataset(StreamSpec(shard_prefixes, 64, 30, seed=4))
    assert all(np.array_equal(whole[k], sharded[k]) for k in range(30))
    # and merging gives the single file's bytes
    merge = tool("merge_datasets")
    assert merge.main(["--input", str(tmp_path / "shards"), "--output-prefix", str(tmp_path / "merged")]) == 0
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"merged{suffix}").read_bytes() == (tmp_path / f"one_text_document{suffix}").read_bytes()
    # each shard's sidecar names the tokenizer, and the merge of shards made by one tokenizer keeps it
    one = json.loads((tmp_path / "one_text_document.megamlm.json").read_text())
    merged = json.loads((tmp_path / "merged.megamlm.json").read_text())
    assert merged["tokenizer"] == one["tokenizer"] and (merged["documents"], merged["tokens"]) == (
        one["documents"], one["tokens"])
    assert one["tokenizer"]["vocab_size"] == 8192 and len(one["tokenizer"]["fingerprint"]) == 32


def test_merge_refuses_mixed_dtypes_and_overwriting_an_input(tmp_path, capsys):
    for name, dtype in (("a", np.uint16), ("b", np.int32)):
        write_dataset(tmp_path / name, [[1, 2]], dtype)
    merge = tool("merge_datasets")
    assert merge.main(["--input", str(tmp_path / "a"), str(tmp_path / "b"),
                       "--output-prefix", str(tmp_path / "m")]) == 2
    assert "different token dtypes" in capsys.readouterr().err
    assert merge.main(["--input", str(tmp_path / "a"), "--output-prefix", str(tmp_path / "a")]) == 2
    assert "is one of the inputs" in capsys.readouterr().err
    assert not (tmp_path / "m.bin").exists()


def test_inspect(corpus, tmp_path, capsys):
    folder, _ = corpus
    run_preprocess([folder / "c.jsonl"], tmp_path / "c")
    capsys.readouterr()
    prefix = str(tmp_path / "c_text_document")
    inspect = tool("inspect_data")
    assert inspect.main(["stats", prefix, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    ds = IndexedDataset(prefix)
    assert stats["tokens"] == ds.num_tokens and stats["documents"] == 600
    assert stats["empty_documents"] == int(np.count_nonzero(np.diff(ds.document_indices) == 0)) > 0
    run = ["--data-path", prefix, "--seq-length", "32", "--num-samples", "50", "--seed", "9"]
    assert inspect.main(["sample", *run, "--index", "7", "--tokenizer", str(TOKENIZER_FILE)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sample 7: 32 tokens") and "text: " in out
    first = build_train_dataset(StreamSpec([prefix], 32, 50, seed=9))
    assert str(first[7][:16].tolist()) in out
    assert inspect.main(["digest", *run, "--count", "50"]) == 0
    digest_a = capsys.readouterr().out
    assert inspect.main(["digest", *run[:-1], "10", "--count", "50"]) == 0
    assert capsys.readouterr().out != digest_a  # another seed, another order
    assert inspect.main(["sample", *run, "--index", "50"]) == 2
    assert "outside the run's 50 samples" in capsys.readouterr().err
    # the run's length does not change its samples: without --num-samples, or a longer run's
    no_length = ["--data-path", prefix, "--seq-length", "32", "--seed", "9"]
    for args in (no_length, [*no_length, "--num-samples", "100000"]):
        assert inspect.main(["digest", *args, "--count", "50"]) == 0
        assert capsys.readouterr().out == digest_a
    assert inspect.main(["sample", *no_length, "--index", "7", "5000"]) == 0
    out = capsys.readouterr().out
    assert str(first[7][:16].tolist()) in out and "sample 5000: 32 tokens" in out


def test_train_tokenizer(corpus, tmp_path):
    from megamlm.data import load_tokenizer

    folder, records = corpus
    train = tool("train_tokenizer")
    train.main(["--input", str(folder / "c.jsonl"), "--output", str(tmp_path / "tok.json"), "--vocab-size", "300"])
    tok = load_tokenizer(tmp_path / "tok.json")
    assert tok.vocab_size == 300
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id) == (0, 1, 2, 3)
    text = records[1]["text"] or "the end"
    assert tok.decode(tok.encode(text)) == text
    assert [p.name for p in tmp_path.iterdir()] == ["tok.json"]  # written under a temporary name, then renamed
    with pytest.raises(SystemExit):
        train.main(["--input", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "x.json")])


def test_index_build_benchmark_runs_at_ci_size(tmp_path, capsys):
    bench = tool("index_build", folder="benchmarks")
    out = tmp_path / "figures.json"
    assert bench.main(["--tokens", "2e6", "--seq-length", "512", "--epochs", "2", "--json", "--output", str(out)]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures == json.loads(out.read_text())
    assert figures["epochs"] == 2 and figures["samples_per_epoch"] == figures["tokens"] // 512
    assert figures["blend_samples"] == 2 * figures["samples_per_epoch"]
    for builder in figures["builders"].values():
        assert builder["epoch_index_s"] >= 0 and builder["epoch_index_peak_bytes"] > 0

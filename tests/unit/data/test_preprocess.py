import gzip
import json

import numpy as np
import pytest

from megamlm.data import IndexedDataset, load_tokenizer
from megamlm.data.embedded import TOKENIZER_FILE
from megamlm.data.indexed import DataError
from megamlm.data.preprocess import PreprocessSettings, preprocess

RECORDS = [
    {"text": "It is a truth universally acknowledged.", "id": 0},
    {"text": "", "id": 1},
    {"text": ["First sentence.", "", "Second sentence."], "id": 2},
    {"text": "Emma Woodhouse, handsome, clever, and rich " * 200, "id": 3},
]


def write_jsonl(path, records):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    return str(path)


def settings(tmp_path, inputs, **kw):
    kw.setdefault("progress", False)
    return PreprocessSettings(inputs=inputs, output_prefix=str(tmp_path / "out" / "c"),
                              tokenizer_model=str(TOKENIZER_FILE), **kw)


def test_documents_are_encoded_like_megatron(tmp_path):
    source = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    summary = preprocess(settings(tmp_path, [source], append_eod=True))
    tok = load_tokenizer(TOKENIZER_FILE)
    ds = IndexedDataset(tmp_path / "out" / "c_text_document")
    assert summary.documents == 4 and summary.empty_documents == 1
    assert summary.tokens == ds.num_tokens
    assert ds.dtype == np.uint16
    # document 1 is empty: no sequence; document 2 holds one sequence per non-empty sentence
    assert list(ds.document_indices) == [0, 1, 1, 3, 4]
    assert ds[0].tolist() == tok.encode(RECORDS[0]["text"]) + [tok.eos_id]
    assert ds[1].tolist() == tok.encode("First sentence.")
    assert ds[2].tolist() == tok.encode("Second sentence.") + [tok.eos_id]
    assert ds[3].tolist() == tok.encode(RECORDS[3]["text"]) + [tok.eos_id]


def test_bos_and_no_eod(tmp_path):
    source = write_jsonl(tmp_path / "c.jsonl", RECORDS[:1])
    preprocess(settings(tmp_path, [source], prepend_bos=True))
    tok = load_tokenizer(TOKENIZER_FILE)
    first = IndexedDataset(tmp_path / "out" / "c_text_document")[0].tolist()
    assert first == [tok.bos_id] + tok.encode(RECORDS[0]["text"])


def test_bad_input_is_reported_before_work(tmp_path):
    good = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    with pytest.raises(DataError, match="not found"):
        preprocess(settings(tmp_path, [str(tmp_path / "missing.jsonl")]))
    with pytest.raises(DataError, match="--tokenizer-type GPT2BPETokenizer is not supported; use HuggingFaceTokenizer"):
        preprocess(settings(tmp_path, [good], tokenizer_type="GPT2BPETokenizer"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": broken\n')
    with pytest.raises(DataError, match=r"bad\.jsonl record at line 2: not valid JSON"):
        preprocess(settings(tmp_path, [str(bad)]))
    with pytest.raises(DataError, match="no 'body' field"):
        preprocess(settings(tmp_path, [good], json_keys=["body"]))
    assert not list((tmp_path / "out").glob("*.bin"))  # failed runs leave nothing behind


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory):
    spm = pytest.importorskip("sentencepiece")
    import io

    model = io.BytesIO()
    texts = [r["text"] if isinstance(r["text"], str) else " ".join(r["text"]) for r in RECORDS] * 20
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=60, minloglevel=2, hard_vocab_limit=False
    )
    path = tmp_path_factory.mktemp("sp") / "sp.model"
    path.write_bytes(model.getvalue())
    return str(path)


@pytest.mark.parametrize("tokenizer_type", ["GPTSentencePieceTokenizer", "Llama2Tokenizer"])
def test_sentencepiece_types_encode_like_megatron(tmp_path, sentencepiece_model, tokenizer_type):
    import sentencepiece

    source = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    preprocess(PreprocessSettings(
        inputs=[source], output_prefix=str(tmp_path / "c"), tokenizer_model=sentencepiece_model,
        tokenizer_type=tokenizer_type, append_eod=True, progress=False,
    ))
    sp = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
    bos = [sp.bos_id()] if tokenizer_type == "Llama2Tokenizer" else []  # Megatron's Llama2Tokenizer adds bos
    expected = []
    for record in RECORDS:
        sentences = record["text"] if isinstance(record["text"], list) else [record["text"]]
        ids = [bos + sp.encode_as_ids(t) for t in sentences]
        ids = [x for x in ids if x]
        if ids:
            ids[-1] = ids[-1] + [sp.eos_id()]
        expected.extend(ids)
    ds = IndexedDataset(tmp_path / "c_text_document")
    assert [ds[i].tolist() for i in range(len(ds))] == expected


def test_unsupported_megatron_types_name_the_alternative(tmp_path):
    source = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    with pytest.raises(DataError, match="TikTokenizer is not supported; use TiktokenBPE"):
        preprocess(settings(tmp_path, [source], tokenizer_type="TikTokenizer"))


def test_the_progress_bar_and_the_summary_give_one_rate(tmp_path, capsys):
    """Issue 23, item 6: tok/s has one definition (tokens over the time since the start); the bar closes showing
    the rate the summary line gives."""
    import re

    path = tmp_path / "in.jsonl"
    write_jsonl(path, RECORDS * 50)
    summary = preprocess(settings(tmp_path, [str(path)], progress=True, log_interval=10))
    bar_rates = re.findall(r"([\d,]+) tok/s", capsys.readouterr().err)
    assert bar_rates, "the bar shows its rate"
    assert bar_rates[-1] == re.search(r"([\d,]+) tok/s", summary.line()).group(1)
    assert summary.line().endswith(summary.rates())

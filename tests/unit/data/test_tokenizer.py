import base64
import io
import json

import pytest

from megamlm.data import DataError, load_tokenizer
from megamlm.data.embedded import TOKENIZER_FILE


def austen_paragraphs(path, count):
    with open(path) as f:
        return [json.loads(next(f))["text"] for _ in range(count)]


def test_llama3_ids(llama3_tokenizer):
    tok = llama3_tokenizer
    assert tok.kind == "huggingface"
    assert tok.vocab_size == 128256
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id) == (128000, 128001, 128001, 128002)
    assert tok.special_ids == list(range(128000, 128256))
    assert tok.encode("Hello world") == [9906, 1917]
    assert tok.decode([9906, 1917]) == "Hello world"
    assert tok.path.endswith("tokenizer.json")  # the folder was resolved to the file


def test_bundled_tokenizer():
    tok = load_tokenizer(TOKENIZER_FILE)
    assert tok.vocab_size == 8192
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id) == (0, 1, 2, 3)
    assert tok.special_ids == [0, 1, 2, 3]
    text = "It is a truth universally acknowledged, that a single man in possession of a good fortune"
    ids = tok.encode(text)
    assert 0 < len(ids) < len(text) / 2 and min(ids) > 3
    assert tok.decode(ids) == text
    assert tok.encode_batch([text, "Emma"]) == [ids, tok.encode("Emma")]


def bytes_to_unicode():
    """Byte-level BPE's byte -> printable character table."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def test_tiktoken_file_matches_huggingface(tmp_path, llama3_dir, llama3_tokenizer, austen_jsonl):
    """A tiktoken file made from Llama 3's vocabulary tokenizes like Llama 3's tokenizer.json."""
    vocab = json.loads((llama3_dir / "tokenizer.json").read_text())["model"]["vocab"]
    decode_char = {c: b for b, c in bytes_to_unicode().items()}
    lines = sorted((rank, bytes(decode_char[c] for c in token)) for token, rank in vocab.items())
    path = tmp_path / "tokenizer.model"
    path.write_bytes(b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in lines))
    tik = load_tokenizer(path)
    hf = llama3_tokenizer
    assert tik.kind == "tiktoken"
    assert tik.vocab_size == 128256
    assert (tik.bos_id, tik.eos_id, tik.pad_id, tik.mask_id) == (128000, 128001, 128001, 128002)
    assert tik.special_ids == hf.special_ids
    texts = austen_paragraphs(austen_jsonl, 100) + ["naïve café 12345 \n\n  spaces\ttab"]
    assert tik.encode_batch(texts) == hf.encode_batch(texts)
    assert tik.decode(tik.encode(texts[0])) == texts[0]


def test_sentencepiece_model(tmp_path, austen_jsonl):
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(austen_paragraphs(austen_jsonl, 300)),
        model_writer=model,
        vocab_size=400,
        control_symbols=["<mask>"],
        pad_id=3,
        minloglevel=2,
    )
    path = tmp_path / "sp.model"
    path.write_bytes(model.getvalue())
    tok = load_tokenizer(path)
    assert tok.kind == "sentencepiece"
    assert tok.vocab_size == 400
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 3)
    mask = tok.mask_id
    assert mask is not None and mask in tok.special_ids
    assert {0, 1, 2, 3} <= set(tok.special_ids)
    text = "she was delighted with the house."
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert not set(ids) & set(tok.special_ids) - {0}


def test_override_and_errors(tmp_path):
    tok = load_tokenizer(TOKENIZER_FILE, mask="<|pad|>")
    assert tok.mask_id == 2
    with pytest.raises(DataError, match="not in the vocabulary"):
        load_tokenizer(TOKENIZER_FILE, mask="[NOPE]")
    with pytest.raises(DataError, match="not found"):
        load_tokenizer(tmp_path / "missing.json")
    with pytest.raises(DataError, match="neither tokenizer.json"):
        load_tokenizer(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="could not read"):
        load_tokenizer(bad)
    with pytest.raises(DataError, match="unknown tokenizer kind"):
        load_tokenizer(TOKENIZER_FILE, kind="wordpiece")

"""Issue 23, item 7: --data-path with a sidecar naming an existing tokenizer needs no --tokenizer-model (it is
used and logged); an explicit different one is still refused."""

from __future__ import annotations

import json

from helpers import TINY

from megamlm.cli import main
from megamlm.config import parse_args
from megamlm.data.embedded import TOKENIZER_FILE
from megamlm.data.preprocess import PreprocessSettings, preprocess


def _data(tmp_path) -> str:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"It is a truth universally acknowledged, number {i}."}) + "\n"
                              for i in range(400)))
    preprocess(PreprocessSettings(inputs=[str(corpus)], output_prefix=str(tmp_path / "data" / "c"),
                                  tokenizer_model=str(TOKENIZER_FILE), append_eod=True, progress=False))
    return str(tmp_path / "data" / "c_text_document")


def _other_tokenizer(path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", "<mask>", "<pad>", "It", "is", "a"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return str(path)


def test_the_sidecars_tokenizer_is_used_and_logged(tmp_path, capsys):
    prefix = _data(tmp_path)
    capsys.readouterr()
    cfg = parse_args(["--data-path", prefix])
    assert cfg.data.tokenizer_model == str(TOKENIZER_FILE)
    assert f"--tokenizer-model {TOKENIZER_FILE}: the tokenizer that made {prefix}" in capsys.readouterr().out
    assert main([*TINY, "--data-path", prefix, "--train-iters", "5", "--seq-length", "16"]) == 0


def test_an_explicit_different_tokenizer_is_still_refused(tmp_path, capsys):
    prefix = _data(tmp_path)
    other = _other_tokenizer(tmp_path / "other.json")
    assert main([*TINY, "--data-path", prefix, "--tokenizer-model", other, "--train-iters", "5"]) == 2
    err = capsys.readouterr().err
    assert "was tokenized by" in err and len([line for line in err.splitlines() if line.startswith("error:")]) == 1


def test_a_missing_data_file_is_named_before_the_tokenizer(tmp_path, capsys):
    """Issue 31, item 3: without --tokenizer-model, a --data-path whose files are not there names the missing file
    (not the sidecar or the tokenizer it would need)."""
    prefix = _data(tmp_path)
    missing = tmp_path / "nowhere" / "corpus_text_document"
    for data_path in ([str(missing)], ["1", prefix, "1", str(missing)]):
        assert main([*TINY, "--data-path", *data_path, "--train-iters", "5"]) == 2
        err = capsys.readouterr().err
        assert f"dataset file {missing}.idx not found" in err, err
        assert "tokenizer" not in err.split("not found")[0] and len(err.strip().splitlines()) == 1, err

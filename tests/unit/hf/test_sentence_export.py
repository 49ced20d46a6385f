"""convert_to_hf.py --sentence-transformers: the bare encoder and sentence-transformers' files, for the EuroBERT
block and the ModernBERT block (preset modernbert-tiny): SentenceTransformer(path) and AutoModel load it with nothing
missing or unexpected (transformers' load report says nothing) and embed as the full export's base model does; a
Gemma 3 encoder's as Gemma3TextModel."""

import io
import json
import logging

import pytest
import torch
from decoder_families import QK_NORM_FAMILIES, build, word_ids
from helpers import expect_one_line, tool_main

from megamlm.eval.mteb_run import card_pooling, sentence_transformer
from megamlm.hf.errors import ConversionError
from megamlm.hf.export import export_checkpoint
from megamlm.hf.importer import import_hf
from megamlm.hf.sentence_export import SENTENCE_POOLING
from megamlm.model.config import PRESETS, ModelArgs

transformers = pytest.importorskip("transformers")
sentence_transformers = pytest.importorskip("sentence_transformers")

# The EuroBERT block is the hf tests' TINY (the kit fixture's: a test module imports no conftest, which one the suite
# reaches first under --import-mode=importlib depends on what else it collects).
BLOCKS = {"eurobert": None, "modernbert": ModelArgs(**{**PRESETS["modernbert-tiny"], "vocab_size": 8192,
                                                       "max_seq_length": 64})}
TEXTS = ["Elinor said that she would go", "a short one"]


@pytest.fixture(scope="module", params=sorted(BLOCKS))
def exports(request, tmp_path_factory, kit):
    """(full export, sentence-transformers export, the block's name) of one tiny checkpoint."""
    root = tmp_path_factory.mktemp(request.param)
    kit.write_checkpoint(root / "ckpt", kit.random_model(BLOCKS[request.param] or kit.TINY))
    full = export_checkpoint(root / "ckpt", root / "full", log=lambda *_: None)
    bare = export_checkpoint(root / "ckpt", root / "st", log=lambda *_: None, sentence_transformers=True)
    return full, bare, request.param


def _load_report(load) -> str:
    """What transformers logs while ``load()`` runs (its load report lists each missing or unexpected tensor)."""
    logger, seen = logging.getLogger("transformers"), io.StringIO()
    handler = logging.StreamHandler(seen)
    logger.addHandler(handler)
    try:
        load()
    finally:
        logger.removeHandler(handler)
    return seen.getvalue()


def test_loads_with_nothing_missing_or_unexpected(exports):
    full, bare, block = exports
    config = json.loads((bare / "config.json").read_text())
    assert config["architectures"] == [{"eurobert": "EuroBertModel", "modernbert": "ModernBertModel"}[block]]
    model, info = transformers.AutoModel.from_pretrained(str(bare), output_loading_info=True)
    assert not any(info.values()), info
    for load in (lambda: sentence_transformers.SentenceTransformer(str(bare), device="cpu"),
                 lambda: transformers.AutoModel.from_pretrained(str(bare))):
        logged = _load_report(load)
        assert "UNEXPECTED" not in logged and "MISSING" not in logged and "LOAD REPORT" not in logged, logged
    logged = _load_report(lambda: sentence_transformers.SentenceTransformer(str(full), device="cpu"))
    assert "UNEXPECTED" in logged  # the capture sees the report: the full export's MLM head is unexpected there


def test_evaluate_mteb_reads_the_folder_as_it_is(exports, tmp_path):
    """tools/evaluate.py --mteb given a --sentence-transformers export loads it whole (no encoder folder of its own)
    and embeds as the export does."""
    _, bare, _ = exports
    logged = _load_report(lambda: sentence_transformer(bare, tmp_path / "encoder"))
    assert "LOAD REPORT" not in logged and not (tmp_path / "encoder").exists()
    model = sentence_transformer(bare, tmp_path / "encoder")
    direct = sentence_transformers.SentenceTransformer(str(bare), device="cpu")
    assert torch.equal(model.encode(TEXTS, convert_to_tensor=True), direct.encode(TEXTS, convert_to_tensor=True))


def test_embeddings_equal_the_full_exports_base_model(exports):
    full, bare, _ = exports
    ours = sentence_transformers.SentenceTransformer(str(bare), device="cpu").encode(TEXTS, convert_to_tensor=True)
    theirs = sentence_transformers.SentenceTransformer(str(full), device="cpu").encode(TEXTS, convert_to_tensor=True)
    assert ours.shape[0] == 2 and torch.equal(ours, theirs)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(bare))
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    lm = transformers.AutoModelForMaskedLM.from_pretrained(str(full)).eval()
    with torch.no_grad():
        hidden = transformers.AutoModel.from_pretrained(str(bare)).eval()(**batch).last_hidden_state
        base = getattr(lm, lm.base_model_prefix)(**batch).last_hidden_state
    assert torch.equal(hidden, base)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    assert (ours - (hidden * mask).sum(1) / mask.sum(1)).abs().max() < 1e-5  # the card's mean pooling


def test_files_and_card_state_the_same_pooling(exports):
    _, bare, _ = exports
    pooling = json.loads((bare / "1_Pooling" / "config.json").read_text())
    assert pooling[f"pooling_mode_{SENTENCE_POOLING}_tokens"] and sum(v is True for v in pooling.values()) == 2
    assert card_pooling(bare) == SENTENCE_POOLING  # what tools/evaluate.py --mteb reads
    card = (bare / "README.md").read_text()
    assert "library_name: sentence-transformers" in card and "fill-mask" not in card


def test_the_flag_and_a_causal_export_refused_in_one_line_before_anything_is_written(tiny_checkpoint, tmp_path,
                                                                                     capsys):
    save_dir, _ = tiny_checkpoint
    convert = tool_main("convert_to_hf")
    assert convert(["--input", str(save_dir), "--output", str(tmp_path / "st"), "--sentence-transformers"]) == 0
    assert "EuroBertModel" in capsys.readouterr().out and (tmp_path / "st" / "modules.json").is_file()
    status = convert(["--input", str(save_dir), "--output", str(tmp_path / "out"), "--sentence-transformers",
                      "--arch", "llama"])
    expect_one_line(capsys, status, "--arch llama is a causal LM", "eurobert")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConversionError, match="--arch qwen2 is a causal LM"):
        export_checkpoint(save_dir, tmp_path / "out", arch="qwen2", sentence_transformers=True)


def test_a_gemma3_encoder_exports_its_bare_text_model(tmp_path):
    """A Gemma 3 model's encoder export (a bidirectional Gemma 3) as Gemma3TextModel: nothing missing or unexpected,
    the hidden states of the full export's base model."""
    family = QK_NORM_FAMILIES["gemma3"]
    build(family, tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "ckpt", log=lambda *_: None)
    full = export_checkpoint(tmp_path / "ckpt", tmp_path / "full", log=lambda *_: None)
    bare = export_checkpoint(tmp_path / "ckpt", tmp_path / "st", log=lambda *_: None, sentence_transformers=True)
    model, info = transformers.AutoModel.from_pretrained(str(bare), output_loading_info=True)
    assert type(model).__name__ == "Gemma3TextModel" and not any(info.values()), info
    assert "LOAD REPORT" not in _load_report(lambda: sentence_transformers.SentenceTransformer(str(bare),
                                                                                            device="cpu"))
    ids = word_ids(family, 1, 12, seed=1)
    with torch.no_grad():
        base = transformers.AutoModel.from_pretrained(str(full)).eval()(input_ids=ids).last_hidden_state
        assert torch.equal(model.eval()(input_ids=ids).last_hidden_state, base)

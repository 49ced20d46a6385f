"""Export: megamlm logits == transformers' logits, tokenizer and heads usable, bad input refused."""

import json

import pytest
import torch

from megamlm.hf.errors import ConversionError
from megamlm.hf.export import export_checkpoint

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def exported(tiny_checkpoint, tmp_path_factory):
    save_dir, model = tiny_checkpoint
    out = tmp_path_factory.mktemp("export") / "eurobert"
    export_checkpoint(save_dir, out, log=lambda *_: None)
    return out, model


def _quiet_load(cls, path, **kw):
    return cls.from_pretrained(str(path), dtype=torch.float32, **kw).eval()


def test_eurobert_logits_match_bidirectional(exported):
    out, model = exported
    hf = _quiet_load(transformers.AutoModelForMaskedLM, out)
    assert type(hf).__name__ == "EuroBertForMaskedLM"
    ids = torch.randint(0, model.args.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model.logits(model(ids, causal=False))
        theirs = hf(input_ids=ids).logits
    assert (ours - theirs).abs().max() < 1e-4
    # Sanity of the comparison itself: the causal pass is clearly different.
    with torch.no_grad():
        assert (model.logits(model(ids, causal=True)) - theirs).abs().max() > 1e-2


def test_eurobert_padding_mask_matches_unpadded_sequence(exported):
    out, model = exported
    hf = _quiet_load(transformers.AutoModelForMaskedLM, out)
    short = torch.randint(4, model.args.vocab_size, (1, 10), generator=torch.Generator().manual_seed(2))
    padded = torch.cat([short, torch.full((1, 6), 2)], dim=1)
    mask = torch.tensor([[1] * 10 + [0] * 6])
    with torch.no_grad():
        ours = model.logits(model(short, causal=False))
        theirs = hf(input_ids=padded, attention_mask=mask).logits[:, :10]
    assert (ours - theirs).abs().max() < 1e-4


def test_config_and_files(exported):
    out, model = exported
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "eurobert" and config["architectures"] == ["EuroBertForMaskedLM"]
    assert config["tie_word_embeddings"] is False
    assert (config["mask_token_id"], config["pad_token_id"], config["bos_token_id"],
            config["eos_token_id"]) == (3, 2, 0, 1)
    assert config["rope_parameters"]["rope_theta"] == model.args.rope_theta
    assert config["num_key_value_heads"] == model.args.num_query_groups
    card = (out / "README.md").read_text()
    for fact in ("CLM, then MLM", "Switch step: 2", "Steps: 7", "Tokens seen: 3,584 (56 samples x 64 tokens)",
                 "/data/austen_text_document"):
        assert fact in card
    assert not list(out.parent.glob(".*tmp*")), "temporary folder left behind"


def test_exported_files_are_readable_like_any_new_file(exported):
    import os

    out, _ = exported
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert "model.safetensors" in modes
    assert set(modes.values()) == {0o666 & ~umask}, modes  # 0644 under umask 022; safetensors alone wrote 0600


def test_fill_mask_pipeline_and_tokenizer(exported):
    out, _ = exported
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    assert (tokenizer.mask_token, tokenizer.mask_token_id, tokenizer.pad_token_id) == ("<|mask|>", 3, 2)
    fill = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out), device="cpu")
    predictions = fill("Elinor was the eldest <|mask|> of Mrs. Dashwood.", top_k=3)
    assert len(predictions) == 3 and all("token_str" in p for p in predictions)
    scores = [p["score"] for p in predictions]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1


@pytest.mark.parametrize("auto_class", ["AutoModelForSequenceClassification", "AutoModelForTokenClassification"])
def test_classification_heads_load_and_train_one_step(exported, auto_class):
    out, model = exported
    hf = getattr(transformers, auto_class).from_pretrained(str(out), num_labels=3, dtype=torch.float32)
    body = hf.model.embed_tokens.weight
    assert torch.equal(body, model.embed_tokens.weight)
    ids = torch.randint(4, 8192, (2, 12), generator=torch.Generator().manual_seed(3))
    labels = torch.tensor([0, 2]) if "Sequence" in auto_class else torch.randint(0, 3, (2, 12))
    optimizer = torch.optim.AdamW(hf.parameters(), lr=1e-2)
    hf.train()
    before = hf(input_ids=ids, labels=labels).loss
    before.backward()
    optimizer.step()
    optimizer.zero_grad()
    with torch.no_grad():
        after = hf(input_ids=ids, labels=labels).loss
    assert torch.isfinite(before) and after < before


def test_llama_export_matches_causal_logits_in_bf16_and_fp32(tiny_checkpoint, tmp_path):
    save_dir, model = tiny_checkpoint
    ids = torch.randint(0, model.args.vocab_size, (2, 20), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours = model.logits(model(ids, causal=True))
    export_checkpoint(save_dir, tmp_path / "fp32", arch="llama", log=lambda *_: None)
    hf = _quiet_load(transformers.AutoModelForCausalLM, tmp_path / "fp32")
    assert type(hf).__name__ == "LlamaForCausalLM"
    with torch.no_grad():
        assert (hf(input_ids=ids).logits - ours).abs().max() < 1e-4
    export_checkpoint(save_dir, tmp_path / "bf16", arch="llama", dtype="bf16", log=lambda *_: None)
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "bf16" / "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    assert torch.equal(weights["lm_head.weight"], model.lm_head.weight.detach().bfloat16())


# --- bad input: one clear error, nothing written ------------------------------------------------------


def test_existing_output_needs_force(tiny_checkpoint, tmp_path):
    save_dir, _ = tiny_checkpoint
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ConversionError, match="already exists; pass --force"):
        export_checkpoint(save_dir, out, log=lambda *_: None)
    assert (out / "keep.txt").read_text() == "mine"
    export_checkpoint(save_dir, out, force=True, log=lambda *_: None)
    assert (out / "model.safetensors").is_file() and not (out / "keep.txt").exists()


def test_unknown_arch_and_dtype(tiny_checkpoint, tmp_path):
    save_dir, _ = tiny_checkpoint
    with pytest.raises(ConversionError, match="'bert'.*eurobert, llama"):
        export_checkpoint(save_dir, tmp_path / "x", arch="bert")
    with pytest.raises(ConversionError, match="'fp16'.*fp32, bf16"):
        export_checkpoint(save_dir, tmp_path / "x", dtype="fp16")
    assert not (tmp_path / "x").exists()


def test_missing_checkpoint_and_tokenizer(tiny_checkpoint, tmp_path, kit):
    with pytest.raises(ConversionError.__mro__[1], match="does not exist"):
        export_checkpoint(tmp_path / "nowhere", tmp_path / "x")
    save_dir = tmp_path / "ckpt"
    gone = {"path": str(tmp_path / "gone" / "tokenizer.json"), **kit.AUSTEN_IDS}
    kit.write_checkpoint(save_dir, kit.random_model(), tokenizer=gone)
    with pytest.raises(ConversionError, match="gone/tokenizer.json"):
        export_checkpoint(save_dir, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    export_checkpoint(save_dir, tmp_path / "x", tokenizer=kit.AUSTEN_TOKENIZER, log=lambda *_: None)  # --tokenizer
    assert (tmp_path / "x" / "tokenizer.json").read_bytes() != b""


def test_config_weights_mismatch_names_the_tensor(tmp_path, kit):
    save_dir = tmp_path / "ckpt"
    wrong = {**kit.TINY.to_dict(), "ffn_hidden_size": 128}
    kit.write_checkpoint(save_dir, kit.random_model(), model_args=wrong)
    with pytest.raises(ConversionError, match=r"'layers\.0\.mlp\.gate_proj\.weight'.*\(160, 64\).*\(128, 64\)"):
        export_checkpoint(save_dir, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_tokenizer_larger_than_the_embedding(tmp_path, kit):
    small = kit.TINY.__class__(**{**kit.TINY.to_dict(), "vocab_size": 256})
    save_dir = tmp_path / "ckpt"
    kit.write_checkpoint(save_dir, kit.random_model(small))
    with pytest.raises(ConversionError, match="8192 ids but the checkpoint's embedding has 256 rows"):
        export_checkpoint(save_dir, tmp_path / "x", log=lambda *_: None)
    assert not (tmp_path / "x").exists()


def test_tokenizer_that_is_not_a_tokenizer_json(tmp_path, kit):
    spm = tmp_path / "tokenizer.model"
    spm.write_bytes(b"not json")
    save_dir = tmp_path / "ckpt"
    kit.write_checkpoint(save_dir, kit.random_model(), tokenizer={"path": str(spm), **kit.AUSTEN_IDS})
    with pytest.raises(ConversionError, match="not a Hugging Face tokenizer.json.*convert it to tokenizer.json"):
        export_checkpoint(save_dir, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_convert_to_hf_refuses_an_existing_output_in_one_line_and_leaves_it_byte_identical(tiny_checkpoint, tmp_path,
                                                                                         capsys):
    import hashlib

    from helpers import load_tool

    tool = load_tool("convert_to_hf")
    save_dir, _ = tiny_checkpoint
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    before = hashlib.sha256((out / "keep.txt").read_bytes()).hexdigest()
    capsys.readouterr()
    assert tool.main(["--input", str(save_dir), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "already exists; pass --force" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert hashlib.sha256((out / "keep.txt").read_bytes()).hexdigest() == before
    (tmp_path / "blocker").write_text("a file")  # an output it cannot write: one line naming the path
    assert tool.main(["--input", str(save_dir), "--output", str(tmp_path / "blocker" / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(tmp_path / "blocker") in err and err.count("\n") == 1, err

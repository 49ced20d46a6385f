"""Qwen3 and Gemma 3, each a tiny random model built by transformers (decoder_families.QK_NORM_FAMILIES; Gemma 3
with sliding and full layers and a window of 5 tokens, shorter than the 24-token test sequence): imported, the
causal loss equals transformers'; exported back to the family, the causal logits equal the source's; a Gemma 3
encoder exports as a native bidirectional Gemma 3 whose hidden states equal megamlm's bidirectional forward and
which loads in AutoModel and AutoModelForSequenceClassification; a Qwen3 encoder's EuroBERT export is refused.

(Training steps of these imports under TP=2, PP=2 and FSDP2: tests/distributed/test_decoder_family_layouts.py.)
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from decoder_families import QK_NORM_FAMILIES, build, word_ids
from helpers import expect_one_line, tool_main

from megamlm.hf.errors import ConversionError
from megamlm.hf.export import export_checkpoint
from megamlm.hf.importer import import_hf
from megamlm.hf.megamlm_checkpoint import load_model, read_record

transformers = pytest.importorskip("transformers")
QUIET = dict(log=lambda *_: None)


@pytest.fixture(scope="module", params=list(QK_NORM_FAMILIES))
def imported(request, tmp_path_factory):
    """(family, transformers model, root folder, megamlm model, record)."""
    family = QK_NORM_FAMILIES[request.param]
    root = tmp_path_factory.mktemp(family.name)
    hf = build(family, root / "hf")
    import_hf(root / "hf", root / "ckpt", **QUIET)
    record = read_record(root / "ckpt")
    return family, hf, root, load_model(record), record


def _causal_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


def test_import_matches_causal_loss_and_logits(imported):
    family, hf, _, model, record = imported
    ids = word_ids(family, 2, 24, seed=0)
    with torch.no_grad():
        ours = model.logits(model(ids, causal=True))
        theirs = hf(input_ids=ids, labels=ids)
    keep = [i for i in range(hf.config.vocab_size)
            if not (record.config["imported_from"]["mask_added"] and i == record.tokenizer["mask_id"])]
    assert (ours[..., keep] - theirs.logits[..., keep]).abs().max() < 1e-4
    if not family.mask_added:  # the whole vocabulary is the source's: the losses are the same number
        assert abs(_causal_loss(ours, ids) - theirs.loss) < 1e-5
    args = model.args
    assert args.qk_norm and args.tie_word_embeddings
    assert record.config["imported_from"]["mask_token"] == family.expected_mask
    if family.name == "gemma3":
        assert args.sublayer_output_norms and args.scale_embeddings and args.mlp_activation == "geglu"
        assert args.sliding_window == 5 and args.layer_types == "sliding,sliding,full,sliding"
        assert args.local_rope_theta == 10000.0 and args.rope_theta == 1e6 and args.rope_scaling.rope_type == "linear"
        assert args.query_pre_attn_scalar == 24
        # (1 + weight) became an ordinary RMSNorm weight, exactly
        hf_norm = hf.model.layers[0].pre_feedforward_layernorm.weight
        assert torch.equal(model.layers["0"].post_attention_layernorm.weight, hf_norm.float() + 1)


def _changed(model, ids, edit) -> float:
    with torch.no_grad():
        reference = model.logits(model(ids, causal=True))
        undo = edit(model)
        changed = model.logits(model(ids, causal=True))
        undo()
    return float((changed - reference).abs().max())


def _swap(obj, name, value):
    saved = getattr(obj, name)
    setattr(obj, name, value)
    return lambda: setattr(obj, name, saved)


def _both(first, second):
    return lambda: (first(), second())


def test_the_comparison_sees_each_feature(imported):
    """Each feature changes the logits: dropping one from megamlm's model would fail the test above."""
    family, _, _, model, _ = imported
    ids = word_ids(family, 1, 24, seed=1)
    attn0 = model.layers["0"].self_attn
    edits = [lambda m: _both(_swap(attn0, "q_norm", None), _swap(attn0, "k_norm", None))]
    if family.name == "gemma3":
        block = model.layers["0"]
        edits += [
            lambda m: _swap(block, "attn_output_layernorm", None),
            lambda m: _swap(block, "mlp_output_layernorm", None),
            lambda m: _swap(block.mlp, "activation", __import__("megamlm").kernels.swiglu),
            lambda m: _swap(m, "embed_scale", None),
            lambda m: _swap(attn0, "scale", None),
            lambda m: _swap(attn0, "window", None),  # the window is shorter than the sequence
            lambda m: _both(_swap(m, "rope_cos_local", m.rope_cos), _swap(m, "rope_sin_local", m.rope_sin)),
        ]
    for edit in edits:
        assert _changed(model, ids, edit) > 1e-3


def test_causal_export_round_trip(imported, tmp_path):
    family, hf, root, model, _ = imported
    out = export_checkpoint(root / "ckpt", tmp_path / family.export_arch, arch=family.export_arch, **QUIET)
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32,
                                                                     output_loading_info=True)
    assert type(loaded).__name__ == type(hf).__name__
    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    ids = word_ids(family, 2, 24, seed=3)
    with torch.no_grad():
        assert (loaded.eval()(input_ids=ids).logits - model.logits(model(ids, causal=True))).abs().max() < 1e-4
    # and back: the export imports into the same model
    import_hf(out, tmp_path / "back", **QUIET)
    back = load_model(read_record(tmp_path / "back"))
    assert back.args == model.args
    with torch.no_grad():
        assert (back.logits(back(ids, causal=True)) - model.logits(model(ids, causal=True))).abs().max() < 1e-5


def test_gemma_encoder_exports_as_bidirectional_gemma3(imported, tmp_path):
    family, hf, root, model, record = imported
    if family.name != "gemma3":
        pytest.skip("Gemma 3 only")
    out = export_checkpoint(root / "ckpt", tmp_path / "encoder", **QUIET)  # the default for a Gemma 3 model
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["use_bidirectional_attention"] is True
    assert "full_attention" in config["layer_types"] and "sliding_attention" in config["layer_types"]
    # transformers' bidirectional Gemma 3 keeps sliding_window // 2 + 1 (here 5) and attends |i - j| < it
    assert transformers.AutoConfig.from_pretrained(str(out)).sliding_window == 5
    encoder, info = transformers.AutoModel.from_pretrained(str(out), dtype=torch.float32, output_loading_info=True)
    assert type(encoder).__name__ == "Gemma3TextModel"
    assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (set(), set(), set())
    ids = word_ids(family, 2, 24, seed=5)
    with torch.no_grad():
        ours = model(ids, causal=False)
        theirs = encoder.eval()(input_ids=ids).last_hidden_state
        assert (ours - theirs).abs().max() < 1e-4
        # on one-token inputs attention is trivial: the source decoder computes the same hidden states
        one = ids[:, :1]
        source = hf.model(input_ids=one).last_hidden_state
        assert (encoder(input_ids=one).last_hidden_state - source).abs().max() < 1e-4
        # MLM logits: the causal-LM class on the bidirectional config
        mlm = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
        assert (mlm(input_ids=ids).logits - model.logits(ours)).abs().max() < 1e-4
    classifier, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(out), num_labels=3, output_loading_info=True)
    assert type(classifier).__name__ == "Gemma3TextForSequenceClassification"
    assert info["missing_keys"] == {"score.weight"} and info["unexpected_keys"] == set(), info
    card = (out / "README.md").read_text()
    assert "use_bidirectional_attention" in card and 'pipeline("fill-mask", model=path)' in card
    # Issue 31, item 4: the card names the window (W = 5 here: sliding_window 8 = 2(W-1), not the source's 5 whose
    # bidirectional reach transformers halves to 5 // 2 + 1 = 3)
    assert "|i - j| < 5" in card and "`sliding_window: 8` = 2(W-1)" in card and "only 3 tokens" in card, card
    # ...and pipeline("fill-mask") fills masks: config.json names the causal-LM class, bidirectional here
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    text = f"{tokenizer.decode(ids[0, :6])}{tokenizer.mask_token}{tokenizer.decode(ids[0, 7:12])}"
    fill = transformers.pipeline("fill-mask", model=str(out), device="cpu")
    masked = tokenizer(text, return_tensors="pt")["input_ids"]
    position = int((masked[0] == tokenizer.mask_token_id).nonzero()[0, 0])
    with torch.no_grad():
        want = model.logits(model(masked, causal=False))[0, position].softmax(-1)  # the padded rows too, as exported
    got = fill(text, top_k=3)
    assert [p["token"] for p in got] == want.topk(3).indices.tolist()
    assert abs(got[0]["score"] - float(want.max())) < 1e-4
    # a bidirectional Gemma 3 (EmbeddingGemma-style) is an import source too: the same model comes back
    import_hf(out, tmp_path / "back", **QUIET)
    back = load_model(read_record(tmp_path / "back"))
    assert back.args == model.args
    with torch.no_grad():
        assert (back(ids, causal=False) - ours).abs().max() < 1e-5


def test_qwen3_encoder_eurobert_export_is_refused(imported, tmp_path, capsys):
    family, _, root, _, _ = imported
    if family.name != "qwen3":
        pytest.skip("Qwen3 only")
    with pytest.raises(ConversionError, match="query/key norms") as err:
        export_checkpoint(root / "ckpt", tmp_path / "eurobert", **QUIET)
    assert "--arch qwen3" in str(err.value) and "tools/evaluate.py on the run folder" in str(err.value)
    assert not (tmp_path / "eurobert").exists()
    # the command line: one line, exit 2
    capsys.readouterr()
    status = tool_main("convert_to_hf")(["--input", str(root / "ckpt"), "--output", str(tmp_path / "cli")])
    expect_one_line(capsys, status, "query/key norms")


def test_gemma_export_to_a_family_without_its_features_is_refused(imported, tmp_path):
    family, _, root, _, _ = imported
    arch = "llama" if family.name == "gemma3" else "gemma3"
    with pytest.raises(ConversionError) as err:
        export_checkpoint(root / "ckpt", tmp_path / arch, arch=arch, **QUIET)
    assert len(str(err.value).splitlines()) == 1


def test_gemma3_multimodal_checkpoint_imports_its_text_tower(tmp_path):
    """A Gemma3ForConditionalGeneration folder: the text tower is imported (the same causal logits as the text
    model with those weights), the vision tower and projector are named in the log and skipped."""
    from decoder_families import tokenizer_of

    family = QK_NORM_FAMILIES["gemma3"]
    text = build(family, tmp_path / "text")
    vision = transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=28, patch_size=14)
    config = transformers.Gemma3Config(text_config=text.config.to_dict(), vision_config=vision.to_dict(),
                                       mm_tokens_per_image=4)
    multimodal = transformers.Gemma3ForConditionalGeneration(config).eval()
    missing, unexpected = multimodal.model.language_model.load_state_dict(text.model.state_dict(), strict=False)
    assert not missing and not unexpected
    multimodal.save_pretrained(str(tmp_path / "mm"))
    tokenizer_of(family).save_pretrained(str(tmp_path / "mm"))
    lines = []
    import_hf(tmp_path / "mm", tmp_path / "ckpt", log=lines.append)
    assert any("skipped" in line and "vision_tower" in line and "multi_modal_projector" in line for line in lines)
    model = load_model(read_record(tmp_path / "ckpt"))
    ids = word_ids(family, 2, 24, seed=6)
    with torch.no_grad():
        assert (model.logits(model(ids, causal=True)) - text(input_ids=ids).logits).abs().max() < 1e-4


REFUSED = {
    "gemma2": (dict(model_type="gemma2"), "soft-capping"),
    "gemma3 soft-capping": (dict(model_type="gemma3_text", attn_logit_softcapping=50.0), "soft-capping"),
    "qwen3 moe": (dict(model_type="qwen3_moe"), "mixture-of-experts"),
    "qwen3.5 linear attention": (dict(model_type="qwen3", layer_types=["linear_attention", "full_attention"]),
                                 "linear"),
    "qwen3-next": (dict(model_type="qwen3_next"), "linear-attention"),
}


def _convert_from_hf():
    from helpers import load_tool

    return load_tool("convert_from_hf")


@pytest.mark.parametrize("case", list(REFUSED))
def test_refusals_are_one_line_exit_2(case, tmp_path, capsys):
    """tools/convert_from_hf.py (its main, in this process) refuses each in one line with exit status 2."""
    settings, words = REFUSED[case]
    config = transformers.AutoConfig.for_model(settings.pop("model_type"), num_hidden_layers=2, **settings)
    folder = tmp_path / "hf"
    config.save_pretrained(str(folder))
    (folder / "model.safetensors").write_bytes(b"")
    code = _convert_from_hf().main(["--input", str(folder), "--output", str(tmp_path / "ckpt")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert not (tmp_path / "ckpt").exists()


def test_a_qwen3_with_use_sliding_window_imports_its_windowed_layers(tmp_path):
    """Qwen3's use_sliding_window windows the layers from max_window_layers on (transformers' layer_types): the
    import keeps them windowed, and its logits over a sequence longer than the window equal transformers'."""
    import dataclasses

    base = QK_NORM_FAMILIES["qwen3"]
    family = dataclasses.replace(base, config=dict(base.config, use_sliding_window=True, sliding_window=5,
                                                   max_window_layers=2))
    hf = build(family, tmp_path / "hf")
    assert hf.config.layer_types == ["full_attention"] * 2 + ["sliding_attention"] * 2
    import_hf(tmp_path / "hf", tmp_path / "ckpt", **QUIET)
    model = load_model(read_record(tmp_path / "ckpt"))
    assert model.args.sliding_window == 5 and model.args.layer_types == "full,full,sliding,sliding"
    ids = word_ids(family, 2, 24, seed=0)
    with torch.no_grad():
        ours = model.logits(model(ids, causal=True))
        theirs = hf(input_ids=ids).logits
        unwindowed = _swap(model.layers["3"].self_attn, "window", None)
        whole = model.logits(model(ids, causal=True))
        unwindowed()
    mask_id = read_record(tmp_path / "ckpt").tokenizer["mask_id"]
    keep = [i for i in range(hf.config.vocab_size) if i != mask_id]
    assert (ours[..., keep] - theirs[..., keep]).abs().max() < 1e-4
    assert (whole - ours).abs().max() > 1e-3  # the window is shorter than the sequence: it is what matches

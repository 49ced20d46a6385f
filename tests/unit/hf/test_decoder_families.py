"""Llama 3.2, Qwen2.5, Mistral and SmolLM2, each a tiny random model built by transformers from a config shaped
like the real one: imported, megamlm's causal logits equal transformers'; exported as native EuroBERT,
transformers' bidirectional logits equal megamlm's with every tensor accounted for, and the fill-mask
pipeline and classification heads load; exported back to the source family, the causal logits agree.

(Training steps of these imports under TP=2 and PP=2: tests/distributed/test_decoder_family_layouts.py.)
"""

from __future__ import annotations

import json

import pytest
import torch
from decoder_families import FAMILIES, WORDS, build, word_ids

from megamlm.hf.export import export_checkpoint
from megamlm.hf.importer import import_hf
from megamlm.hf.megamlm_checkpoint import load_model, read_record

transformers = pytest.importorskip("transformers")
QUIET = dict(log=lambda *_: None)


@pytest.fixture(scope="module", params=list(FAMILIES))
def imported(request, tmp_path_factory):
    """(family, transformers model, megamlm checkpoint folder, megamlm model, record)."""
    family = FAMILIES[request.param]
    root = tmp_path_factory.mktemp(family.name)
    hf = build(family, root / "hf")
    import_hf(root / "hf", root / "ckpt", **QUIET)
    record = read_record(root / "ckpt")
    return family, hf, root, load_model(record), record


def _added_ids(record) -> list[int]:
    """Ids of tokens the import added (their rows were initialised, not copied)."""
    source = record.config["imported_from"]
    return [record.tokenizer["mask_id"]] if source["mask_added"] else []


def test_import_matches_causal_logits(imported):
    family, hf, _, model, record = imported
    ids = word_ids(family, 2, 24, seed=0)
    with torch.no_grad():
        ours = model.logits(model(ids, causal=True))
        theirs = hf(input_ids=ids).logits
    keep = [i for i in range(hf.config.vocab_size) if i not in _added_ids(record)]
    assert (ours[..., keep] - theirs[..., keep]).abs().max() < 1e-4

    args = model.args
    assert args.tie_word_embeddings == hf.config.tie_word_embeddings
    assert (model.lm_head.weight is model.embed_tokens.weight) == args.tie_word_embeddings
    assert args.head_dim == hf.model.layers[0].self_attn.head_dim
    assert args.attention_bias == (family.model_type == "qwen2") and not args.attention_out_bias
    rope_type = hf.config.rope_parameters["rope_type"]
    assert (args.rope_scaling.rope_type if args.rope_scaling else "default") == rope_type
    tokenizer = record.tokenizer
    assert record.config["imported_from"]["mask_token"] == family.expected_mask
    assert record.config["imported_from"]["mask_added"] == family.mask_added
    grows = family.mask_added and hf.config.vocab_size == len(family.specials) + len(WORDS)
    assert args.vocab_size == (128 if grows else hf.config.vocab_size)
    assert tokenizer["mask_id"] not in (tokenizer["bos_id"], tokenizer["eos_id"], tokenizer["pad_id"])


def test_the_comparison_sees_each_feature(imported):
    """Each feature of the family changes the logits: dropping it from megamlm's model would fail the test above."""
    family, hf, _, model, _ = imported
    ids = word_ids(family, 1, 24, seed=1)
    with torch.no_grad():
        reference = model.logits(model(ids, causal=True))
        changed = []
        if model.args.rope_scaling is not None:
            from megamlm.model.rope import rotary_tables

            a = model.args
            cos, sin = model.rope_cos.clone(), model.rope_sin.clone()
            model.rope_cos, model.rope_sin = rotary_tables(a.head_dim, a.max_seq_length, a.rope_theta)
            changed.append(model.logits(model(ids, causal=True)))
            model.rope_cos, model.rope_sin = cos, sin
        if model.args.attention_bias:
            bias = model.layers["0"].self_attn.k_proj.bias
            saved = bias.clone()
            bias.zero_()
            changed.append(model.logits(model(ids, causal=True)))
            bias.copy_(saved)
    for logits in changed:
        assert (logits - reference).abs().max() > 1e-2


@pytest.fixture(scope="module")
def eurobert(imported):
    family, hf, root, model, record = imported
    out = export_checkpoint(root / "ckpt", root / "eurobert", **QUIET)
    return out, imported


def test_eurobert_export_matches_bidirectional_logits_with_every_tensor(eurobert):
    out, (family, hf, _, model, record) = eurobert
    loaded, info = transformers.AutoModelForMaskedLM.from_pretrained(str(out), dtype=torch.float32,
                                                                     output_loading_info=True)
    assert type(loaded).__name__ == "EuroBertForMaskedLM"
    assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (set(), set(), set())
    ids = word_ids(family, 2, 24, seed=2)
    with torch.no_grad():
        ours = model.logits(model(ids, causal=False))
        theirs = loaded.eval()(input_ids=ids).logits
    assert (ours - theirs).abs().max() < 1e-4
    config = json.loads((out / "config.json").read_text())
    args = model.args
    assert config["model_type"] == "eurobert" and config["tie_word_embeddings"] == args.tie_word_embeddings
    assert config["head_dim"] == args.head_dim and config["attention_bias"] == args.attention_bias
    assert config["rope_parameters"]["rope_type"] == hf.config.rope_parameters["rope_type"]
    assert config["mask_token_id"] == record.tokenizer["mask_id"]
    assert (loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()) == args.tie_word_embeddings


def test_eurobert_export_fills_masks_and_takes_classification_heads(eurobert):
    out, (family, *_rest) = eurobert
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    assert tokenizer.mask_token == family.expected_mask
    fill = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out), device="cpu")
    predictions = fill(f"Elinor said that her {tokenizer.mask_token} was not at the house", top_k=3)
    scores = [p["score"] for p in predictions]
    assert len(predictions) == 3 and scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1
    for auto_class, head in (("AutoModelForSequenceClassification", ("dense.", "classifier.")),
                             ("AutoModelForTokenClassification", ("classifier.",))):
        model, info = getattr(transformers, auto_class).from_pretrained(str(out), num_labels=3,
                                                                        output_loading_info=True)
        assert info["missing_keys"] and all(k.startswith(head) for k in info["missing_keys"]), info
        assert info["unexpected_keys"] <= {"lm_head.weight"}


def test_causal_export_to_the_source_family(imported, tmp_path):
    family, hf, root, model, _ = imported
    out = export_checkpoint(root / "ckpt", tmp_path / family.export_arch, arch=family.export_arch, **QUIET)
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32,
                                                                     output_loading_info=True)
    assert type(loaded).__name__ == type(hf).__name__
    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    ids = word_ids(family, 2, 24, seed=3)
    with torch.no_grad():
        assert (loaded.eval()(input_ids=ids).logits - model.logits(model(ids, causal=True))).abs().max() < 1e-4


def test_eurobert_export_imports_back_into_the_same_model(eurobert, tmp_path):
    """EuroBERT is an import source too: its biases (the o_proj bias it adds as zeros), head_dim, RoPE and tying."""
    out, (family, _, _, model, _) = eurobert
    import_hf(out, tmp_path / "back", **QUIET)
    back = load_model(read_record(tmp_path / "back"))
    assert back.args.tie_word_embeddings == model.args.tie_word_embeddings
    assert back.args.rope_scaling == model.args.rope_scaling and back.args.head_dim == model.args.head_dim
    ids = word_ids(family, 2, 24, seed=4)
    with torch.no_grad():
        assert (back.logits(back(ids, causal=False)) - model.logits(model(ids, causal=False))).abs().max() < 1e-5

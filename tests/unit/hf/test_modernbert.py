"""The ModernBERT family's translation (megamlm/hf/modernbert.py and the MODERNBERT key maps): both config forms,
the released configs' values, the state dicts both ways bitwise, logits equal to transformers', refusals by name."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from modernbert_folders import BIASES, RELEASED, SMALL_WINDOW, hf_config, save_modernbert, write_legacy_config

from megamlm.hf.errors import ConversionError
from megamlm.hf.hf_config import SpecialIds
from megamlm.hf.keymaps import MODERNBERT, MODERNBERT_DECODER
from megamlm.hf.modernbert import modernbert_export_problem, modernbert_fields, modernbert_hf_config
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer

transformers = pytest.importorskip("transformers")
IDS = SpecialIds(bos_id=1, eos_id=2, pad_id=3, mask_id=4)


def _read(folder, settings, legacy):
    hf_config(settings).save_pretrained(folder)
    if legacy:
        write_legacy_config(folder / "config.json", settings)
    return transformers.AutoConfig.from_pretrained(folder)


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_the_released_values_in_both_config_forms(tmp_path, name):
    """ModernBERT-base, mmBERT-small and an Ettin decoder (tiny in width and depth only): transformers 5's
    rope_parameters/layer_types and the released files' global_rope_theta/local_rope_theta/
    global_attn_every_n_layers/layer_norm_eps translate to one ModelArgs with their values."""
    settings = RELEASED[name]
    new = modernbert_fields(_read(tmp_path / "new", settings, legacy=False))
    old = modernbert_fields(_read(tmp_path / "old", settings, legacy=True))
    assert new == old
    decoder = settings.get("decoder", False)
    assert new["vocab_size"] == settings["vocab_size"] and new["rope_theta"] == 160000.0
    assert new["local_rope_theta"] == (None if name == "mmbert-small" else 10000.0)  # None: the global base
    assert new["sliding_window"] == (64 if decoder else 65)  # |i - j| <= 64, or the last 64 tokens
    assert new["layer_types"] == "full,sliding,sliding,full" and new["max_seq_length"] == 8192
    assert (new["norm_type"], new["norm_epsilon"], new["norm_bias"], new["mlp_activation"]) == \
        ("layernorm", 1e-5, False, "geglu_erf")
    assert new["embedding_norm"] and new["prediction_head"] and new["decoder_bias"] and new["tie_word_embeddings"]
    assert (new["init_method"], new["initializer_cutoff_factor"], new["init_method_std"]) == ("modernbert", 2.0, 0.02)


def test_a_legacy_global_period_is_read(tmp_path):
    settings = {**SMALL_WINDOW, "num_hidden_layers": 5, "global_attn_every_n_layers": 2}
    fields = modernbert_fields(_read(tmp_path, settings, legacy=True), max_seq_length=32)
    assert fields["layer_types"] == "full,sliding,full,sliding,full" and fields["max_seq_length"] == 32
    assert (fields["rope_theta"], fields["local_rope_theta"]) == (1000.0, 100.0)


def _translated(hf_model, keymap):
    state = {}
    for name, tensor in hf_model.state_dict().items():
        state.update(keymap.from_hf_tensors(name, tensor))
    return state


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
@pytest.mark.parametrize("biases", [False, True], ids=["no-biases", "biases"])
def test_state_dicts_both_ways_and_logits_equal(tmp_path, decoder, biases):
    """HF -> megamlm gives exactly the Transformer's tensors (names and shapes), back is bitwise the input, and the
    logits equal transformers' (fp32, window 8 inside 32 tokens, sliding and full layers)."""
    settings = {**SMALL_WINDOW, **(BIASES if biases else {}), "decoder": decoder}
    hf_model = save_modernbert(tmp_path, settings)
    keymap = MODERNBERT_DECODER if decoder else MODERNBERT
    args = ModelArgs(**modernbert_fields(hf_model.config, max_seq_length=32))
    state = _translated(hf_model, keymap)
    model = Transformer(args).eval()
    state["lm_head.weight"] = state["embed_tokens.weight"]  # tied: the HF decoder.weight is the embedding
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    assert {name: tuple(t.shape) for name, t in state.items()} == expected
    model.load_state_dict(state, strict=True)
    back = keymap.to_hf_tensors(state)
    reference = hf_model.state_dict()
    assert set(back) == set(reference)
    assert all(torch.equal(back[name], reference[name]) for name in reference)
    ids = torch.randint(5, 35, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model.logits(model(ids, causal=decoder))
        theirs = hf_model(input_ids=ids).logits
    assert (ours - theirs).abs().max().item() < 1e-5
    # The comparison tells windows and RoPE bases apart: one token more of window, or another local base, is far.
    for change in (dict(sliding_window=args.sliding_window + 1), dict(local_rope_theta=1000.0)):
        other = Transformer(dataclasses.replace(args, **change)).eval()
        other.load_state_dict(state, strict=True)
        with torch.no_grad():
            assert (other.logits(other(ids, causal=decoder)) - theirs).abs().max().item() > 1e-3, change


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_logits_equal_with_the_released_window(tmp_path, name):
    """The released 128-token window (W 65 bidirectional, 64 causal) inside a 150-token sequence, at the released
    vocabulary (50,368; mmBERT 256,000)."""
    hf_model = save_modernbert(tmp_path, RELEASED[name], legacy=True)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    decoder = config.model_type == "modernbert-decoder"
    args = ModelArgs(**modernbert_fields(config, max_seq_length=150))
    model = Transformer(args).eval()
    state = _translated(hf_model, MODERNBERT_DECODER if decoder else MODERNBERT)
    state["lm_head.weight"] = state["embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    ids = torch.randint(5, 35, (1, 150), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf_model(input_ids=ids).logits
        assert (model.logits(model(ids, causal=decoder)) - theirs).abs().max().item() < 1e-5
    wider = Transformer(dataclasses.replace(args, sliding_window=args.sliding_window + 1)).eval()
    wider.load_state_dict(state, strict=True)
    with torch.no_grad():  # a window one token wider is told apart
        assert (wider.logits(wider(ids, causal=decoder)) - theirs).abs().max().item() > 1e-3


@pytest.mark.parametrize("arch", ["modernbert", "modernbert-decoder"])
def test_the_export_config_reads_back_as_the_same_model(arch):
    settings = {**SMALL_WINDOW, **BIASES, "decoder": arch == "modernbert-decoder", "attention_dropout": 0.1,
                "mlp_dropout": 0.05, "embedding_dropout": 0.02, "tie_word_embeddings": False}
    fields = modernbert_fields(hf_config(settings), max_seq_length=64)
    config = modernbert_hf_config(arch, ModelArgs(**fields), IDS)
    assert type(config).__name__ == ("ModernBertDecoderConfig" if arch == "modernbert-decoder" else "ModernBertConfig")
    assert config.local_attention == 8 and config.pad_token_id == 3
    assert modernbert_fields(config) == fields


REFUSED = {
    "hidden_activation": dict(hidden_activation="relu"),
    "classifier_activation": dict(classifier_activation="silu"),
    "sparse_prediction": dict(sparse_prediction=True),
    "num_attention_heads": dict(num_attention_heads=5),
    "layer_norm_eps": dict(layer_norm_eps=1e-12),
    "rope_parameters.sliding_attention.rope_type": dict(
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000.0},
                         "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0}}),
    "rope_parameters.full_attention": dict(
        rope_parameters={"full_attention": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}),
}


@pytest.mark.parametrize("field", sorted(REFUSED))
def test_a_shape_megamlm_cannot_hold_is_refused_by_name(field):
    settings = {key: value for key, value in SMALL_WINDOW.items() if key not in ("global_rope_theta",
                                                                                  "local_rope_theta")}
    config = hf_config({**settings, **REFUSED[field]})
    if field == "layer_norm_eps":  # the legacy key, kept as an attribute as transformers keeps it
        config.layer_norm_eps = 1e-12
    with pytest.raises(ConversionError) as refused:
        modernbert_fields(config)
    message = str(refused.value)
    assert "\n" not in message and f"{field}=" in message, message


def test_head_dim_apart_from_hidden_over_heads_is_refused():
    config = hf_config(SMALL_WINDOW)
    config.head_dim = 16
    with pytest.raises(ConversionError, match="head_dim=16"):
        modernbert_fields(config)


def test_an_export_names_what_the_model_lacks():
    llama_shaped = ModelArgs(vocab_size=64, num_layers=2, hidden_size=32, ffn_hidden_size=48, num_attention_heads=4,
                             num_query_groups=2, max_seq_length=32)
    problem = modernbert_export_problem("modernbert", llama_shaped)
    assert "norm_type layernorm" in problem and "embedding_norm" in problem and "prediction_head" in problem
    block = dataclasses.replace(llama_shaped, norm_type="layernorm", embedding_norm=True, prediction_head=True)
    assert "grouped-query attention" in modernbert_export_problem("modernbert-decoder", block)
    assert modernbert_export_problem("modernbert", dataclasses.replace(block, num_query_groups=4)) is None


SCALED = {"linear": {"factor": 4.0},
          "yarn": {"factor": 4.0, "original_max_position_embeddings": 16},
          "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 16}}


@pytest.mark.parametrize("kind", sorted(SCALED))
def test_rope_scaling_of_the_global_layers_is_imported_and_exported(tmp_path, kind):
    """A ModernBERT whose full-attention layers scale RoPE (the sliding ones plain): megamlm's rope_scaling, logits
    equal transformers' over 32 tokens (scaled from 16), and the export's config writes it back."""
    settings = {key: value for key, value in SMALL_WINDOW.items() if not key.endswith("rope_theta")}
    settings["rope_parameters"] = {"full_attention": {"rope_type": kind, "rope_theta": 1000.0, **SCALED[kind]},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}
    hf_model = save_modernbert(tmp_path, settings)
    fields = modernbert_fields(hf_model.config, max_seq_length=32)
    assert fields["rope_scaling"].rope_type == kind and fields["local_rope_theta"] == 100.0
    model = Transformer(ModelArgs(**fields)).eval()
    state = _translated(hf_model, MODERNBERT)
    state["lm_head.weight"] = state["embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    ids = torch.randint(5, 35, (2, 32), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (model.logits(model(ids, causal=False)) - hf_model(input_ids=ids).logits).abs().max().item() < 1e-5
    config = modernbert_hf_config("modernbert", ModelArgs(**fields), IDS)
    assert modernbert_fields(config, max_seq_length=32) == fields


@pytest.mark.parametrize("arch", ["eurobert", "llama", "gemma3_encoder"])
def test_another_export_of_the_block_points_to_modernbert(arch):
    from megamlm.hf.hf_config import default_arch, export_problem

    args = ModelArgs(**modernbert_fields(hf_config(SMALL_WINDOW), max_seq_length=32))
    assert default_arch(args) == "modernbert"
    problem = export_problem(arch, args)
    assert problem is not None and "--arch modernbert" in problem and "\n" not in problem, problem

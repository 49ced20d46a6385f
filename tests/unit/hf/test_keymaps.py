from dataclasses import replace

import pytest

from megamlm.hf.errors import ConversionError
from megamlm.hf.keymaps import EUROBERT, LLAMA, MISTRAL, QWEN2, keymap_for_model_type
from megamlm.model.transformer import Transformer


@pytest.mark.parametrize("keymap", [EUROBERT, LLAMA, QWEN2, MISTRAL])
def test_every_parameter_maps_to_a_distinct_hf_name_and_back(keymap, kit):
    every_bias = replace(kit.TINY, attention_bias=True, attention_out_bias=True)
    names = list(Transformer(every_bias).state_dict())
    hf_names = [keymap.to_hf(n) for n in names]
    assert sorted(hf_names) == sorted(keymap.hf_names(kit.TINY.num_layers))
    assert [keymap.from_hf(n) for n in hf_names] == names


def test_known_names():
    assert LLAMA.to_hf("layers.1.self_attn.k_proj.weight") == "model.layers.1.self_attn.k_proj.weight"
    assert EUROBERT.to_hf("embed_tokens.weight") == "model.embed_tokens.weight"
    assert EUROBERT.from_hf("lm_head.weight") == "lm_head.weight"
    assert EUROBERT.from_hf("model.layers.12.mlp.down_proj.weight") == "layers.12.mlp.down_proj.weight"


def test_unknown_tensor_is_named():
    assert LLAMA.from_hf("model.layers.0.self_attn.q_proj.bias") == "layers.0.self_attn.q_proj.bias"
    with pytest.raises(ConversionError, match=r"model\.layers\.0\.self_attn\.q_norm\.weight"):
        LLAMA.from_hf("model.layers.0.self_attn.q_norm.weight")


def test_model_types():
    assert keymap_for_model_type("mistral") is MISTRAL and keymap_for_model_type("qwen2") is QWEN2
    assert keymap_for_model_type("llama") is LLAMA and keymap_for_model_type("eurobert") is EUROBERT
    with pytest.raises(ConversionError, match="gpt2.*eurobert, gemma3, gemma3_text, llama, mistral, modernbert, "
                                              "modernbert-decoder, qwen2, qwen3"):
        keymap_for_model_type("gpt2")


def test_gemma3_names_its_four_norms_by_place_and_its_multimodal_text_tower():
    from megamlm.hf.keymaps import GEMMA3

    assert GEMMA3.to_hf("layers.1.attn_output_layernorm.weight") == "model.layers.1.post_attention_layernorm.weight"
    assert GEMMA3.to_hf("layers.1.post_attention_layernorm.weight") == "model.layers.1.pre_feedforward_layernorm.weight"
    assert GEMMA3.to_hf("layers.1.mlp_output_layernorm.weight") == "model.layers.1.post_feedforward_layernorm.weight"
    assert GEMMA3.from_hf("model.layers.1.self_attn.k_norm.weight") == "layers.1.self_attn.k_norm.weight"
    assert GEMMA3.source_name("language_model.model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    assert GEMMA3.source_name("model.language_model.norm.weight") == "model.norm.weight"
    assert GEMMA3.source_name("vision_tower.vision_model.embeddings.patch_embedding.weight") is None
    assert GEMMA3.source_name("model.multi_modal_projector.mm_input_projection_weight") is None

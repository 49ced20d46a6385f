import pytest
import torch

from megamlm.model.config import PRESETS, ModelArgs
from megamlm.model.transformer import Transformer, count_parameters


def tiny_args(**overrides) -> ModelArgs:
    shape = dict(PRESETS["tiny"], vocab_size=256)
    shape.update(overrides)
    return ModelArgs(**shape)


@pytest.mark.parametrize("preset,expected_millions", [("210m", 210), ("610m", 610), ("1b", 1000)])
def test_paper_presets_have_the_paper_sizes_without_lm_head(preset, expected_millions):
    with torch.device("meta"):
        model = Transformer(ModelArgs(**PRESETS[preset]))
    millions = count_parameters(model, include_lm_head=False) / 1e6
    assert abs(millions - expected_millions) / expected_millions < 0.03, millions


def test_tiny_preset_splits_by_two_and_four():
    shape = PRESETS["tiny"]
    for n in (2, 4):
        assert shape["num_attention_heads"] % n == 0
        assert shape["num_query_groups"] % n == 0
        assert shape["num_layers"] % n == 0


def test_no_biases_and_untied_head():
    model = Transformer(tiny_args())
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    assert model.lm_head.weight.data_ptr() != model.embed_tokens.weight.data_ptr()


def hidden_after_changing_last_token(causal: bool):
    torch.manual_seed(0)
    model = Transformer(tiny_args()).eval()
    tokens = torch.randint(0, 256, (1, 32))
    changed = tokens.clone()
    changed[0, -1] = (tokens[0, -1] + 1) % 256
    with torch.no_grad():
        return model(tokens, causal=causal), model(changed, causal=causal)


def test_bidirectional_attention_lets_a_later_token_change_earlier_positions():
    a, b = hidden_after_changing_last_token(causal=False)
    assert (a[0, :-1] - b[0, :-1]).abs().max() > 1e-4


def test_causal_attention_keeps_earlier_positions_unchanged():
    a, b = hidden_after_changing_last_token(causal=True)
    torch.testing.assert_close(a[0, :-1], b[0, :-1], rtol=0, atol=1e-6)
    assert (a[0, -1] - b[0, -1]).abs().max() > 1e-4


def test_grouped_query_attention_equals_repeated_kv_heads():
    """GQA with 4 KV heads equals full multi-head attention whose K/V heads are the 4 repeated."""
    torch.manual_seed(0)
    gqa = Transformer(tiny_args(num_layers=1)).eval()
    mha = Transformer(tiny_args(num_layers=1, num_query_groups=8)).eval()
    state = gqa.state_dict()
    repeat = 8 // 4
    for name in ("k_proj", "v_proj"):
        w = state[f"layers.0.self_attn.{name}.weight"].view(4, -1, 128)
        state[f"layers.0.self_attn.{name}.weight"] = w.repeat_interleave(repeat, dim=0).reshape(-1, 128)
    mha.load_state_dict(state)
    tokens = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(gqa(tokens, causal=False), mha(tokens, causal=False))


def test_sequence_longer_than_the_model_is_refused():
    model = Transformer(tiny_args(max_seq_length=16))
    with pytest.raises(ValueError, match="exceeds"):
        model(torch.zeros(1, 17, dtype=torch.long), causal=False)


def test_decoder_features_are_off_by_default_and_shape_the_model():
    plain = tiny_args()
    assert (plain.head_dim, plain.attention_bias, plain.attention_out_bias, plain.rope_scaling,
            plain.tie_word_embeddings) == (16, False, False, None, False)
    model = Transformer(tiny_args(head_dim=24, attention_bias=True, tie_word_embeddings=True))
    attn = model.layers["0"].self_attn
    assert attn.q_proj.weight.shape == (8 * 24, 128) and attn.k_proj.weight.shape == (4 * 24, 128)
    assert attn.o_proj.weight.shape == (128, 8 * 24) and attn.o_proj.bias is None
    assert all(torch.count_nonzero(getattr(attn, n).bias) == 0 for n in ("q_proj", "k_proj", "v_proj"))  # init 0
    assert Transformer(tiny_args(attention_out_bias=True)).layers["0"].self_attn.o_proj.bias is not None
    # Tied: one parameter, listed once, saved under both names.
    assert model.lm_head.weight is model.embed_tokens.weight
    names = [n for n, _ in model.named_parameters()]
    assert "embed_tokens.weight" in names and "lm_head.weight" not in names
    assert {"embed_tokens.weight", "lm_head.weight"} <= set(model.state_dict())
    untied = Transformer(tiny_args(head_dim=24, attention_bias=True))
    assert count_parameters(untied) - count_parameters(model) == 256 * 128
    with torch.no_grad():
        assert model(torch.randint(0, 256, (2, 8)), causal=False).shape == (2, 8, 128)


def test_shape_records_without_the_new_fields_read_as_their_defaults():
    from megamlm.model.config import shape_record
    from megamlm.model.rope_scaling import RopeScaling

    old = {k: v for k, v in tiny_args().to_dict().items()
           if k not in ("head_dim", "attention_bias", "attention_out_bias", "rope_scaling", "tie_word_embeddings")}
    assert shape_record(old) == tiny_args().to_dict()
    scaled = tiny_args(rope_scaling={"rope_type": "linear", "factor": 2})
    assert scaled.rope_scaling == RopeScaling("linear", factor=2.0)
    assert ModelArgs(**scaled.to_dict()) == scaled and scaled.to_dict()["rope_scaling"] == {"rope_type": "linear",
                                                                                            "factor": 2.0}
    assert shape_record({"not": "a shape"}) == {"not": "a shape"}

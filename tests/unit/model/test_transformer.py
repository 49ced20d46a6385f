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

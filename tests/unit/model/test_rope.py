"""RoPE scaling: megamlm's tables equal transformers' for the scalings of Llama 3.1/3.2, linear and YaRN
(Qwen2.5's long-context setting); other types and keys are refused by name."""

import pytest
import torch

from megamlm.model.rope import inverse_frequencies, rotary_tables
from megamlm.model.rope_scaling import RopeScaling

transformers = pytest.importorskip("transformers")

LLAMA3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
CASES = [
    LLAMA3,
    {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1000000.0},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
     "beta_fast": 16, "beta_slow": 2, "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": False},
]


@pytest.mark.parametrize("params", CASES, ids=lambda p: p.get("rope_type", p.get("type")))
@pytest.mark.parametrize("head_dim", [64, 128, 48])
def test_frequencies_and_attention_factor_match_transformers(params, head_dim):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=131072, rope_parameters=dict(params))
    kind = config.rope_parameters["rope_type"]
    theirs, their_factor = ROPE_INIT_FUNCTIONS[kind](config)
    ours, our_factor = inverse_frequencies(head_dim, params["rope_theta"], RopeScaling.from_dict(params))
    torch.testing.assert_close(ours.float(), theirs, rtol=1e-5, atol=0)  # theirs in float32, ours in float64
    assert our_factor == pytest.approx(their_factor, rel=1e-12)
    assert not torch.allclose(ours, inverse_frequencies(head_dim, params["rope_theta"])[0])  # the scaling did something


def test_tables_carry_the_attention_factor_and_round_trip_as_a_dict():
    scaling = RopeScaling.from_dict(CASES[2])
    cos, sin = rotary_tables(64, 16, 1e6, scaling)
    plain_cos, _ = rotary_tables(64, 16, 1e6)
    assert cos[0].max() == pytest.approx(0.1 * torch.log(torch.tensor(4.0)).item() + 1.0)
    assert plain_cos[0].max() == 1.0
    assert RopeScaling.from_dict(scaling.to_dict()) == scaling
    assert RopeScaling.from_dict({"rope_type": "default", "rope_theta": 1.0}) is None


@pytest.mark.parametrize("params, match", [
    ({"rope_type": "dynamic", "factor": 2.0}, "RoPE type 'dynamic' is not supported"),
    ({"rope_type": "longrope", "factor": 2.0}, "RoPE type 'longrope' is not supported"),
    ({"rope_type": "llama3", "factor": 8.0}, "needs low_freq_factor, high_freq_factor, "
                                             "original_max_position_embeddings"),
    ({"rope_type": "linear", "factor": 2.0, "beta_fast": 3}, "'linear' with beta_fast is not supported"),
    ({"rope_type": "default", "partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
])
def test_unsupported_scalings_are_named(params, match):
    with pytest.raises(ValueError, match=match):
        RopeScaling.from_dict(params)

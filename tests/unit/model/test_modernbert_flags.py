"""The ModernBERT block from flags and YAML: the presets fill its features, --global-attn-every-n-layers fills the
layer pattern before validation, and a bad value is one line naming the flag."""

from __future__ import annotations

import pytest

from megamlm.config import parse_args, resolve
from megamlm.config.derived import model_args_values
from megamlm.config.loader import load_yaml
from megamlm.config.model_presets import with_model_preset
from megamlm.errors import ConfigError
from megamlm.model.config import PRESETS


def _cfg(*argv):
    return parse_args([*argv, "--dry-run"])


def test_a_modernbert_preset_fills_its_block():
    m = _cfg("--model", "modernbert-base").model
    values = model_args_values(m)
    for key, value in PRESETS["modernbert-base"].items():
        assert values[key] == value, key
    assert (m.norm_type, m.rope_theta, m.local_rope_theta, m.sliding_window) == ("layernorm", 160_000.0, 10_000.0, 65)


def test_flags_override_the_preset_and_a_resized_model_keeps_its_pattern():
    m = _cfg("--model", "modernbert-tiny", "--rope-theta", "80000", "--num-layers", "6").model
    assert m.rope_theta == 80_000.0 and m.layer_types == "full,sliding,full,sliding,full,sliding"
    assert m.prediction_head and m.embedding_norm and m.decoder_bias


def test_global_attention_every_n_layers_fills_the_layer_types():
    m = _cfg("--num-layers", "4", "--sliding-window", "5", "--global-attn-every-n-layers", "3").model
    assert m.layer_types == "full,sliding,sliding,full" and m.norm_type == "rmsnorm"  # tiny keeps its block


def test_yaml_sets_the_block(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  model: modernbert-tiny\n  global_attn_every_n_layers: 4\n  attention_dropout: 0.1\n")
    settings = with_model_preset(load_yaml(str(path)).to_dict())
    from megamlm.config.loader import config_from_settings

    m = resolve(config_from_settings(settings), world_size=1).model
    assert m.layer_types == "full,sliding,sliding,sliding" and m.attention_dropout == 0.1 and m.norm_type == "layernorm"


@pytest.mark.parametrize("argv,words", [
    (["--global-attn-every-n-layers", "0", "--sliding-window", "5"], "--global-attn-every-n-layers"),
    (["--global-attn-every-n-layers", "2", "--layer-types", "full,full,full,full"], "two ways"),
    (["--mlp-dropout", "1.0"], "--mlp-dropout"),
    (["--initializer-cutoff-factor", "0"], "--initializer-cutoff-factor"),
    (["--norm-type", "batchnorm"], "--norm-type"),
])
def test_a_bad_value_is_one_line(argv, words):
    with pytest.raises(ConfigError) as err:
        _cfg(*argv)
    assert words in str(err.value) and "\n" not in str(err.value)

"""Issue 23, item 2: a paper preset trains with its recipe (megamlm/config/recipes.py) where flags are unset."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from megamlm.config import build_parser, parse_args
from megamlm.config.recipes import RECIPES, recipe_file
from megamlm.model.config import PRESETS

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("preset", sorted(RECIPES))
def test_the_recipe_table_is_the_example_configs(preset):
    """One declaration: the table equals examples/configs/paper_<preset>_*.yaml's training section and sequence
    length, and the file names that preset."""
    written = yaml.safe_load((REPO / recipe_file(preset)).read_text())
    assert written["model"]["model"] == preset
    assert RECIPES[preset]["training"] == written["training"]
    assert set(RECIPES[preset]) == {"training"} and set(written) == {"model", "objective", "training", "checkpoint",
                                                                     "logging"}
    assert PRESETS[preset]["max_seq_length"] == written["model"]["seq_length"]  # the preset's own shape


def test_a_preset_without_config_trains_with_its_recipe(capsys):
    cfg = parse_args(["--model", "610m", "--dry-run"])
    t = cfg.training
    assert (t.lr, t.train_iters, t.lr_warmup_iters, t.lr_wsd_decay_iters, t.lr_decay_style) == (5e-4, 42000, 2000,
                                                                                                  2000, "wsd")
    assert (t.micro_batch_size, t.global_batch_size) == (12, 1152)
    out = capsys.readouterr().out
    assert "--model 610m: --train-iters 42000 --lr 0.0005 --lr-warmup-iters 2000 --lr-wsd-decay-iters 2000 from its " \
           "recipe" in out
    assert "examples/configs/paper_610m_clm_then_mlm.yaml" in out


def test_flags_and_config_override_the_recipe(tmp_path, capsys):
    cfg = parse_args(["--model", "210m", "--dry-run", "--lr", "1e-3", "--lr-warmup-fraction", "0.1",
                      "--train-iters", "1000", "--lr-wsd-decay-iters", "100"])
    t = cfg.training
    assert (t.lr, t.lr_warmup_iters, t.lr_warmup_fraction, t.train_iters) == (1e-3, None, 0.1, 1000)
    config = tmp_path / "run.yaml"
    config.write_text("model: {model: 1b}\ntraining: {lr: 2.0e-4, train_iters: 500, lr_warmup_iters: 50, "
                      "lr_wsd_decay_iters: 50}\n")
    cfg = parse_args(["--config", str(config), "--dry-run"])
    assert (cfg.training.lr, cfg.training.train_iters, cfg.training.lr_warmup_iters) == (2e-4, 500, 50)
    assert cfg.training.lr_wsd_decay_iters == 50


def test_tiny_keeps_the_sections_defaults(capsys):
    cfg = parse_args([])
    assert (cfg.training.lr, cfg.training.train_iters) == (3e-3, 300)
    assert "from its recipe" not in capsys.readouterr().out


def test_help_says_where_each_default_comes_from():
    text = " ".join(build_parser().format_help().split())
    assert "Peak learning rate. (default: 0.003; --model 210m/610m/1b: 0.0005, their recipe in " \
           "examples/configs/paper_*.yaml)" in text
    assert "(default: 300; --model 210m/610m/1b: 42000" in text


def test_a_preset_run_of_its_own_length_keeps_warmup_and_decay_that_scale_with_it(capsys):
    cfg = parse_args(["--model", "610m", "--train-iters", "100", "--dry-run"])
    t = cfg.training
    assert (t.train_iters, t.lr, t.lr_warmup_iters, t.lr_wsd_decay_iters) == (100, 5e-4, None, None)
    assert "--model 610m: --lr 0.0005 from its recipe" in capsys.readouterr().out

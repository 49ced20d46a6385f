"""Batch sizes the user did not set fit the layout; the ones they set are kept (and refused in one line if wrong)."""

import itertools
from pathlib import Path

import pytest
import yaml

from megamlm.config import ParallelConfig, TrainingConfig, parse_args
from megamlm.config.batches import RECIPE_BATCH, fit_batch
from megamlm.errors import LayoutError
from megamlm.training.startup import dims_from_config, resolve_parallel_dims

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("micro,global_,dp,pp,interleaved,expected", [
    (None, None, 1, 1, False, (16, 16)),   # one process: today's default
    (None, None, 2, 1, False, (8, 16)),    # DP 2: same global batch, smaller micro-batches
    (None, None, 1, 2, False, (8, 16)),    # PP 2: two micro-batches
    (None, None, 8, 4, False, (1, 32)),    # DP 8 x PP 4 need 32 samples: the global batch grows
    (None, None, 3, 1, False, (6, 18)),    # 16 does not split over 3 ranks: the next multiple
    (None, None, 2, 2, True, (4, 16)),     # interleaved: micro-batches in rounds of PP
    (4, None, 2, 2, False, (4, 16)),       # a given micro-batch: the smallest global batch >= 16 that fits
    (5, None, 1, 1, False, (5, 20)),
    (None, 64, 4, 2, False, (8, 64)),      # a given global batch: the largest micro-batch <= 16 that fits
    (6, 10, 1, 1, False, (6, 10)),         # both given: kept as they are (the layout check refuses them)
    (None, None, 8, 4, False, (1, 32)),
])
def test_fit_batch(micro, global_, dp, pp, interleaved, expected):
    choice = fit_batch(micro, global_, dp, pp, interleaved)
    assert (choice.micro, choice.global_) == expected


@pytest.mark.parametrize("world,tp,pp,schedule", [
    (w, tp, pp, s) for w, tp, pp, s in itertools.product((1, 2, 3, 4, 6, 8, 16, 64), (1, 2), (1, 2, 4),
                                                         ("1f1b", "interleaved_1f1b"))
    if w % (tp * pp) == 0 and (pp > 1 or s == "1f1b")])
def test_every_valid_layout_gets_batch_sizes_that_fit_it(world, tp, pp, schedule):
    argv = ["--dry-run", "--world-size", str(world), "--tp", str(tp), "--pp", str(pp), "--pipeline-schedule", schedule]
    if schedule == "interleaved_1f1b":
        argv += ["--num-layers", str(4 * pp), "--num-layers-per-virtual-stage", "2"]
    dims = dims_from_config(parse_args(argv))  # raises LayoutError if the chosen sizes did not fit
    assert dims.world_size == world


def test_flags_the_user_set_are_never_changed_and_keep_their_one_line_error():
    cfg = parse_args(["--dry-run", "--world-size", "8", "--pp", "4", "--global-batch-size", "16",
                      "--micro-batch-size", "4"])
    with pytest.raises(LayoutError, match="pipeline parallelism needs at least PP=4 micro-batches"):
        dims_from_config(cfg)
    assert (cfg.training.micro_batch_size, cfg.training.global_batch_size) == (4, 16)


def test_the_chosen_sizes_are_logged_once_and_written_into_the_config(capsys):
    cfg = parse_args(["--dry-run", "--world-size", "4", "--pp", "2"])
    dims_from_config(cfg)
    dims_from_config(cfg)
    out = capsys.readouterr().out
    assert out.count("--micro-batch-size and --global-batch-size not given: global 16 = micro 4 x DP 2 x 2 "
                     "micro-batches per step") == 1
    assert (cfg.training.micro_batch_size, cfg.training.global_batch_size) == (4, 16)


@pytest.mark.parametrize("preset", sorted(RECIPE_BATCH))
def test_the_presets_recipe_batch_is_the_paper_configs(preset):
    recipe = yaml.safe_load((REPO / "examples" / "configs" / f"paper_{preset}_clm_then_mlm.yaml").read_text())
    assert RECIPE_BATCH[preset] == (recipe["training"]["micro_batch_size"], recipe["training"]["global_batch_size"])


def test_a_preset_dry_run_uses_its_recipes_batch():
    cfg = parse_args(["--model", "610m", "--dry-run", "--world-size", "64", "--tp", "2", "--pp", "4"])
    dims = dims_from_config(cfg)
    assert (cfg.training.micro_batch_size, cfg.training.global_batch_size) == (12, 1152)
    resolve_parallel_dims(64, ParallelConfig(tensor_model_parallel_size=2, pipeline_model_parallel_size=4),
                          TrainingConfig(micro_batch_size=12, global_batch_size=1152),
                          dict(num_layers=26, num_attention_heads=18, num_query_groups=6, ffn_hidden_size=4096,
                               seq_length=2048, vocab_size=128256))
    assert dims.dp == 8


def test_a_dry_run_needs_no_save_even_with_checkpoint_flags():
    recipe = REPO / "examples" / "configs" / "paper_610m_clm_then_mlm.yaml"
    cfg = parse_args(["--config", str(recipe), "--dry-run", "--world-size", "64", "--keep-last", "2"])
    assert cfg.checkpoint.save is None and cfg.checkpoint.save_interval == 1000
    with pytest.raises(Exception, match="--save-interval needs --save"):
        parse_args(["--config", str(recipe)])

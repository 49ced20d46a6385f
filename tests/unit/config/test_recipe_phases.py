"""A recipe in phases resolved once (megamlm/config/phases.py): inheritance, step, sample and token ranges, the
objective-only flags as the same phases, lengths in tokens, and every bad phase refused in one line before any work."""

import dataclasses

import pytest
import yaml

from megamlm.config import ConfigError, parse_args
from megamlm.config.phase_fields import PhaseConfig, RecipeConfig
from megamlm.config.phases import recipe_of
from megamlm.config.roles import ROLES

BATCH = ["--micro-batch-size", "4", "--global-batch-size", "8"]


def config_with(tmp_path, phases, *argv):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"phases": phases}))
    return parse_args(["--config", str(path), *BATCH, *argv])


THREE = [
    {"steps": 4, "seq_length": 64, "mask_ratio": 0.3},
    {"steps": 3, "seq_length": 128, "rope_theta": 80000.0, "mask_ratio": 0.15},
    {"mask_ratio": 0.05, "lr_decay": True, "lr_wsd_decay_style": "minus_sqrt"},
]


def test_phases_inherit_and_place_their_steps_samples_and_tokens(tmp_path):
    cfg = config_with(tmp_path, THREE, "--train-iters", "10", "--seq-length", "128")
    recipe = recipe_of(cfg)
    first, second, third = recipe.phases
    assert [(p.first_step, p.last_step) for p in recipe.phases] == [(1, 4), (5, 7), (8, 10)]
    assert [(p.first_sample, p.end_sample) for p in recipe.phases] == [(0, 32), (32, 56), (56, 80)]
    assert [p.seq_length for p in recipe.phases] == [64, 128, 128]  # the third inherits the second's
    assert [p.rope_bases for p in recipe.phases] == [(10000.0, None), (80000.0, None), (80000.0, None)]
    assert [p.mask_ratio for p in recipe.phases] == [0.3, 0.15, 0.05]
    assert recipe.boundaries == (4, 7)
    assert [recipe.tokens_through(s) for s in (0, 4, 5, 10)] == [0, 32 * 64, 32 * 64 + 8 * 128, 32 * 64 + 48 * 128]
    assert third.lr_decay and not first.lr_decay and not second.lr_decay
    # The decay phase is the one WSD schedule's decay, with its shape.
    assert (cfg.training.lr_wsd_decay_iters, cfg.training.lr_wsd_decay_style) == (3, "minus_sqrt")


def test_the_objective_only_flags_are_the_same_phases(tmp_path):
    flags = parse_args([*BATCH, "--objective", "mlm,clm,mlm", "--switch-step", "6,9", "--train-iters", "10"])
    listed = config_with(tmp_path, [{"steps": 6, "objective": "mlm"}, {"steps": 3, "objective": "clm"},
                                    {"objective": "mlm"}], "--train-iters", "10")
    assert recipe_of(flags) == recipe_of(listed)
    # the phases' objectives are the run's schedule: what the ObjectiveSchedule, the history and the planners read
    assert (listed.objective.objective, listed.objective.switch_step) == ("mlm,clm,mlm", [6, 9])


def test_phases_of_one_objective_keep_one_objective_and_no_switch(tmp_path):
    cfg = config_with(tmp_path, [{"steps": 3, "seq_length": 64}, {"steps": 7}], "--train-iters", "10")
    assert (cfg.objective.objective, cfg.objective.switch_step) == ("mlm", None)
    assert recipe_of(cfg).boundaries == (3,)


def test_lengths_in_tokens(tmp_path):
    cfg = config_with(tmp_path, [{"tokens": 1000, "seq_length": 64}, {"seq_length": 128}],
                      "--train-tokens", "3000", "--seq-length", "128")
    recipe = recipe_of(cfg)
    # 8 x 64 = 512 tokens a step: 1,000 tokens end after step 2 (1,024); then 1,024 a step up to 3,000 (step 4)
    assert [(p.first_step, p.last_step) for p in recipe.phases] == [(1, 2), (3, 4)]
    assert cfg.training.train_iters == 4 and recipe.tokens_through(4) == 3072
    one = parse_args([*BATCH, "--train-tokens", "10000", "--seq-length", "128"])
    assert one.training.train_iters == 10  # 1,024 tokens a step


@pytest.mark.parametrize("phases, argv, message", [
    ([{"steps": 4, "sequence_length": 64}, {}], [],
     "unknown key phase 1.sequence_length; known: data_path, fraction, global_batch_size"),
    ([{"steps": 4, "global_batch_size": 10}, {}], ["--train-iters", "10"],
     "phase 1.global_batch_size 10 is not a multiple of --micro-batch-size x data-parallel size = 4"),
    ([{"steps": 4}, {"valid_data_path": ["x"]}], ["--train-iters", "10"], "phase 2 sets valid_data_path, but the "
     "phases before it have no validation data; give the run --valid-data-path (or --split), or set it in phase 1"),
    ([{"steps": 4, "lr_warmup_iters": 2}, {}], [], "phase 1.lr_warmup_iters 2: a re-warmup takes at least 1 step, "
     "in a phase after the first"),
    ([{"steps": 4}, {"steps": 3, "lr_warmup_iters": 4}, {}], ["--train-iters", "10"],
     "phase 2.lr_warmup_iters 4 is longer than the phase's 3 steps"),
    ([{"steps": 4}, {"steps": 4}], ["--train-iters", "10"],
     "the phases' lengths add up to 8 steps, but the run is 10 steps (--train-iters)"),
    ([{"steps": 10}, {}], ["--train-iters", "10"], "phase 2 starts after the run's end"),
    ([{"steps": 4, "seq_length": 256}, {}], ["--train-iters", "10"],
     "phase 1.seq_length 256 is beyond the model's 128 positions (--seq-length)"),
    ([{"steps": 4}, {"seq_length": 66}], ["--train-iters", "10", "--tp", "4", "--world-size", "4", "--dry-run"],
     "phase 2.seq_length 66 is not divisible by --tensor-model-parallel-size 4"),
    ([{"steps": 4, "lr_decay": True}, {}], ["--train-iters", "10"],
     "phase 1 decays before the last phase: give phase 2 the lr it decays to (e.g. lr: 0.0015)"),
    ([{"steps": 4, "lr": 1e-3}, {}], ["--train-iters", "10"], "phase 1.lr 0.001: a phase's learning rate is "
     "positive, in a phase after the first (the first phase's is --lr)"),
    ([{"steps": 4}, {"lr": 0.0}], ["--train-iters", "10"], "phase 2.lr 0.0: a phase's learning rate is positive"),
    ([{"steps": 4}, {"lr": 1e-3}], ["--train-iters", "10", "--lr-decay-style", "cosine"],
     "shape a WSD schedule piece by piece, but --lr-decay-style is cosine"),
    ([{"tokens": 100}, {}], ["--train-iters", "10"], "phases with lengths in tokens need the run's length in tokens"),
    ([{}, {"steps": 4}], ["--train-iters", "10"], "phase 1 has no length"),
    ([{"steps": 4, "fraction": 0.5}, {}], ["--train-iters", "10"], "phase 1 gives both steps and fraction"),
    ([{"fraction": 1.5}, {}], ["--train-iters", "10"], "phase 1.fraction must be strictly between 0 and 1"),
    ([{"steps": 4}, {"fraction": 0.3}, {}], ["--train-iters", "10"],
     "the phases give their lengths both as fractions of the run and in steps or tokens"),
    ([{"steps": 4, "objective": "bert"}, {}], ["--train-iters", "10"], "phase 1.objective 'bert' is not one of"),
    ([{"steps": 4, "objective": "clm"}, {"objective": "mlm"}], ["--train-iters", "10", "--objective", "mlm,clm"],
     "give the schedule two ways"),
    ([{"steps": 4}, {"lr_decay": True}], ["--train-iters", "10", "--lr-decay-style", "cosine"],
     "sets lr_decay, the WSD decay, but --lr-decay-style is cosine"),
    ([{"steps": 4, "seq_length": 64}, {"seq_length": 128}], ["--train-iters", "10", "--continue-from", "ckpt/p"],
     "--continue-from with phases that change the data or the sequence length is not built yet"),
])
def test_a_bad_phase_is_one_line_naming_it(tmp_path, phases, argv, message):
    with pytest.raises(ConfigError) as err:
        config_with(tmp_path, phases, *argv)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_phase_field_declares_the_role_of_the_run_setting_it_overrides():
    roles = {f.name: f.metadata["role"] for f in dataclasses.fields(PhaseConfig)}
    assert set(roles.values()) <= set(ROLES)
    assert (roles["seq_length"], roles["data_path"], roles["mask_ratio"], roles["objective"], roles["steps"],
            roles["rope_theta"]) == ("stream", "stream", "masking", "objective", "schedule", "shape")
    assert dataclasses.fields(RecipeConfig)[0].metadata["yaml_only"]


def test_the_phases_list_is_not_a_flag():
    with pytest.raises(ConfigError, match="unrecognized arguments: --phases"):
        parse_args(["--phases", "x"])


def test_save_at_in_tokens_pins_the_first_step_that_reaches_them(tmp_path):
    cfg = config_with(tmp_path, [{"steps": 2, "seq_length": 64}, {"seq_length": 128}], "--train-iters", "6",
                      "--seq-length", "128",
                      "--save", str(tmp_path / "ckpt"), "--save-at-tokens", "1024,2000", "--save-at", "5")
    # 512 tokens in each of steps 1-2, 1,024 after: 1,024 tokens by step 2, 2,000 by step 3
    assert cfg.checkpoint.save_at == [2, 3, 5]
    with pytest.raises(ConfigError, match="--save-at-tokens 99,999 is outside this run's 5,120 tokens"):
        config_with(tmp_path, [{"steps": 2, "seq_length": 64}, {"seq_length": 128}], "--train-iters", "6",
                    "--seq-length", "128",
                    "--save", str(tmp_path / "ckpt"), "--save-at-tokens", "99999")


def test_a_phase_re_warms_the_one_schedule_up_from_its_first_step(tmp_path):
    from megamlm.training.lineage import Segment

    cfg = config_with(tmp_path, [{"steps": 4}, {"steps": 4, "lr_warmup_iters": 2}, {}], "--train-iters", "10",
                      "--lr-warmup-iters", "2", "--lr-wsd-decay-iters", "2")
    table = Segment.of_config(cfg).lr_schedule_object().table(10)
    plain = config_with(tmp_path, [{"steps": 4}, {"steps": 4}, {}], "--train-iters", "10", "--lr-warmup-iters", "2",
                        "--lr-wsd-decay-iters", "2")
    base = Segment.of_config(plain).lr_schedule_object().table(10)
    flags = parse_args([*BATCH, "--train-iters", "10", "--lr-warmup-iters", "2", "--lr-wsd-decay-iters", "2"])
    assert base.tolist() == Segment.of_config(flags).lr_schedule_object().table(10).tolist()
    assert table[4] == base[4] / 2 and table[5] == base[5]  # steps 5 and 6: 1/2 and 2/2 of the schedule's
    assert [table[i] for i in (0, 1, 2, 3, 6, 7, 8, 9)] == [base[i] for i in (0, 1, 2, 3, 6, 7, 8, 9)]
    assert "re-warmed up over steps 5-6" in Segment.of_config(cfg).lr_schedule_object().describe()


def test_phases_shape_the_learning_rate_piece_by_piece(tmp_path):
    """Ettin's shape: a stable phase, a middle phase that decays (1-sqrt) to half the rate, and a last phase that
    starts there and decays (1-sqrt) to --min-lr; every step's rate is the formula's, computed here directly."""
    import math

    from megamlm.training.lineage import Segment

    cfg = config_with(tmp_path, [{"steps": 4}, {"steps": 3, "lr_decay": True, "lr_wsd_decay_style": "minus_sqrt"},
                                 {"lr": 4e-4, "lr_decay": True, "lr_wsd_decay_style": "minus_sqrt"}],
                      "--train-iters", "10", "--lr", "8e-4", "--min-lr", "1.6e-5", "--lr-warmup-iters", "2")
    schedule = Segment.of_config(cfg).lr_schedule_object()
    table = schedule.table(10).tolist()
    decay = [4e-4 + (8e-4 - 4e-4) * (1 - math.sqrt(k / 3)) for k in (1, 2, 3)]
    final = [1.6e-5 + (4e-4 - 1.6e-5) * (1 - math.sqrt(k / 3)) for k in (1, 2, 3)]
    assert table == [4e-4, 8e-4, 8e-4, 8e-4, *decay, *final]
    assert [p.lr for p in recipe_of(cfg).phases] == [8e-4, 8e-4, 4e-4]
    assert "steps 5-7 a 1-sqrt decay 0.0008 -> 0.0004" in schedule.describe()
    # A phase that only sets its level holds it, and the phase after inherits where it ended.
    held = config_with(tmp_path, [{"steps": 4}, {"steps": 3, "lr": 3e-4}, {}], "--train-iters", "10", "--lr", "8e-4")
    assert Segment.of_config(held).lr_schedule_object().table(10).tolist() == [8e-4] * 4 + [3e-4] * 6


def test_a_last_phase_decay_by_phase_equals_the_one_wsd_schedule_float_for_float(tmp_path):
    """The piecewise form's decay to --min-lr is WSD's own: a recipe that sets its middle phase's rate to --lr
    (the same schedule, written piece by piece) has WSD's table bitwise."""
    from megamlm.training.lineage import Segment

    argv = ["--train-iters", "10", "--lr", "8e-4", "--min-lr", "1e-5", "--lr-warmup-iters", "2"]
    last = {"lr_decay": True, "lr_wsd_decay_style": "minus_sqrt"}
    one = config_with(tmp_path, [{"steps": 4}, {"steps": 3}, last], *argv)
    pieces = config_with(tmp_path, [{"steps": 4}, {"steps": 3, "lr": 8e-4}, last], *argv)
    assert not Segment.of_config(one).lr_schedule_object().phase_lrs
    assert Segment.of_config(pieces).lr_schedule_object().phase_lrs
    assert Segment.of_config(one).lr_schedule_object().table(10).tolist() == \
        Segment.of_config(pieces).lr_schedule_object().table(10).tolist()


def test_lengths_as_fractions_scale_with_the_run(tmp_path):
    """Fractions of the run place each phase's end as --switch's do: round(shares so far x --train-iters)."""
    phases = [{"fraction": 0.5, "seq_length": 64}, {"fraction": 0.25}, {}]
    ends = {iters: [p.last_step for p in recipe_of(config_with(tmp_path, phases, "--train-iters", str(iters)))
                    .phases] for iters in (40, 4, 10)}
    assert ends == {40: [20, 30, 40], 4: [2, 3, 4], 10: [5, 8, 10]}  # round(0.75 x 10) = 8
    tokens = recipe_of(config_with(tmp_path, phases, "--train-tokens", "8192", "--seq-length", "128"))
    # 8 x 64 = 512 tokens a step (every phase inherits the first's 64): 4,096 by step 8, 6,144 by 12, 8,192 by 16
    assert [p.last_step for p in tokens.phases] == [8, 12, 16]

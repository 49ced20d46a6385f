import math

import pytest

from megamlm.training.optim import LRSchedule


def test_wsd_warms_up_holds_then_decays_to_min_lr():
    s = LRSchedule(1e-3, 1e-5, "wsd", warmup_iters=2000, decay_iters=2000, train_iters=42_000)
    assert s.lr_at(1) == pytest.approx(1e-3 / 2000)
    assert s.lr_at(2000) == pytest.approx(1e-3)
    assert s.lr_at(20_000) == pytest.approx(1e-3)
    assert s.lr_at(40_000) == pytest.approx(1e-3)
    assert s.lr_at(41_000) == pytest.approx((1e-3 + 1e-5) / 2)
    assert s.lr_at(42_000) == pytest.approx(1e-5)


def test_cosine_and_linear_end_at_min_lr():
    for style in ("cosine", "linear"):
        s = LRSchedule(1.0, 0.1, style, warmup_iters=10, decay_iters=0, train_iters=110)
        assert s.lr_at(10) == pytest.approx(1.0)
        assert s.lr_at(110) == pytest.approx(0.1)
    cos = LRSchedule(1.0, 0.0, "cosine", 0, 0, 100)
    assert cos.lr_at(50) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))


def test_schedule_continues_unchanged_across_an_objective_switch():
    """One schedule for the whole run: nothing restarts at the switch step."""
    s = LRSchedule(1.0, 0.0, "wsd", warmup_iters=10, decay_iters=10, train_iters=100)
    values = [s.lr_at(k) for k in range(1, 101)]
    assert values[24] == values[25] == 1.0  # steps 25 and 26 around a 0.25 switch


@pytest.mark.parametrize("style", ["wsd", "cosine", "linear"])
def test_the_lr_never_goes_below_min_lr_and_ends_on_it(style):
    from megamlm.config import TrainingConfig, warmup_iters, wsd_decay_iters

    for iters in range(1, 400):
        for min_lr in (0.0, 1e-5):
            t = TrainingConfig(train_iters=iters, lr_decay_style=style, min_lr=min_lr)
            schedule = LRSchedule(3e-3, min_lr, style, warmup_iters(t), wsd_decay_iters(t), iters)
            lrs = [schedule.lr_at(step) for step in range(1, iters + 1)]
            assert min(lrs) >= min_lr, (iters, min_lr, min(lrs))
            if iters > 1:
                assert lrs[-1] == min_lr, (iters, lrs[-1])


def test_a_short_wsd_run_decays():
    from megamlm.config import TrainingConfig, wsd_decay_iters

    assert [wsd_decay_iters(TrainingConfig(train_iters=n)) for n in (1, 2, 8, 9, 20, 30, 300)] == [0, 1, 1, 1, 1, 2, 15]
    schedule = LRSchedule(3e-3, 0.0, "wsd", 0, wsd_decay_iters(TrainingConfig(train_iters=8)), 8)
    assert [schedule.lr_at(step) for step in range(1, 9)] == [3e-3] * 7 + [0.0]


def test_the_start_up_line_describes_each_style():
    assert LRSchedule(1e-3, 0.0, "wsd", 50, 100, 500).describe() == (
        "learning rate 0.001: 50 warmup steps, then constant to step 400 and a linear decay over the last 100 steps "
        "to 0 (wsd)")
    assert LRSchedule(3e-4, 1e-5, "cosine", 0, 0, 1000).describe() == (
        "learning rate 0.0003: cosine decay to 1e-05 at step 1000")
    assert LRSchedule(1.0, 0.0, "constant", 10, 0, 100).describe() == "learning rate 1: 10 warmup steps, then constant"
    # Issue 31, item 10: one decay step is "the last step", not "the last 1 steps".
    assert LRSchedule(1e-3, 0.0, "wsd", 1, 1, 5).describe() == (
        "learning rate 0.001: 1 warmup step, then constant to step 4 and a linear decay over the last step to 0 (wsd)")


def test_a_wsd_decay_length_with_another_style_is_named_as_unused():
    from megamlm.config import parse_args, unused_lr_settings

    def unused(*flags):
        return unused_lr_settings(parse_args(["--model", "tiny", "--train-iters", "100", *flags]).training)

    assert unused("--lr-wsd-decay-iters", "10") is None
    assert unused("--lr-decay-style", "cosine") is None
    assert unused("--lr-decay-style", "cosine", "--lr-wsd-decay-iters", "10") == (
        "--lr-wsd-decay-iters unused: it sets the decay of --lr-decay-style wsd, and this run's style is cosine")
    assert unused("--lr-decay-style", "linear", "--lr-wsd-decay-fraction", "0.1") == (
        "--lr-wsd-decay-fraction unused: it sets the decay of --lr-decay-style wsd, and this run's style is linear")


def test_the_default_lr_table_is_bitwise_the_one_before_wsd_decay_styles():
    """Issue 44, item 5: adding --lr-wsd-decay-style changes no float of the default (linear) WSD schedule. The digest
    is of the tables the code before the styles produced (commit 57cb90b) for these runs."""
    import hashlib

    from megamlm.config import TrainingConfig, warmup_iters, wsd_decay_iters

    digest = hashlib.sha256()
    for iters in (1, 2, 7, 300, 1000, 42000):
        for min_lr in (0.0, 1e-5):
            t = TrainingConfig(train_iters=iters, min_lr=min_lr)
            schedule = LRSchedule(3e-3, min_lr, "wsd", warmup_iters(t), wsd_decay_iters(t), iters,
                                  t.lr_wsd_decay_style)
            digest.update(schedule.table(iters).tobytes())
    digest.update(LRSchedule(5e-4, 5e-5, "wsd", 2000, 2000, 42000).table(42000).tobytes())
    assert digest.hexdigest() == "44513f4c48b2c2a443b56d1968c640f5c883757167752df642386d17e583536f"
    # and the linear schedule's settings read as before (earlier checkpoints' schedules are the same schedule)
    assert "wsd_decay_style" not in LRSchedule(1.0, 0.0, "wsd", 1, 1, 4).state_dict()
    assert LRSchedule(1.0, 0.0, "wsd", 1, 1, 4, "cosine").state_dict()["wsd_decay_style"] == "cosine"


def _megatron_lrs(peak, min_lr, warmup, decay, iters, style):
    """The LR megatron-core's OptimizerParamScheduler holds after each of ``iters`` steps (WSD over the whole run)."""
    scheduler_module = pytest.importorskip("megatron.core.optimizer_param_scheduler",
                                           reason="megatron-core is in the [test] extra")
    import inspect

    if "lr_wsd_decay_style" not in inspect.signature(scheduler_module.OptimizerParamScheduler).parameters:
        pytest.skip("this megatron-core has no --lr-wsd-decay-style (0.16 has)")

    class Holder:
        param_groups = [{}]

    scheduler = scheduler_module.OptimizerParamScheduler(
        Holder(), init_lr=0.0, max_lr=peak, min_lr=min_lr, lr_warmup_steps=warmup, lr_decay_steps=iters,
        lr_decay_style="WSD", start_wd=0.1, end_wd=0.1, wd_incr_steps=iters, wd_incr_style="constant",
        wsd_decay_steps=decay, lr_wsd_decay_style=style)
    lrs = []
    for _ in range(iters):
        scheduler.step(1)
        lrs.append(Holder.param_groups[0]["lr"])
    return lrs


@pytest.mark.parametrize("style", ["linear", "cosine", "exponential", "minus_sqrt"])
def test_each_wsd_decay_style_is_megatrons_over_a_whole_schedule(style):
    """Issue 44 acceptance: step k's LR is what megatron-core's scheduler holds after k steps (megamlm trains step k
    with it; Megatron, which steps its scheduler after each iteration, trains its iteration k + 1 with it), for every
    step of a warmup-stable-decay run. With min-lr 0 every float is Megatron's; with min-lr > 0 Megatron computes its
    stable phase as min + 1.0 x (peak - min), which can differ from peak in the last bit."""
    iters, warmup, decay = 600, 50, 170
    for peak, min_lr in ((3e-3, 0.0), (5e-4, 5e-5)):
        ours = LRSchedule(peak, min_lr, "wsd", warmup, decay, iters, style).table(iters).tolist()
        megatron = _megatron_lrs(peak, min_lr, warmup, decay, iters, style)
        if min_lr == 0.0:
            assert ours == megatron
        else:
            assert ours == pytest.approx(megatron, rel=1e-14, abs=0)
        assert ours[-1] == min_lr and min(ours[warmup:]) >= min_lr
    shapes = {s: LRSchedule(1.0, 0.0, "wsd", 0, 4, 8, s).table(8).tolist()[4:] for s in
              ("linear", "cosine", "exponential", "minus_sqrt")}
    assert shapes["linear"] == [0.75, 0.5, 0.25, 0.0]
    assert shapes["minus_sqrt"] == pytest.approx([1 - 0.25 ** 0.5, 1 - 0.5 ** 0.5, 1 - 0.75 ** 0.5, 0.0])


def test_the_start_up_line_names_the_wsd_decay_shape():
    assert LRSchedule(1e-3, 0.0, "wsd", 50, 100, 500, "minus_sqrt").describe() == (
        "learning rate 0.001: 50 warmup steps, then constant to step 400 and a 1-sqrt decay over the last 100 steps "
        "to 0 (wsd)")


def test_an_unknown_wsd_decay_style_is_one_line():
    from megamlm.config import ConfigError, parse_args

    with pytest.raises(ConfigError, match="invalid choice: '1-sqrt'.*minus_sqrt"):
        parse_args(["--lr-wsd-decay-style", "1-sqrt"])
    assert parse_args(["--lr-wsd-decay-style", "minus_sqrt"]).training.lr_wsd_decay_style == "minus_sqrt"


@pytest.mark.parametrize("style", ["linear", "cosine", "exponential", "minus_sqrt"])
def test_a_phase_that_decays_to_the_next_phases_rate_is_megatrons_decay_over_the_phase(style):
    """A recipe's middle phase that decays (Ettin's mid-training: 8e-4 to 4e-4) is, step by step, megatron-core's
    WSD decay from the phase's rate to the next phase's over the phase's steps; the phase after holds its rate."""
    phases = ((1, 20, 8e-4, None, None), (21, 73, 8e-4, 4e-4, style), (74, 80, 4e-4, None, None))
    ours = LRSchedule(8e-4, 0.0, "wsd", 5, 0, 80, phase_lrs=phases).table(80).tolist()
    assert ours[5:20] == [8e-4] * 15 and ours[73:] == [4e-4] * 7
    assert ours[20:73] == pytest.approx(_megatron_lrs(8e-4, 4e-4, 0, 53, 53, style), rel=1e-14, abs=0)

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

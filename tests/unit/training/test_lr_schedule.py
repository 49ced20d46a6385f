import math

import pytest

from megamlm.training.lr_schedule import LRSchedule


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

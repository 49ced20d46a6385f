"""The non-finite guard decided on the device (fused AdamW's found_inf): the same decisions and values as the
synchronous train_step, and a skipped update changes no parameter and no optimizer state, bit for bit."""

import copy

import pytest
import torch

from megamlm.model.transformer import Transformer
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.forward_backward import forward_backward, global_grad_norm
from megamlm.parallel.parallelize import parallelize
from megamlm.training.nonfinite import SkipStreak, nonfinite_flag
from megamlm.training.optim import build_optimizer
from megamlm.training.step import guarded_update, train_step

from helpers import assert_same, objective_batches, snapshot, tiny_args

ARGS = tiny_args()
CPU = torch.device("cpu")


def batches(step: int):
    return objective_batches(step, "mlm")


def fused_adamw(model):
    optimizer = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8)
    assert optimizer.defaults["fused"]  # the trainer's optimizer is the fused one, on CPU too
    return optimizer


def device_step(pm, optimizer, step, lr=1e-3, clip=1.0):
    loss, _ = forward_backward(pm, batches(step), CPU)
    norm = global_grad_norm(pm)
    loss_tensor = torch.tensor(loss, dtype=torch.float64)
    applied = guarded_update(pm, optimizer, loss_tensor, norm, lr, clip)
    return loss_tensor, norm, applied


@pytest.fixture
def trained():
    torch.manual_seed(0)
    model = Transformer(ARGS)
    pm = parallelize(model, ParallelDims(world_size=1), None, CPU)
    optimizer = fused_adamw(model)
    assert bool(device_step(pm, optimizer, 1)[2])
    return model, pm, optimizer


def overflow(model):
    """A finite gradient whose squared norm overflows fp32."""
    return model.layers["0"].mlp.up_proj.weight.register_hook(lambda g: g + 1e20)


@pytest.mark.parametrize("poison", ["overflowing norm", "nan gradient"])
def test_a_non_finite_step_changes_no_parameter_and_no_optimizer_state(trained, poison):
    model, pm, optimizer = trained
    params, state = snapshot(model, optimizer)
    hook = (overflow(model) if poison == "overflowing norm"
            else model.layers["1"].self_attn.q_proj.weight.register_hook(lambda g: g * float("nan")))
    _, norm, applied = device_step(pm, optimizer, 2)
    hook.remove()
    assert applied.dtype == torch.bool and applied.dim() == 0 and not bool(applied)
    assert not torch.isfinite(norm)
    after_params, after_state = snapshot(model, optimizer)
    assert_same(params, after_params)
    for name in state:
        assert_same(state[name], after_state[name])  # moments and the step count included
    assert all(p.grad is None for p in model.parameters())
    assert bool(device_step(pm, optimizer, 3)[2])  # and the next good step trains on


def test_the_device_decision_gives_the_synchronous_steps_values(trained):
    """Step by step, a finite step, a skipped one and finite ones again: the same loss, norm and decision as
    train_step, and bitwise the same weights and optimizer state afterwards."""
    model, pm, optimizer = trained
    sync_model = copy.deepcopy(model)
    sync_pm = parallelize(sync_model, ParallelDims(world_size=1), None, CPU)
    sync_optimizer = fused_adamw(sync_model)
    sync_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # load_state_dict would share tensors
    for step in (2, 3, 4, 5):
        hooks = [overflow(m) for m in (model, sync_model)] if step == 3 else []
        want = train_step(sync_pm, sync_optimizer, batches(step), 1e-3, 1.0, CPU)
        loss, norm, applied = device_step(pm, optimizer, step)
        for h in hooks:
            h.remove()
        assert (float(loss), float(norm), bool(applied)) == (want.loss, want.grad_norm, want.applied)
        assert want.applied == (step != 3)
        mine, theirs = snapshot(model, optimizer), snapshot(sync_model, sync_optimizer)
        assert_same(mine[0], theirs[0])
        for name in mine[1]:
            assert_same(mine[1][name], theirs[1][name])


def test_the_flag_marks_any_non_finite_value():
    finite, inf, nan = torch.tensor(1.0), torch.tensor(float("inf")), torch.tensor(float("nan"))
    assert [float(nonfinite_flag(a, b)) for a, b in ((finite, finite), (inf, finite), (finite, nan))] == [0, 1, 1]


def test_an_optimizer_that_cannot_skip_on_the_device_is_refused(trained):
    model, pm, _ = trained
    unfused = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="needs torch.optim.AdamW\\(fused=True\\)"):
        guarded_update(pm, unfused, torch.tensor(1.0), torch.tensor(1.0), 1e-3, 1.0)


def test_train_step_on_the_device_returns_the_synchronous_values_as_unread_tensors(trained):
    """train_step with a SkipStreak: loss, norm and applied are 0-d tensors equal to the synchronous step's."""
    model, pm, optimizer = trained
    sync_model = copy.deepcopy(model)
    sync_pm = parallelize(sync_model, ParallelDims(world_size=1), None, CPU)
    sync_optimizer = fused_adamw(sync_model)
    sync_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    streak = SkipStreak(0, 3, CPU)
    for step in (2, 3, 4):
        hooks = [overflow(m) for m in (model, sync_model)] if step == 3 else []
        want = train_step(sync_pm, sync_optimizer, batches(step), 1e-3, 1.0, CPU)
        got = train_step(pm, optimizer, batches(step), 1e-3, 1.0, CPU, streak=streak)
        for h in hooks:
            h.remove()
        assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in (got.loss, got.grad_norm, got.applied))
        assert (got.loss.item(), got.grad_norm.item(), bool(got.applied)) == (want.loss, want.grad_norm, want.applied)
        assert got.predicted_tokens == want.predicted_tokens
        assert_same(snapshot(model, optimizer)[0], snapshot(sync_model, sync_optimizer)[0])
    assert int(streak.count) == 0 and not bool(streak.stopped)  # the skip at step 3 was followed by a good step


def test_a_complete_streak_holds_back_every_later_update_until_the_host_stops_the_run(trained):
    model, pm, optimizer = trained
    streak = SkipStreak(1, 2, CPU)  # a resumed run one skip into its streak: the next skip completes it
    hook = overflow(model)
    assert not bool(train_step(pm, optimizer, batches(2), 1e-3, 1.0, CPU, streak=streak).applied)
    hook.remove()
    assert int(streak.count) == 2 and bool(streak.stopped)
    params, state = snapshot(model, optimizer)
    held = train_step(pm, optimizer, batches(3), 1e-3, 1.0, CPU, streak=streak)  # finite, but held back
    assert torch.isfinite(held.loss) and torch.isfinite(held.grad_norm) and not bool(held.applied)
    after_params, after_state = snapshot(model, optimizer)
    assert_same(params, after_params)
    for name in state:
        assert_same(state[name], after_state[name])


def test_a_resumed_complete_streak_does_not_hold_back_a_good_step(trained):
    """A relaunch after the stop (its checkpoint's streak is complete) trains on when the next step is finite."""
    _, pm, optimizer = trained
    streak = SkipStreak(2, 2, CPU)
    assert bool(train_step(pm, optimizer, batches(2), 1e-3, 1.0, CPU, streak=streak).applied)
    assert int(streak.count) == 0

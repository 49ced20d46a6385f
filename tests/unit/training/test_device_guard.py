"""The non-finite skip decided on the device (fused AdamW's found_inf): the same decisions and values as a step that
reads its numbers on the host, and a skipped update changes no parameter and no optimizer state, bit for bit; an
optimizer without found_inf (apex's FusedAdam) skips on the host."""

import copy
import math

import pytest
import torch
from helpers import assert_same, objective_batches, snapshot, tiny_args

from megamlm.model.transformer import Transformer
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.parallelize import parallelize
from megamlm.training.nonfinite import NonFiniteGuard
from megamlm.training.optim import build_optimizer
from megamlm.training.step import SkipStreak, StepSetup, forward_backward, global_grad_norm, skip_streak, train_step

ARGS = tiny_args()
CPU = torch.device("cpu")


def batches(step: int):
    return objective_batches(step, "mlm")


def fused_adamw(model):
    optimizer = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8)
    assert optimizer.defaults["fused"]  # the trainer's optimizer is the fused one, on CPU too
    return optimizer


def device_step(pm, optimizer, step, lr=1e-3, clip=1.0):
    result = train_step(StepSetup.of(pm, CPU, clip), optimizer, batches(step), lr)
    return result.loss, result.grad_norm, result.applied


def host_step(pm, optimizer, step, lr=1e-3, clip=1.0):
    """The step with the decision read on the host: the update (no found_inf) only where both numbers are finite."""
    setup = StepSetup.of(pm, CPU, clip)
    loss, _ = forward_backward(setup, batches(step))
    norm = global_grad_norm(setup)
    applied = math.isfinite(float(loss)) and math.isfinite(float(norm))
    if applied:
        torch.nn.utils.clip_grads_with_norm_([p for p in pm.model.parameters() if p.grad is not None], clip, norm)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss), float(norm), applied


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


def test_the_device_decision_gives_the_host_decisions_values(trained):
    """Step by step, a finite step, a skipped one and finite ones again: the same loss, norm and decision as a step
    that reads them on the host, and bitwise the same weights and optimizer state afterwards."""
    model, pm, optimizer = trained
    sync_model = copy.deepcopy(model)
    sync_pm = parallelize(sync_model, ParallelDims(world_size=1), None, CPU)
    sync_optimizer = fused_adamw(sync_model)
    sync_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # load_state_dict would share tensors
    for step in (2, 3, 4, 5):
        hooks = [overflow(m) for m in (model, sync_model)] if step == 3 else []
        want = host_step(sync_pm, sync_optimizer, step)
        loss, norm, applied = device_step(pm, optimizer, step)
        for h in hooks:
            h.remove()
        assert (float(loss), float(norm), bool(applied)) == want
        assert want[2] == (step != 3)
        mine, theirs = snapshot(model, optimizer), snapshot(sync_model, sync_optimizer)
        assert_same(mine[0], theirs[0])
        for name in mine[1]:
            assert_same(mine[1][name], theirs[1][name])


def test_an_optimizer_without_found_inf_skips_on_the_host(trained):
    """apex's FusedAdam takes no found_inf (torch's unfused AdamW stands in for it): the host reads the flag, a NaN
    step leaves the weights and the optimizer state as they were, and such a run reads every step (no streak)."""
    model, pm, _ = trained
    unfused = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=False)
    assert bool(train_step(StepSetup.of(pm, CPU, 1.0), unfused, batches(2), 1e-3).applied)
    params, state = snapshot(model, unfused)
    hook = model.register_forward_hook(lambda module, inputs, out: out * float("nan"))
    assert not bool(train_step(StepSetup.of(pm, CPU, 1.0), unfused, batches(3), 1e-3).applied)
    hook.remove()
    after_params, after_state = snapshot(model, unfused)
    assert_same(params, after_params)
    for name in state:
        assert_same(state[name], after_state[name])
    assert bool(train_step(StepSetup.of(pm, CPU, 1.0), unfused, batches(4), 1e-3).applied)
    assert skip_streak(NonFiniteGuard(3), unfused, CPU, True) is None


def test_train_step_with_a_streak_returns_the_same_values_as_unread_tensors(trained):
    """train_step with a SkipStreak (the host reads later): loss, norm and applied are 0-d tensors equal to those of
    the step without one, and the weights stay bitwise the same."""
    model, pm, optimizer = trained
    sync_model = copy.deepcopy(model)
    sync_pm = parallelize(sync_model, ParallelDims(world_size=1), None, CPU)
    sync_optimizer = fused_adamw(sync_model)
    sync_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    streak = SkipStreak(0, 3, CPU)
    for step in (2, 3, 4):
        hooks = [overflow(m) for m in (model, sync_model)] if step == 3 else []
        want = train_step(StepSetup.of(sync_pm, CPU, 1.0), sync_optimizer, batches(step), 1e-3)
        got = train_step(StepSetup.of(pm, CPU, 1.0), optimizer, batches(step), 1e-3, streak=streak)
        for h in hooks:
            h.remove()
        assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in (got.loss, got.grad_norm, got.applied))
        assert (got.loss.item(), got.grad_norm.item(), bool(got.applied)) == (
            want.loss.item(), want.grad_norm.item(), bool(want.applied))
        assert got.predicted_tokens == want.predicted_tokens
        assert_same(snapshot(model, optimizer)[0], snapshot(sync_model, sync_optimizer)[0])
    assert int(streak.count) == 0 and not bool(streak.stopped)  # the skip at step 3 was followed by a good step


def test_a_complete_streak_holds_back_every_later_update_until_the_host_stops_the_run(trained):
    model, pm, optimizer = trained
    streak = SkipStreak(1, 2, CPU)  # a resumed run one skip into its streak: the next skip completes it
    hook = overflow(model)
    assert not bool(train_step(StepSetup.of(pm, CPU, 1.0), optimizer, batches(2), 1e-3, streak=streak).applied)
    hook.remove()
    assert int(streak.count) == 2 and bool(streak.stopped)
    params, state = snapshot(model, optimizer)
    held = train_step(StepSetup.of(pm, CPU, 1.0), optimizer, batches(3), 1e-3, streak=streak)  # finite, but held back
    assert torch.isfinite(held.loss) and torch.isfinite(held.grad_norm) and not bool(held.applied)
    after_params, after_state = snapshot(model, optimizer)
    assert_same(params, after_params)
    for name in state:
        assert_same(state[name], after_state[name])


def test_a_resumed_complete_streak_does_not_hold_back_a_good_step(trained):
    """A relaunch after the stop (its checkpoint's streak is complete) trains on when the next step is finite."""
    _, pm, optimizer = trained
    streak = SkipStreak(2, 2, CPU)
    assert bool(train_step(StepSetup.of(pm, CPU, 1.0), optimizer, batches(2), 1e-3, streak=streak).applied)
    assert int(streak.count) == 0

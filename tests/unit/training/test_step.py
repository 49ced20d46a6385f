"""The one train step: the non-finite guard decides on the global gradient norm *before* clipping."""

import pytest
import torch
from helpers import assert_same, objective_batches, snapshot, tiny_args

from megamlm.model.transformer import Transformer
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.parallelize import parallelize
from megamlm.training.optim import build_optimizer
from megamlm.training.step import StepSetup, train_step

ARGS = tiny_args()
CPU = torch.device("cpu")


def batches(step: int):
    return objective_batches(step, "mlm")


@pytest.fixture
def trained():
    torch.manual_seed(0)
    model = Transformer(ARGS)
    pm = parallelize(model, ParallelDims(world_size=1), None, CPU)
    optimizer = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8)
    first = train_step(StepSetup.of(pm, CPU, 1.0), optimizer, batches(1), 1e-3)
    assert first.applied
    return model, pm, optimizer


def test_a_finite_gradient_whose_total_norm_overflows_changes_nothing(trained):
    model, pm, optimizer = trained
    params, state = snapshot(model, optimizer)
    handle = model.layers["0"].mlp.up_proj.weight.register_hook(lambda g: g + 1e20)  # finite; norm**2 overflows
    result = train_step(StepSetup.of(pm, CPU, 1.0), optimizer, batches(2), 1e-3)
    handle.remove()
    assert not result.applied
    assert result.grad_norm == float("inf") and result.loss == pytest.approx(result.loss)  # the loss is finite
    after_params, after_state = snapshot(model, optimizer)
    assert_same(params, after_params)
    for name in state:
        assert_same(state[name], after_state[name])
    assert all(p.grad is None for p in model.parameters())
    # The next good step trains on as if the skipped one had never happened.
    assert train_step(StepSetup.of(pm, CPU, 1.0), optimizer, batches(3), 1e-3).applied


def test_clipping_first_would_have_hidden_the_overflow(trained):
    """Why the guard reads the norm before clipping: clipped by an infinite norm, the gradient becomes finite zeros,
    and AdamW still moves the weights (weight decay, momentum)."""
    model, _, optimizer = trained
    params, _ = snapshot(model, optimizer)
    handle = model.layers["0"].mlp.up_proj.weight.register_hook(lambda g: g + 1e20)
    from megamlm.objectives import sparse_lm_loss

    batch = batches(2)[0]
    loss, _ = sparse_lm_loss(model(batch.input_ids, causal=False), model.lm_head.weight, batch.targets)
    loss.backward()
    handle.remove()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    assert total == float("inf")
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    optimizer.step()
    assert any(not torch.equal(params[n], p) for n, p in model.named_parameters())


def test_a_non_finite_loss_skips_the_step(trained):
    model, pm, optimizer = trained
    params, _ = snapshot(model, optimizer)
    handle = model.register_forward_hook(lambda module, inputs, out: out * float("nan"))
    result = train_step(StepSetup.of(pm, CPU, 1.0), optimizer, batches(2), 1e-3)
    handle.remove()
    assert not result.applied
    assert_same(params, snapshot(model, optimizer)[0])

"""--fp8: the blocks' linear layers train in float8 through torchao (emulated on CPU by torch's own float8
matmul), everything else keeps its precision, and the losses follow the full-precision run's."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn as nn
from helpers import objective_batches, tiny_args

from megamlm.config import ConfigError
from megamlm.model.transformer import RMSNorm, Transformer
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.float8 import apply_float8, float8_linear_names
from megamlm.parallel.parallelize import parallelize
from megamlm.training.optim import build_optimizer
from megamlm.training.startup import check_float8, check_float8_widths
from megamlm.training.step import StepSetup, train_step

ARGS = tiny_args(hidden_size=64, ffn_hidden_size=128, max_seq_length=32)
CPU = torch.device("cpu")
ONE = ParallelDims(world_size=1)
NO_TORCHAO = "torchao is not installed (pip install 'megamlm[fp8]')"
needs_torchao = pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason=NO_TORCHAO)


def test_without_torchao_fp8_is_refused_in_one_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(ConfigError, match=r'--fp8 needs the torchao package, which is not installed; pip install '
                                          r'"megamlm\[fp8\]"'):
        check_float8(ONE)
    with pytest.raises(ValueError, match="--fp8 needs the torchao package"):  # a caller that skipped the checks
        parallelize(Transformer(ARGS), ONE, None, CPU, fp8=True)


@needs_torchao
def test_tensor_parallel_fp8_is_refused():
    with pytest.raises(ConfigError, match="--fp8 with --tp > 1 is not supported"):
        check_float8(ParallelDims(world_size=2, tp=2))


def test_widths_that_float8_matmuls_cannot_take_are_refused():
    import dataclasses

    with pytest.raises(ConfigError, match="multiples of 16.*mlp.gate_proj \\(64 -> 120\\)"):
        check_float8_widths(dataclasses.replace(ARGS, ffn_hidden_size=120))
    check_float8_widths(ARGS)


@needs_torchao
def test_only_the_blocks_linears_are_converted_and_names_do_not_change():
    from torchao.float8.float8_linear import Float8Linear

    model = Transformer(ARGS)
    keys = list(model.state_dict())
    pm = parallelize(model, ONE, None, CPU, fp8=True)
    assert pm.float8_linears == float8_linear_names(model)
    assert len(pm.float8_linears) == 7 * ARGS.num_layers
    for name, module in model.named_modules():
        assert isinstance(module, Float8Linear) == (name in pm.float8_linears), name
    assert type(model.lm_head) is nn.Linear and type(model.embed_tokens) is nn.Embedding
    assert all(type(m) is RMSNorm for n, m in model.named_modules() if n.endswith("norm"))
    assert list(model.state_dict()) == keys  # checkpoints are interchangeable with full-precision runs


def _batches(step: int, objective: str):
    # A small vocabulary of frequent tokens, so that a few steps lower the loss visibly.
    return objective_batches(step, objective, rows=4, seq=32, high=40, train_iters=100)


def _losses(fp8: bool, precision: str, objective: str, device=CPU, steps: int = 6) -> list[float]:
    torch.manual_seed(0)
    model = Transformer(ARGS).to(device)
    pm = parallelize(model, ONE, None, device, precision=precision, fp8=fp8)
    optimizer = build_optimizer(model, 3e-3, 0.1, (0.9, 0.95), 1e-8)
    return [float(train_step(StepSetup.of(pm, device, 1.0, precision), optimizer, _batches(s, objective), 3e-3).loss)
            for s in range(1, steps + 1)]


ON_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="float8 matmuls on a GPU (H100-class)")


@needs_torchao
@pytest.mark.parametrize("objective,device", [
    ("mlm", CPU), pytest.param("clm", CPU, marks=pytest.mark.slow),
    pytest.param("mlm", torch.device("cuda"), marks=ON_GPU), pytest.param("clm", torch.device("cuda"), marks=ON_GPU)])
def test_fp8_losses_follow_the_bf16_curve(objective, device):
    bf16 = _losses(False, "bf16", objective, device)
    fp8 = _losses(True, "bf16", objective, device)
    fp32 = _losses(False, "fp32", objective, device)
    assert fp8[-1] < fp8[0] - 0.3  # it trains
    for a, b, c in zip(bf16, fp8, fp32):
        # float8's rounding moves the loss by about as much as bf16's own, and no more than a few percent
        assert b == pytest.approx(a, rel=0.03), (bf16, fp8)
        assert abs(b - c) < 0.03 * c + 3 * abs(a - c), (fp32, bf16, fp8)


@needs_torchao
def test_fp8_gradients_point_where_the_full_precision_ones_do():
    torch.manual_seed(0)
    reference = Transformer(ARGS)
    model = Transformer(ARGS)
    model.load_state_dict(reference.state_dict())
    apply_float8(model, ONE)
    batch = _batches(1, "mlm")[0]
    from megamlm.objectives import sparse_lm_loss

    for m in (reference, model):
        loss, _ = sparse_lm_loss(m(batch.input_ids, causal=False), m.lm_head.weight, batch.targets)
        loss.backward()
    for (name, p), (_, q) in zip(reference.named_parameters(), model.named_parameters()):
        cosine = torch.nn.functional.cosine_similarity(p.grad.flatten(), q.grad.flatten(), dim=0)
        assert cosine > 0.98, (name, float(cosine))
        if not name.startswith("layers."):
            continue
        assert not torch.equal(p.grad, q.grad)  # the blocks' matmuls did run in float8

"""--compile modes: which one a device and layout get, and that a compiled model trains exactly like eager."""

from __future__ import annotations

import pytest
import torch
from helpers import objective_batches, tiny_args

import megamlm.parallel.compile as compile_module
from megamlm.config import ConfigError
from megamlm.model.transformer import Transformer
from megamlm.parallel.compile import resolve_compile_mode
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.parallelize import parallelize
from megamlm.training.optim import build_optimizer
from megamlm.training.startup import check_compile
from megamlm.training.step import StepSetup, train_step

ARGS = tiny_args()
CPU, CUDA = torch.device("cpu"), torch.device("cuda")
ONE = ParallelDims(world_size=1)


def test_auto_picks_the_measured_mode_per_device():
    assert resolve_compile_mode("auto", CPU, ONE) == "none"
    assert resolve_compile_mode("auto", CUDA, ONE) == "blocks"  # the mode measured on the H200 so far


def test_whole_model_compile_falls_back_to_blocks_where_it_does_not_compose():
    assert resolve_compile_mode("model", CPU, ParallelDims(world_size=2, dp_shard=2)) == "model"
    assert resolve_compile_mode("model", CPU, ParallelDims(world_size=2, pp=2)) == "blocks"
    assert resolve_compile_mode("model", CPU, ParallelDims(world_size=2, tp=2)) == "blocks"


@pytest.mark.parametrize("device,dims,what", [(CPU, ONE, "got cpu"),
                                              (CUDA, ParallelDims(world_size=2, dp_shard=2), "with 2 processes")])
def test_cuda_graphs_are_refused_off_a_single_gpu_process(device, dims, what):
    with pytest.raises(ConfigError, match=f"--compile cudagraphs needs one GPU process.*{what}.*use --compile model"):
        check_compile("cudagraphs", device, dims)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ConfigError, match="unknown --compile mode 'fast'"):
        check_compile("fast", CPU, ONE)


# Qwen3/Gemma 3 features: q/k norms, sublayer output norms, GeGLU, scaled embeddings, a query scalar, sliding
# windows (3 < 16 tokens) with their own RoPE tables beside a full layer.
DECODER_ARGS = tiny_args(qk_norm=True, sublayer_output_norms=True, mlp_activation="geglu", scale_embeddings=True,
                         query_pre_attn_scalar=6, sliding_window=3, layer_types="sliding,full", local_rope_theta=100.0)


def _train(mode: str, steps: int = 1, device=CPU, args=ARGS):
    torch.manual_seed(0)
    model = Transformer(args).to(device)
    names = [n for n, _ in model.named_parameters()]
    pm = parallelize(model, ONE, None, device, compile=mode)
    optimizer = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8)
    results = [train_step(StepSetup.of(pm, device, 1.0, "fp32"), optimizer, objective_batches(s, objective), 1e-3)
               for s in range(1, steps + 1) for objective in ("mlm", "clm")]
    assert [n for n, _ in model.named_parameters()] == names  # compiled in place: checkpoints keep their names
    return pm, results, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("mode", ["model", "blocks"])
def test_compiled_models_train_like_eager(monkeypatch, mode):
    monkeypatch.setattr(compile_module, "COMPILER_BACKEND", "aot_eager")  # graph capture + autograd, no codegen
    torch._dynamo.reset()
    _, eager, eager_params = _train("none")
    pm, compiled, params = _train(mode)
    assert pm.compile_mode == mode
    for a, b in zip(eager, compiled):
        assert float(b.loss) == pytest.approx(float(a.loss), rel=1e-5)
        assert float(b.grad_norm) == pytest.approx(float(a.grad_norm), rel=1e-4)
    for name, value in params.items():
        torch.testing.assert_close(value, eager_params[name], rtol=1e-4, atol=1e-6)
    if mode == "model":
        assert pm.model._compiled_call_impl is not None
    else:
        assert all(block._compiled_call_impl is not None for block in pm.model.layers.values())


@pytest.mark.parametrize("mode", ["model", "blocks"])
def test_decoder_features_compile_like_eager(monkeypatch, mode):
    monkeypatch.setattr(compile_module, "COMPILER_BACKEND", "aot_eager")
    torch._dynamo.reset()
    _, eager, eager_params = _train("none", args=DECODER_ARGS)
    _, compiled, params = _train(mode, args=DECODER_ARGS)
    for a, b in zip(eager, compiled):
        assert float(b.loss) == pytest.approx(float(a.loss), rel=1e-5)
        assert float(b.grad_norm) == pytest.approx(float(a.grad_norm), rel=1e-4)
    for name, value in params.items():
        torch.testing.assert_close(value, eager_params[name], rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_whole_model_compiled_with_inductor_trains_like_eager():
    torch._dynamo.reset()
    _, eager, eager_params = _train("none", steps=1)
    _, compiled, params = _train("model", steps=1)
    for a, b in zip(eager, compiled):
        assert float(b.loss) == pytest.approx(float(a.loss), rel=1e-4)
    for name, value in params.items():
        torch.testing.assert_close(value, eager_params[name], rtol=1e-3, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="whole-model compile and CUDA graphs on a GPU")
@pytest.mark.parametrize("mode", ["model", "cudagraphs"])
def test_on_a_gpu_whole_model_compile_and_cuda_graphs_train_like_eager(mode):
    torch._dynamo.reset()
    _, eager, eager_params = _train("none", steps=2, device=CUDA)
    _, compiled, params = _train(mode, steps=2, device=CUDA)
    for a, b in zip(eager, compiled):
        assert float(b.loss) == pytest.approx(float(a.loss), rel=1e-3)
    for name, value in params.items():
        torch.testing.assert_close(value, eager_params[name], rtol=1e-3, atol=1e-4)

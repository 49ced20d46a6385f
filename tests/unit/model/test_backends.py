"""A model is built with its backends: two models with different backends share one process.

Every kernel call goes through ``megamlm.kernels.resolve_backend``, and every attention call through
``attention_backends.attention``; spies on both record which backend each call carried, so each
model is seen dispatching on its own backends while the other one runs between its calls.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util

import pytest
import torch
from helpers import loss_and_grads, sparse_batch, tiny_args

import megamlm.kernels as K
from megamlm.kernels import reference
from megamlm.model import attention_backends, transformer
from megamlm.model.config import Backends
from megamlm.model.transformer import Transformer

ARGS = tiny_args(vocab_size=61, hidden_size=64, ffn_hidden_size=96, max_seq_length=8)


def _pair(first: Backends, second: Backends) -> tuple[Transformer, Transformer]:
    torch.manual_seed(0)
    a = Transformer(ARGS, backends=first)
    b = Transformer(ARGS, backends=second)
    b.load_state_dict(a.state_dict())
    return a, b


class Spy:
    """Records (op, backend argument, implementation chosen) of every kernel call, and every attention backend."""

    def __init__(self, monkeypatch):
        self.kernel_calls: list[tuple[str, str, str]] = []
        self.attention_calls: list[str] = []
        self.implementations: list[str] = []
        real_resolve, real_attention = K.resolve_backend, attention_backends.attention
        real_chunked, real_reference = K.chunked_linear_cross_entropy, reference.linear_cross_entropy

        def resolve(op, *tensors, backend="auto"):
            choice = real_resolve(op, *tensors, backend=backend)
            self.kernel_calls.append((op, backend, choice))
            return choice

        def attention(*args, backend="sdpa", **kwargs):
            self.attention_calls.append(backend)
            return real_attention(*args, backend=backend, **kwargs)

        def chunked(*args, **kwargs):
            self.implementations.append("chunked")
            return real_chunked(*args, **kwargs)

        def full_logits(*args, **kwargs):
            self.implementations.append("reference")
            return real_reference(*args, **kwargs)

        monkeypatch.setattr(K, "resolve_backend", resolve)
        monkeypatch.setattr(transformer, "attention", attention)
        monkeypatch.setattr(K, "chunked_linear_cross_entropy", chunked)
        monkeypatch.setattr(reference, "linear_cross_entropy", full_logits)

    def take(self) -> tuple[list, list, list]:
        out = (self.kernel_calls, self.attention_calls, self.implementations)
        self.kernel_calls, self.attention_calls, self.implementations = [], [], []
        return out


def test_backends_default_to_todays_choices_and_are_kept_on_the_model():
    model = Transformer(ARGS)
    assert model.backends == Backends() == Backends(attention="sdpa", kernels="auto")
    blocks = [m for m in model.modules() if hasattr(m, "backends")]
    assert len(blocks) == 1 + ARGS.num_layers * 5 + 1  # model; per block: itself, 2 norms, attention, MLP; norm
    assert all(m.backends is model.backends for m in blocks)
    assert "backends" not in ARGS.to_dict()  # not part of the shape compared on resume
    with pytest.raises(TypeError, match="Backends"):
        Transformer(ARGS, backends="reference")
    with pytest.raises(dataclasses.FrozenInstanceError):  # a model's backends are fixed when it is built
        model.backends.kernels = "chunked"


def test_bad_backends_are_refused_when_built():
    with pytest.raises(ValueError, match="auto, triton, chunked, reference"):
        Backends(kernels="fast")
    with pytest.raises(ValueError, match="auto, sdpa, sdpa_flash, sdpa_cudnn, flex, flash"):
        Backends(attention="xformers")
    if importlib.util.find_spec("flash_attn") is None:
        from megamlm.model.attention_backends import check_attention_backend

        with pytest.raises(ImportError, match=r'pip install "megamlm\[flash\]"'):
            check_attention_backend("flash")


def test_two_models_with_different_kernel_backends_share_a_process(monkeypatch):
    spy = Spy(monkeypatch)
    ref_model, chunked_model = _pair(Backends(kernels="reference"), Backends(kernels="chunked"))
    for causal in (True, False):
        # Interleaved: each model runs between the other's calls, so nothing carried over could go unseen.
        ref = loss_and_grads(ref_model, *sparse_batch(ARGS, 1, first_target=True), causal)
        ref_kernels, ref_attention, ref_impl = spy.take()
        got = loss_and_grads(chunked_model, *sparse_batch(ARGS, 1, first_target=True), causal)
        got_kernels, got_attention, got_impl = spy.take()

        # Every kernel call of a model (forward norms, rotary, SwiGLU, and the loss) carried that model's backend.
        assert {backend for _, backend, _ in ref_kernels} == {"reference"}
        assert {backend for _, backend, _ in got_kernels} == {"chunked"}
        ops = {op for op, _, _ in ref_kernels}
        assert ops == {"rms_norm", "apply_rotary", "swiglu", "linear_cross_entropy"} == {op for op, _, _ in got_kernels}
        assert ref_attention == got_attention == ["sdpa"] * ARGS.num_layers
        # ... and reached its own implementation of the LM-head loss.
        assert ref_impl == ["reference"] and got_impl == ["chunked"]

        torch.testing.assert_close(got[0], ref[0])
        torch.testing.assert_close(got[1], ref[1], rtol=1e-5, atol=1e-5)
        for name, grad in ref[2].items():
            torch.testing.assert_close(got[2][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_two_models_with_different_attention_backends_share_a_process(monkeypatch):
    spy = Spy(monkeypatch)
    sdpa_model, flex_model = _pair(Backends(attention="sdpa", kernels="reference"),
                                   Backends(attention="flex", kernels="chunked"))
    tokens, _ = sparse_batch(ARGS, 1, first_target=True)
    if not torch.cuda.is_available():
        # FlexAttention has no CPU backward and refuses CPU tensors: reaching that refusal proves the
        # flex model dispatched to flex, while the sdpa model beside it keeps running.
        sdpa_out = sdpa_model(tokens, causal=False)
        with pytest.raises(ValueError, match="attention backend 'flex' needs a CUDA/ROCm device"):
            flex_model(tokens, causal=False)
        torch.testing.assert_close(sdpa_model(tokens, causal=False), sdpa_out)
        assert spy.attention_calls == ["sdpa"] * ARGS.num_layers + ["flex"] + ["sdpa"] * ARGS.num_layers
        return
    sdpa_model, flex_model = sdpa_model.cuda(), flex_model.cuda()
    tokens = tokens.cuda()
    for causal in (True, False):
        want = sdpa_model(tokens, causal=causal)
        got = flex_model(tokens, causal=causal)
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    assert spy.attention_calls == (["sdpa"] * ARGS.num_layers + ["flex"] * ARGS.num_layers) * 2


def test_a_copied_model_keeps_its_backends():
    model = Transformer(ARGS, backends=Backends(kernels="chunked"))
    clone = copy.deepcopy(model)
    assert clone.backends == Backends(kernels="chunked")
    assert clone.layers["0"].mlp.backends.kernels == "chunked"

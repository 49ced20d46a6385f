"""A model built with Triton kernels and one built with the references run side by side in one process.

On CPU the Triton kernels run in the interpreter (``triton_ops`` sets ``TRITON_INTERPRET=1``); on a
GPU they run compiled. Spies on the Triton entry points count which model reached them.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from helpers import loss_and_grads, sparse_batch, tiny_args

import megamlm.kernels as K
from megamlm.model.config import Backends
from megamlm.model.transformer import Transformer

ARGS = tiny_args(vocab_size=61, num_layers=1, hidden_size=24, ffn_hidden_size=40, max_seq_length=8)
OPS = ("rms_norm", "apply_rotary", "swiglu", "linear_cross_entropy")


@pytest.fixture
def triton_calls(triton_ops, monkeypatch):
    """Counts calls per op that reach the Triton implementations (through K._triton_op)."""
    calls: list[str] = []
    real = K._triton_op

    def counted(op):
        fn = real(op)
        return lambda *args: calls.append(op) or fn(*args)

    monkeypatch.setattr(K, "_triton_op", counted)
    return calls


def _step(model: Transformer, device):
    tokens, targets = sparse_batch(ARGS, 3)
    return loss_and_grads(model, tokens.to(device), targets.to(device), causal=False)


def test_triton_and_reference_models_share_a_process(triton_calls, device):
    torch.manual_seed(0)
    triton_model = Transformer(ARGS, backends=Backends(kernels="triton")).to(device)
    ref_model = Transformer(ARGS, backends=Backends(kernels="reference")).to(device)
    ref_model.load_state_dict(triton_model.state_dict())

    want = _step(ref_model, device)
    assert triton_calls == []
    got = _step(triton_model, device)
    assert set(triton_calls) == set(OPS)  # every op of the Triton model took its kernel, the loss included
    triton_calls.clear()
    again = _step(ref_model, device)  # the reference model still takes the references after it
    assert triton_calls == []

    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)
    for name, grad in want[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=1e-3, atol=1e-5, msg=name)
        torch.testing.assert_close(again[2][name], grad, msg=name)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                    reason="triton is not installed: the flag check refuses --kernel-backend triton before planning "
                           "(pip install 'megamlm[kernels]' for this installed-but-broken case)")
def test_a_triton_run_is_refused_while_planning_when_triton_does_not_import(monkeypatch):
    from megamlm.config import ConfigError, parse_args
    from megamlm.training.startup import backends_for

    monkeypatch.setattr(K, "triton_available", lambda: False)
    with pytest.raises(ConfigError, match="kernel backend 'triton' needs the triton package"):
        backends_for(parse_args(["--kernel-backend", "triton"]), torch.device("cuda"))
    assert Transformer(ARGS, backends=Backends(kernels="auto")).backends.kernels == "auto"


def test_decoder_features_run_on_the_kernels_unchanged(triton_calls, device):
    """Biases, a head_dim apart from hidden / heads, YaRN-scaled rotary tables (cos and sin scaled by its attention
    factor) and tied embeddings: the Triton model computes what the reference model does."""
    from dataclasses import replace

    from megamlm.model.rope_scaling import RopeScaling

    args = replace(ARGS, head_dim=10, attention_bias=True, attention_out_bias=True, tie_word_embeddings=True,
                   rope_scaling=RopeScaling("yarn", factor=4.0, original_max_position_embeddings=4))
    torch.manual_seed(0)
    triton_model = Transformer(args, backends=Backends(kernels="triton")).to(device)
    ref_model = Transformer(args, backends=Backends(kernels="reference")).to(device)
    with torch.no_grad():
        for p in triton_model.parameters():
            p.normal_(0.0, 0.3)
    ref_model.load_state_dict(triton_model.state_dict())
    assert triton_model.rope_cos.abs().max() > 1.0  # the attention factor of YaRN is in the tables
    want, got = _step(ref_model, device), _step(triton_model, device)
    assert {"apply_rotary", "rms_norm", "swiglu"} <= set(triton_calls)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
    for name, grad in want[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=1e-3, atol=1e-5, msg=name)


GEMMA_LIKE = tiny_args(vocab_size=61, num_layers=2, hidden_size=24, ffn_hidden_size=40, max_seq_length=8,
                       head_dim=8, qk_norm=True, sublayer_output_norms=True, mlp_activation="geglu",
                       scale_embeddings=True, query_pre_attn_scalar=6, sliding_window=3, layer_types="sliding,full",
                       local_rope_theta=100.0)


def test_decoder_features_under_triton_kernels(triton_calls, device):
    """Qwen3/Gemma 3 features under the Triton backend: the q/k norms and the sublayer output norms take the RMSNorm
    kernel, GeGLU (no kernel) the reference, and the loss and gradients equal the reference model's."""
    torch.manual_seed(0)
    triton_model = Transformer(GEMMA_LIKE, backends=Backends(kernels="triton")).to(device)
    ref_model = Transformer(GEMMA_LIKE, backends=Backends(kernels="reference")).to(device)
    with torch.no_grad():
        for p in triton_model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ref_model.load_state_dict(triton_model.state_dict())
    tokens, targets = sparse_batch(GEMMA_LIKE, 3)
    want = loss_and_grads(ref_model, tokens.to(device), targets.to(device), causal=False)
    got = loss_and_grads(triton_model, tokens.to(device), targets.to(device), causal=False)
    # per block: input, q, k, attention-output, MLP-input and MLP-output norms; and the final norm
    assert triton_calls.count("rms_norm") == 2 * 6 + 1 and "swiglu" not in triton_calls
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
    for name, grad in want[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=1e-3, atol=1e-5, msg=name)

"""The ModernBERT block (LayerNorm, embedding norm, prediction head, decoder bias, erf GeGLU, alternating windows)
computes what transformers' ModernBertForMaskedLM and ModernBertDecoderForCausalLM compute, from the same weights."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import tiny_args
from modernbert_pair import FIRST_WORD, MAX_SEQ, VOCAB, hf_model, megamlm_twin

from megamlm.model.config import PRESETS, ModelArgs, global_every_layer_types
from megamlm.model.transformer import Transformer, count_parameters
from megamlm.objectives.loss import sparse_lm_loss


def _ids(rows: int = 2, seq: int = 40, seed: int = 0) -> torch.Tensor:
    return torch.randint(FIRST_WORD, VOCAB, (rows, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
def test_logits_equal_transformers(decoder):
    hf = hf_model(decoder).eval()
    model = megamlm_twin(hf).eval()
    args = model.args
    assert args.has_sliding_layers() and "full" in args.layer_types and args.local_rope_theta != args.rope_theta
    ids = _ids()
    assert ids.shape[1] > 2 * args.sliding_window  # the window matters
    with torch.no_grad():
        expected = hf(input_ids=ids).logits
        got = model.logits(model(ids, causal=decoder))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
def test_position_ids_and_documents_equal_one_row_per_document(decoder):
    """Two documents packed in one row, attention kept inside each and positions restarting, give each document's
    logits as transformers computes the document alone."""
    hf = hf_model(decoder).eval()
    model = megamlm_twin(hf).eval()
    first, second = _ids(1, 23, seed=1), _ids(1, 17, seed=2)
    packed = torch.cat([first, second], dim=1)
    documents = torch.tensor([[0] * 23 + [1] * 17])
    positions = torch.cat([torch.arange(23), torch.arange(17)])[None]
    with torch.no_grad():
        got = model.logits(model(packed, causal=decoder, document_ids=documents, position_ids=positions))
        expected = torch.cat([hf(input_ids=first).logits, hf(input_ids=second).logits], dim=1)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_sparse_loss_applies_the_head_and_bias_to_the_predicted_rows_only():
    model = megamlm_twin(hf_model()).eval()
    ids = _ids()
    targets = torch.full_like(ids, -100)
    targets[:, ::3] = ids[:, ::3]
    calls = []
    handle = model.head.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    hidden = model(ids, causal=False)
    for backend in ("reference", "chunked"):
        loss, predicted = sparse_lm_loss(hidden, model.lm_head.weight, targets, backend, None, model.head,
                                         model.lm_head.bias)
        dense = torch.nn.functional.cross_entropy(model.lm_head(model.head(hidden)).flatten(0, 1), targets.flatten(),
                                                  reduction="sum")
        torch.testing.assert_close(loss, dense, atol=1e-5, rtol=1e-5)
    handle.remove()
    assert calls[0] == predicted == int((targets != -100).sum())


def test_the_chunked_kernel_adds_the_bias_and_its_gradient():
    from megamlm.kernels import linear_cross_entropy

    g = torch.Generator().manual_seed(0)
    hidden, weight, bias = (torch.randn(shape, generator=g, requires_grad=True) for shape in ((10, 8), (30, 8), (30,)))
    targets = torch.randint(0, 30, (10,), generator=g)
    targets[3] = -100
    grads = {}
    for backend in ("reference", "chunked"):
        loss = linear_cross_entropy(hidden, weight, targets, chunk_size=4, backend=backend, bias=bias)
        grads[backend] = (loss.detach(), *torch.autograd.grad(loss, (hidden, weight, bias)))
    for got, expected in zip(grads["chunked"], grads["reference"]):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_every_option_is_off_by_default():
    model = Transformer(tiny_args(vocab_size=256))
    assert model.embed_norm is None and model.head is None and model.lm_head.bias is None
    assert all(layer.input_layernorm is not None for layer in model.layers.values())
    assert type(model.norm).__name__ == "RMSNorm"
    assert not any(name.endswith(".bias") for name, _ in model.named_parameters())


def test_layer_zero_has_no_input_norm_after_an_embedding_norm():
    model = Transformer(tiny_args(vocab_size=256, embedding_norm=True, norm_type="layernorm", norm_bias=True))
    assert model.layers["0"].input_layernorm is None and model.layers["1"].input_layernorm is not None
    assert type(model.embed_norm).__name__ == "LayerNorm" and model.embed_norm.bias is not None


def test_modernbert_init_is_a_truncated_normal_with_its_stds():
    args = ModelArgs(**{**PRESETS["modernbert-tiny"], "vocab_size": 512, "hidden_size": 256, "ffn_hidden_size": 512})
    model = Transformer(args)
    model.reset_parameters(torch.Generator().manual_seed(0))
    std, cutoff = args.init_method_std, args.initializer_cutoff_factor
    out_std = std / (2 * args.num_layers) ** 0.5
    for name, expected in (("embed_tokens.weight", std), ("layers.1.self_attn.q_proj.weight", std),
                           ("layers.1.mlp.down_proj.weight", out_std), ("head.dense.weight", out_std)):
        p = model.get_parameter(name)
        assert p.abs().max() <= cutoff * expected + 1e-7, name
        # A normal cut at 2 stds has 0.88 of the std.
        assert abs(p.std().item() / expected - 0.88) < 0.05, (name, p.std().item() / expected)
    assert torch.equal(model.head.norm.weight, torch.ones(args.hidden_size))
    assert torch.equal(model.lm_head.bias, torch.zeros(args.vocab_size))


def test_global_every_n_layers_as_modernbert_fills_them():
    assert global_every_layer_types(7, 3) == "full,sliding,sliding,full,sliding,sliding,full"


@pytest.mark.parametrize("preset,expected", [("modernbert-base", 149_655_232), ("modernbert-large", 395_881_664)])
def test_modernbert_presets_have_the_released_sizes(preset, expected):
    with torch.device("meta"):
        model = Transformer(ModelArgs(**PRESETS[preset]))
    # Counted from transformers' ModernBertForMaskedLM of the released configs (tied decoder once, its bias in).
    assert count_parameters(model) == expected


def test_modernbert_tiny_splits_by_two_and_four_and_has_both_layer_kinds():
    args = ModelArgs(**{**PRESETS["modernbert-tiny"], "vocab_size": 256})
    for n in (2, 4):
        assert args.num_attention_heads % n == 0 and args.num_query_groups % n == 0 and args.num_layers % n == 0
    kinds = {args.layer_type(i) for i in range(args.num_layers)}
    assert kinds == {"full", "sliding"} and args.sliding_window < args.max_seq_length


def test_dropout_uses_torch_rng_in_train_mode_only():
    args = dataclasses.replace(megamlm_twin(hf_model()).args, attention_dropout=0.1, mlp_dropout=0.1,
                               embedding_dropout=0.1)
    model = Transformer(args)
    ids = _ids(seq=MAX_SEQ // 2)
    model.eval()
    assert torch.equal(model(ids, causal=False), model(ids, causal=False))
    model.train()
    torch.manual_seed(3)
    a = model(ids, causal=False)
    torch.manual_seed(3)
    b = model(ids, causal=False)
    assert torch.equal(a, b) and not torch.equal(a, model(ids, causal=False))

"""The pure-PyTorch chunked linear + cross-entropy against the full-logits reference."""

from __future__ import annotations

import pytest
import torch

from megamlm.kernels import reference
from megamlm.kernels.chunked_linear_cross_entropy import auto_chunk_rows, chunked_linear_cross_entropy


def _inputs(n_rows=11, hidden=12, vocab=29, ignored=(1, 6), seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n_rows, hidden, generator=g)
    w = torch.randn(vocab, hidden, generator=g) * 0.5
    targets = torch.randint(0, vocab, (n_rows,), generator=g)
    targets[list(ignored)] = -100
    return h, w, targets


def _grads(fn, h, w, targets, scale=0.25, **kw):
    hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = fn(hh, ww, targets, **kw)
    (loss * scale).backward()
    return loss, hh.grad, ww.grad


@pytest.mark.parametrize("chunk", [1, 4, 11, 100, 0])
def test_matches_reference_for_any_chunk_size(chunk):
    h, w, targets = _inputs()
    loss_c, gh_c, gw_c = _grads(chunked_linear_cross_entropy, h, w, targets, chunk_size=chunk)
    loss_r, gh_r, gw_r = _grads(reference.linear_cross_entropy, h, w, targets)
    torch.testing.assert_close(loss_c, loss_r)
    torch.testing.assert_close(gh_c, gh_r)
    torch.testing.assert_close(gw_c, gw_r)
    assert torch.all(gh_c[[1, 6]] == 0)


def test_custom_ignore_index_and_all_ignored():
    h, w, targets = _inputs(ignored=())
    targets[::2] = 0  # 0 is a real class for the reference, an ignored one here
    loss_c, gh_c, gw_c = _grads(chunked_linear_cross_entropy, h, w, targets, ignore_index=0, chunk_size=3)
    loss_r, gh_r, gw_r = _grads(reference.linear_cross_entropy, h, w, targets, ignore_index=0)
    torch.testing.assert_close(loss_c, loss_r)
    torch.testing.assert_close(gh_c, gh_r)
    torch.testing.assert_close(gw_c, gw_r)

    all_ignored = torch.full_like(targets, -100)
    loss, gh, gw = _grads(chunked_linear_cross_entropy, h, w, all_ignored, chunk_size=4)
    assert loss.item() == 0 and torch.all(gh == 0) and torch.all(gw == 0)


def test_no_rows_gives_zero_loss_and_zero_weight_grad():
    h, w, targets = _inputs(n_rows=0, ignored=())
    loss, gh, gw = _grads(chunked_linear_cross_entropy, h, w, targets)
    assert loss.item() == 0 and gh.shape == (0, 12) and torch.all(gw == 0)


def test_no_grad_and_frozen_weight():
    h, w, targets = _inputs()
    expected = reference.linear_cross_entropy(h, w, targets)
    with torch.no_grad():
        torch.testing.assert_close(chunked_linear_cross_entropy(h, w, targets, chunk_size=4), expected)
    hh = h.clone().requires_grad_()
    loss = chunked_linear_cross_entropy(hh, w, targets, chunk_size=4)
    loss.backward()
    hr = h.clone().requires_grad_()
    reference.linear_cross_entropy(hr, w, targets).backward()
    torch.testing.assert_close(hh.grad, hr.grad)


def test_gradients_accumulate_like_autograd_through_a_tied_weight():
    # The LM head often shares the embedding: both paths must add into the same .grad.
    h, w, targets = _inputs()
    grads = []
    for fn in (chunked_linear_cross_entropy, reference.linear_cross_entropy):
        ww = w.clone().requires_grad_()
        hidden = ww[:11] * 2.0  # hidden depends on the weight too
        (fn(hidden, ww, targets) + ww.sum()).backward()
        grads.append(ww.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_cpu_bf16_autocast_matches_reference():
    h, w, targets = _inputs()
    runs = []
    for fn in (chunked_linear_cross_entropy, reference.linear_cross_entropy):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = fn(hh, ww, targets)
        loss.backward()
        runs.append((loss, hh.grad, ww.grad))
    for got, want in zip(*runs):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


def test_second_backward_is_refused_with_a_clear_message():
    h, w, targets = _inputs()
    hh = h.clone().requires_grad_()
    loss = chunked_linear_cross_entropy(hh, w, targets)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="'reference' kernel backend"):
        loss.backward()


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda h, w, t: (h, w, t.clone().fill_(29)), "outside the vocabulary"),
        (lambda h, w, t: (h[:, :5], w, t), "expected hidden"),
        (lambda h, w, t: (h, w, t[:3]), "targets must be"),
        (lambda h, w, t: (h, w, t.float()), "targets must be"),
    ],
)
def test_bad_inputs_raise_one_clear_error(mutate, message):
    h, w, t = mutate(*_inputs())
    with pytest.raises(ValueError, match=message):
        chunked_linear_cross_entropy(h, w, t)


def test_auto_chunk_rows_respects_the_memory_budget():
    rows = auto_chunk_rows(100_000, 128_256, torch.float32, torch.device("cpu"))
    assert 1 <= rows < 100_000
    assert auto_chunk_rows(10, 128_256, torch.float32, torch.device("cpu")) == 10
    assert auto_chunk_rows(10, 10**12, torch.float32, torch.device("cpu")) == 1


def test_non_contiguous_hidden():
    h, w, targets = _inputs()
    h_t = h.t().contiguous().t()  # same values, column-major strides
    assert not h_t.is_contiguous()
    loss_c, gh_c, gw_c = _grads(chunked_linear_cross_entropy, h_t, w, targets, chunk_size=4)
    loss_r, gh_r, gw_r = _grads(reference.linear_cross_entropy, h, w, targets)
    torch.testing.assert_close(loss_c, loss_r)
    torch.testing.assert_close(gh_c, gh_r)
    torch.testing.assert_close(gw_c, gw_r)

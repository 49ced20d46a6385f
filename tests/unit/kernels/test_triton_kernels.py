"""Every Triton kernel against its pure-PyTorch reference: forward and gradients.

On CPU they run under TRITON_INTERPRET=1 (see conftest), so the shapes are tiny; the same tests run
compiled on a GPU (benchmarks/gpu_check.sh), where bf16 cases are added.
"""

from __future__ import annotations

import pytest
import torch

from megamlm.kernels import reference

FP32_TOL = dict(atol=1e-5, rtol=1e-5)


def _leaves(device, dtype, *tensors):
    return [t.to(device=device, dtype=dtype).detach().requires_grad_() for t in tensors]


def _check_fwd_bwd(kernel, ref, inputs, tol, grad_scale=None):
    """Same outputs and same input gradients for an arbitrary upstream gradient."""
    a = [t.detach().clone().requires_grad_() for t in inputs]
    b = [t.detach().clone().requires_grad_() for t in inputs]
    out_k, out_r = kernel(*a), ref(*b)
    assert out_k.shape == out_r.shape and out_k.dtype == out_r.dtype
    torch.testing.assert_close(out_k, out_r, **tol)
    upstream = torch.randn(out_r.shape, generator=torch.Generator().manual_seed(1)).to(out_r)
    (out_k * upstream).sum().backward()
    (out_r * upstream).sum().backward()
    for x, y in zip(a, b):
        assert x.grad.dtype == y.grad.dtype
        torch.testing.assert_close(x.grad, y.grad, **tol)


def _dtypes(device):
    return [torch.float32, torch.bfloat16] if device.type == "cuda" else [torch.float32]


@pytest.mark.parametrize("shape", [(3, 5, 37), (2, 64), (1, 1, 200)])
def test_rms_norm_matches_reference(triton_ops, device, shape):
    torch.manual_seed(0)
    for dtype in _dtypes(device):
        x, w = _leaves(device, dtype, torch.randn(shape), torch.rand(shape[-1]) + 0.5)
        tol = FP32_TOL if dtype == torch.float32 else dict(atol=3e-2, rtol=2e-2)
        _check_fwd_bwd(lambda x, w: triton_ops["rms_norm"](x, w, 1e-5),
                       lambda x, w: reference.rms_norm(x, w, 1e-5), [x, w], tol)


def test_rms_norm_low_precision_input_with_fp32_weight(triton_ops, device):
    # Autocast-style mix: bf16 activations, fp32 weight -> fp32 output, as the reference promotes.
    torch.manual_seed(0)
    x = torch.randn(4, 3, 24, device=device).bfloat16().requires_grad_()
    w = (torch.rand(24, device=device) + 0.5).requires_grad_()
    _check_fwd_bwd(lambda x, w: triton_ops["rms_norm"](x, w), reference.rms_norm, [x, w],
                   dict(atol=3e-2, rtol=2e-2))


def test_rms_norm_many_rows_spanning_several_backward_programs(triton_ops, device):
    # 70 rows > 2 x 32 rows per backward program: exercises the partial weight-gradient sum.
    torch.manual_seed(0)
    x, w = _leaves(device, torch.float32, torch.randn(70, 12), torch.randn(12))
    _check_fwd_bwd(triton_ops["rms_norm"], reference.rms_norm, [x, w], dict(atol=1e-5, rtol=1e-4))


@pytest.mark.parametrize("batch,seq,heads,head_dim", [(2, 7, 3, 10), (1, 4, 1, 64)])
def test_rotary_matches_reference(triton_ops, device, batch, seq, heads, head_dim):
    torch.manual_seed(0)
    # Distinct halves in cos/sin, so a swapped half in the kernel would show.
    cos = torch.randn(seq, head_dim, device=device)
    sin = torch.randn(seq, head_dim, device=device)
    for dtype in _dtypes(device):
        (x,) = _leaves(device, dtype, torch.randn(batch, seq, heads, head_dim))
        tol = FP32_TOL if dtype == torch.float32 else dict(atol=5e-2, rtol=2e-2)
        _check_fwd_bwd(lambda x: triton_ops["apply_rotary"](x, cos, sin),
                       lambda x: reference.apply_rotary(x, cos, sin), [x], tol)


def test_rotary_on_a_strided_view_of_fused_qkv(triton_ops, device):
    torch.manual_seed(0)
    batch, seq, heads, head_dim = 2, 5, 3, 8
    qkv = torch.randn(batch, seq, 3 * heads * head_dim, device=device, requires_grad=True)
    cos, sin = torch.randn(seq, head_dim, device=device), torch.randn(seq, head_dim, device=device)

    def run(rotary):
        q = qkv.view(batch, seq, 3, heads, head_dim)[:, :, 1]  # non-contiguous: the k slice
        assert not q.is_contiguous()
        out = rotary(q, cos, sin)
        (grad,) = torch.autograd.grad(out.square().sum(), qkv)
        return out, grad

    out_k, grad_k = run(triton_ops["apply_rotary"])
    out_r, grad_r = run(reference.apply_rotary)
    torch.testing.assert_close(out_k, out_r, **FP32_TOL)
    torch.testing.assert_close(grad_k, grad_r, **FP32_TOL)


def test_rotary_rejects_mismatched_tables(triton_ops, device):
    x = torch.randn(1, 4, 2, 8, device=device)
    with pytest.raises(ValueError, match="slice the rotary tables"):
        triton_ops["apply_rotary"](x, torch.ones(5, 8, device=device), torch.ones(5, 8, device=device))


@pytest.mark.parametrize("shape", [(3, 5, 30), (1100,), (2, 1030)])
def test_swiglu_matches_reference(triton_ops, device, shape):
    torch.manual_seed(0)
    for dtype in _dtypes(device):
        g, u = _leaves(device, dtype, torch.randn(shape) * 3, torch.randn(shape))
        tol = FP32_TOL if dtype == torch.float32 else dict(atol=3e-2, rtol=2e-2)
        _check_fwd_bwd(triton_ops["swiglu"], reference.swiglu, [g, u], tol)


def test_swiglu_on_halves_of_a_fused_projection(triton_ops, device):
    torch.manual_seed(0)
    fused = torch.randn(2, 3, 2 * 13, device=device, requires_grad=True)

    def run(fn):
        out = fn(*fused.chunk(2, dim=-1))
        (grad,) = torch.autograd.grad((out * torch.arange(13.0, device=device)).sum(), fused)
        return out, grad

    out_k, grad_k = run(triton_ops["swiglu"])
    out_r, grad_r = run(reference.swiglu)
    torch.testing.assert_close(out_k, out_r, **FP32_TOL)
    torch.testing.assert_close(grad_k, grad_r, **FP32_TOL)


def _ce_inputs(device, n_rows, hidden, vocab, ignored=(), seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n_rows, hidden, generator=g)
    w = torch.randn(vocab, hidden, generator=g) * 0.5
    targets = torch.randint(0, vocab, (n_rows,), generator=g)
    targets[list(ignored)] = -100
    return h.to(device), w.to(device), targets.to(device)


@pytest.mark.parametrize(
    "n_rows,hidden,vocab,chunk,ignored",
    [
        (13, 24, 50, 5, (3, 7)),  # last chunk (3 rows) smaller than the others; ignored targets
        (8, 20, 37, 0, ()),  # automatic chunk; odd vocab, hidden not a power of two
        (6, 16, 5000, 4, (0, 1, 2, 3)),  # vocab spans two kernel blocks; a fully ignored chunk
    ],
)
def test_linear_cross_entropy_matches_reference(triton_ops, device, n_rows, hidden, vocab, chunk, ignored):
    h, w, targets = _ce_inputs(device, n_rows, hidden, vocab, ignored)
    a = [h.clone().requires_grad_(), w.clone().requires_grad_()]
    b = [h.clone().requires_grad_(), w.clone().requires_grad_()]
    loss_k = triton_ops["linear_cross_entropy"](a[0], a[1], targets, -100, chunk)
    loss_r = reference.linear_cross_entropy(b[0], b[1], targets)
    assert loss_k.dtype == torch.float32 and loss_k.dim() == 0
    torch.testing.assert_close(loss_k, loss_r, atol=1e-4, rtol=1e-5)
    (loss_k / 3).backward()  # a non-unit upstream gradient, as a mean over tokens gives
    (loss_r / 3).backward()
    torch.testing.assert_close(a[0].grad, b[0].grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(a[1].grad, b[1].grad, atol=1e-5, rtol=1e-4)
    for row in ignored:
        assert torch.all(a[0].grad[row] == 0)


def test_linear_cross_entropy_bf16_autocast(triton_ops, device):
    h, w, targets = _ce_inputs(device, 9, 16, 40, ignored=(2,))
    runs = []
    for fn in (lambda *x: triton_ops["linear_cross_entropy"](*x, -100, 4), reference.linear_cross_entropy):
        hh = h.bfloat16().requires_grad_()
        ww = w.clone().requires_grad_()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = fn(hh, ww, targets)
        loss.backward()
        runs.append((loss, hh.grad, ww.grad))
    (loss_k, gh_k, gw_k), (loss_r, gh_r, gw_r) = runs
    assert gh_k.dtype == torch.bfloat16 and gw_k.dtype == torch.float32
    torch.testing.assert_close(loss_k, loss_r, atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(gh_k.float(), gh_r.float(), atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(gw_k, gw_r, atol=3e-2, rtol=3e-2)


def test_cross_entropy_kernel_without_gradient_leaves_logits_alone(triton_ops, device):
    from megamlm.kernels.chunked_linear_cross_entropy import torch_chunk_cross_entropy
    from megamlm.kernels.triton_cross_entropy import triton_chunk_cross_entropy

    logits = torch.randn(5, 33, device=device)
    targets = torch.tensor([0, 32, -100, 7, 1], device=device)
    kept = logits.clone()
    losses = triton_chunk_cross_entropy(logits, targets, -100, compute_grad=False)
    torch.testing.assert_close(logits, kept, rtol=0, atol=0)
    torch.testing.assert_close(losses, torch_chunk_cross_entropy(kept.clone(), targets, -100, False))
    assert losses[2] == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="realistic sizes only run compiled, on a GPU")
def test_realistic_sizes_on_gpu(triton_ops, device):
    torch.manual_seed(0)
    bf16 = dict(atol=5e-2, rtol=3e-2)
    x, w = _leaves(device, torch.bfloat16, torch.randn(4, 512, 2048), torch.rand(2048) + 0.5)
    _check_fwd_bwd(triton_ops["rms_norm"], reference.rms_norm, [x, w], dict(atol=0.5, rtol=3e-2))
    (q,) = _leaves(device, torch.bfloat16, torch.randn(2, 512, 12, 128))
    cos, sin = torch.randn(512, 128, device=device), torch.randn(512, 128, device=device)
    _check_fwd_bwd(lambda q: triton_ops["apply_rotary"](q, cos, sin),
                   lambda q: reference.apply_rotary(q, cos, sin), [q], bf16)
    g, u = _leaves(device, torch.bfloat16, torch.randn(2048, 2816), torch.randn(2048, 2816))
    _check_fwd_bwd(triton_ops["swiglu"], reference.swiglu, [g, u], bf16)

    h, w, targets = _ce_inputs(device, 1000, 384, 50_257, ignored=range(0, 1000, 9))
    losses = []
    for fn in (lambda *a: triton_ops["linear_cross_entropy"](*a, -100, 256), reference.linear_cross_entropy):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        loss = fn(hh, ww, targets)
        loss.backward()
        losses.append((loss, hh.grad, ww.grad))
    (lk, ghk, gwk), (lr, ghr, gwr) = losses
    torch.testing.assert_close(lk, lr, rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(ghk, ghr, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(gwk, gwr, rtol=1e-3, atol=1e-4)


def test_linear_cross_entropy_adds_the_lm_head_bias(triton_ops, device):
    """ModernBERT's decoder bias: the Triton path adds it to every chunk's logits and returns its gradient."""
    h, w, targets = _ce_inputs(device, 13, 24, 50, (3, 7))
    bias = torch.randn(50, device=device)
    a = [t.clone().requires_grad_() for t in (h, w, bias)]
    b = [t.clone().requires_grad_() for t in (h, w, bias)]
    loss_k = triton_ops["linear_cross_entropy"](a[0], a[1], targets, -100, 5, bias=a[2])
    loss_r = reference.linear_cross_entropy(b[0], b[1], targets, bias=b[2])
    torch.testing.assert_close(loss_k, loss_r, atol=1e-4, rtol=1e-5)
    (loss_k / 3).backward()
    (loss_r / 3).backward()
    for got, want in zip(a, b):
        torch.testing.assert_close(got.grad, want.grad, atol=1e-5, rtol=1e-4)

"""The dispatch point: the backend argument, per-device choice, and life without triton."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import megamlm.kernels as K
from megamlm.kernels import reference
from megamlm.model.config import Backends

REPO = Path(__file__).resolve().parents[3]


def test_unknown_backend_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match="auto, triton, chunked, reference"):
        K.check_kernel_backend("fast")
    with pytest.raises(ValueError, match="auto, triton, chunked, reference"):
        K.rms_norm(torch.ones(2, 4), torch.ones(4), backend="fast")
    with pytest.raises(ValueError, match="auto, triton, chunked, reference"):
        Backends(kernels="fast")


def test_there_is_no_process_wide_backend():
    for name in ("set_kernel_backend", "get_kernel_backend", "kernel_backend", "_backend"):
        assert not hasattr(K, name), name


def test_cpu_choices_per_backend(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.zeros(2, 3)
    expected = {
        "auto": ("reference", "chunked"),
        "reference": ("reference", "reference"),
        "chunked": ("reference", "chunked"),
    }
    for backend, (elementwise, ce) in expected.items():
        for op in ("rms_norm", "apply_rotary", "swiglu"):
            assert K.resolve_backend(op, x, backend=backend) == elementwise
        assert K.resolve_backend("linear_cross_entropy", x, backend=backend) == ce
    assert K.resolve_backend("linear_cross_entropy", x) == "chunked"  # the default is auto


def test_auto_on_an_accelerator_picks_triton_and_leaves_elementwise_ops_to_compile(monkeypatch):
    monkeypatch.setattr(K, "_on_accelerator", lambda t: True)
    monkeypatch.setattr(K, "triton_available", lambda: True)
    x = torch.zeros(2)
    ops = ("rms_norm", "apply_rotary", "swiglu", "linear_cross_entropy")
    assert [K.resolve_backend(op, x, backend="auto") for op in ops] == ["triton"] * 4
    assert [K.resolve_backend(op, x, backend="chunked") for op in ops] == ["reference"] * 3 + ["chunked"]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert [K.resolve_backend(op, x, backend="auto") for op in ops] == ["reference"] * 3 + ["triton"]


def test_triton_backend_refuses_cpu_tensors_unless_interpreted(monkeypatch):
    if not K.triton_available():
        pytest.skip("triton is not installed")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        K.rms_norm(torch.ones(2, 4), torch.ones(4), backend="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert K.resolve_backend("rms_norm", torch.ones(2), backend="triton") == "triton"


def test_tensor_subclasses_take_the_reference_even_under_triton(monkeypatch):
    # DTensor (tensor parallelism) and tracing tensors are subclasses; the fused kernels need plain tensors.
    class Wrapped(torch.Tensor):
        pass

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    backend = "triton" if K.triton_available() else "auto"
    x = torch.ones(2, 4)
    assert (K.resolve_backend("rms_norm", x, torch.nn.Parameter(torch.ones(4)), backend=backend)
            == K.resolve_backend("rms_norm", x, backend=backend))
    assert K.resolve_backend("rms_norm", x, torch.ones(4).as_subclass(Wrapped), backend=backend) == "reference"
    assert K.resolve_backend("linear_cross_entropy", x.as_subclass(Wrapped), backend=backend) == "reference"


def test_auto_on_cpu_gives_reference_results():
    torch.manual_seed(0)
    x, w = torch.randn(3, 8), torch.randn(8)
    cos, sin = torch.randn(5, 8), torch.randn(5, 8)
    q = torch.randn(1, 5, 2, 8)
    h, lm, t = torch.randn(6, 8), torch.randn(11, 8), torch.randint(0, 11, (6,))
    torch.testing.assert_close(K.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6))
    torch.testing.assert_close(K.apply_rotary(q, cos, sin), reference.apply_rotary(q, cos, sin))
    torch.testing.assert_close(K.swiglu(x, x), reference.swiglu(x, x))
    torch.testing.assert_close(K.linear_cross_entropy(h, lm, t, chunk_size=4),
                               reference.linear_cross_entropy(h, lm, t))


def test_each_call_dispatches_on_its_own_backend(monkeypatch):
    # Calls with different backends interleave freely: nothing is remembered between them.
    calls = []
    real = reference.linear_cross_entropy
    monkeypatch.setattr(K, "chunked_linear_cross_entropy", lambda *a: calls.append("chunked") or real(*a))
    monkeypatch.setattr(reference, "linear_cross_entropy", lambda *a: calls.append("reference") or real(*a))
    h, lm, t = torch.randn(6, 8), torch.randn(11, 8), torch.randint(0, 11, (6,))
    for backend in ("chunked", "reference", "auto", "reference", "chunked"):
        K.linear_cross_entropy(h, lm, t, backend=backend)
    assert calls == ["chunked", "reference", "chunked", "reference", "chunked"]


def test_import_and_auto_work_without_triton():
    # A fresh interpreter where `import triton` fails: the package must import and run on references.
    code = textwrap.dedent(
        """
        import sys
        class BlockTriton:
            def find_spec(self, name, path=None, target=None):
                if name == "triton" or name.startswith("triton."):
                    raise ImportError("triton blocked for this test")
        sys.meta_path.insert(0, BlockTriton())
        import torch
        import megamlm.kernels as K
        from megamlm.model.config import Backends, ModelArgs
        from megamlm.model.transformer import Transformer
        assert not K.triton_available()
        x = torch.randn(2, 4)
        print(float(K.rms_norm(x, torch.ones(4)).sum()), K.resolve_backend("linear_cross_entropy", x))
        args = ModelArgs(vocab_size=11, num_layers=1, hidden_size=8, ffn_hidden_size=16,
                         num_attention_heads=2, num_query_groups=1, max_seq_length=4)
        print("auto model:", tuple(Transformer(args)(torch.zeros(1, 4, dtype=torch.long), causal=True).shape))
        try:
            K.check_kernel_backend("triton")  # what the trainer checks while planning a run
        except RuntimeError as e:
            print("refused:", e)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "chunked" in result.stdout
    assert "auto model: (1, 4, 8)" in result.stdout
    assert "refused: kernel backend 'triton' needs the triton package" in result.stdout

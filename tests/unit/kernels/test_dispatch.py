"""The dispatch point: backend selection, per-device choice, and life without triton."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import megamlm.kernels as K
from megamlm.kernels import reference

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def restore_backend():
    previous = K.get_kernel_backend()
    yield
    K.set_kernel_backend(previous)


def test_unknown_backend_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match="auto, triton, reference, chunked"):
        K.set_kernel_backend("fast")


def test_cpu_choices_per_backend(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.zeros(2, 3)
    expected = {
        "auto": ("reference", "chunked"),
        "reference": ("reference", "reference"),
        "chunked": ("reference", "chunked"),
    }
    for backend, (elementwise, ce) in expected.items():
        K.set_kernel_backend(backend)
        for op in ("rms_norm", "apply_rotary", "swiglu"):
            assert K.resolve_backend(op, x) == elementwise
        assert K.resolve_backend("linear_cross_entropy", x) == ce


def test_auto_on_an_accelerator_picks_triton_and_leaves_elementwise_ops_to_compile(monkeypatch):
    monkeypatch.setattr(K, "_on_accelerator", lambda t: True)
    monkeypatch.setattr(K, "triton_available", lambda: True)
    K.set_kernel_backend("auto")
    x = torch.zeros(2)
    ops = ("rms_norm", "apply_rotary", "swiglu", "linear_cross_entropy")
    assert [K.resolve_backend(op, x) for op in ops] == ["triton"] * 4
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert [K.resolve_backend(op, x) for op in ops] == ["reference"] * 3 + ["triton"]


def test_triton_backend_refuses_cpu_tensors_unless_interpreted(monkeypatch):
    if not K.triton_available():
        pytest.skip("triton is not installed")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    K.set_kernel_backend("triton")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        K.rms_norm(torch.ones(2, 4), torch.ones(4))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert K.resolve_backend("rms_norm", torch.ones(2)) == "triton"


def test_tensor_subclasses_take_the_reference_even_under_triton(monkeypatch):
    # DTensor (tensor parallelism) and tracing tensors are subclasses; the fused kernels need plain tensors.
    class Wrapped(torch.Tensor):
        pass

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if K.triton_available():
        K.set_kernel_backend("triton")
    x = torch.ones(2, 4)
    assert K.resolve_backend("rms_norm", x, torch.nn.Parameter(torch.ones(4))) == K.resolve_backend("rms_norm", x)
    assert K.resolve_backend("rms_norm", x, torch.ones(4).as_subclass(Wrapped)) == "reference"
    assert K.resolve_backend("linear_cross_entropy", x.as_subclass(Wrapped)) == "reference"


def test_auto_on_cpu_gives_reference_results():
    torch.manual_seed(0)
    x, w = torch.randn(3, 8), torch.randn(8)
    cos, sin = torch.randn(5, 8), torch.randn(5, 8)
    q = torch.randn(1, 5, 2, 8)
    h, lm, t = torch.randn(6, 8), torch.randn(11, 8), torch.randint(0, 11, (6,))
    K.set_kernel_backend("auto")
    torch.testing.assert_close(K.rms_norm(x, w, 1e-6), reference.rms_norm(x, w, 1e-6))
    torch.testing.assert_close(K.apply_rotary(q, cos, sin), reference.apply_rotary(q, cos, sin))
    torch.testing.assert_close(K.swiglu(x, x), reference.swiglu(x, x))
    torch.testing.assert_close(K.linear_cross_entropy(h, lm, t, chunk_size=4),
                               reference.linear_cross_entropy(h, lm, t))


def test_kernel_backend_context_restores_previous():
    K.set_kernel_backend("chunked")
    with K.kernel_backend("reference"):
        assert K.get_kernel_backend() == "reference"
    assert K.get_kernel_backend() == "chunked"


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
        assert not K.triton_available()
        x = torch.randn(2, 4)
        print(float(K.rms_norm(x, torch.ones(4)).sum()), K.resolve_backend("linear_cross_entropy", x))
        try:
            K.set_kernel_backend("triton")
        except RuntimeError as e:
            print("refused:", e)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "chunked" in result.stdout
    assert "refused: kernel backend 'triton' needs the triton package" in result.stdout

"""Fixtures for the kernel tests: the device to test on, and the Triton modules.

Without a GPU the Triton kernels run in Triton's interpreter. ``TRITON_INTERPRET=1`` only takes
effect for functions decorated after it is set, and that includes triton's own ``tl.sum``/``tl.max``
helpers: if triton was imported earlier in this process (by another test, or by torch), the fixture
re-imports triton.language and the kernel modules under the interpreter, and restores them after.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import pytest
import torch

TRITON_MODULES = {
    "rms_norm": "megamlm.kernels.triton_rms_norm",
    "apply_rotary": "megamlm.kernels.triton_rotary",
    "swiglu": "megamlm.kernels.triton_swiglu",
    "linear_cross_entropy": "megamlm.kernels.triton_cross_entropy",
}
# triton.language modules holding @triton.jit helpers, then the package that re-exports them.
_TRITON_LANGUAGE = ("triton.language.standard", "triton.language.random", "triton.language")


@pytest.fixture(scope="session")
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _reimport_triton(interpret: str | None) -> None:
    """Re-decorate triton's helpers and our kernels for the given TRITON_INTERPRET value."""
    if interpret is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = interpret
    for name in (*_TRITON_LANGUAGE, *TRITON_MODULES.values()):
        module = sys.modules.get(name)
        if module is not None:
            importlib.reload(module)


@pytest.fixture(scope="module")
def triton_ops(device):
    """{op name: Triton implementation}, interpreted on CPU, compiled on GPU."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (pip install 'megamlm[kernels]')")
    previous = os.environ.get("TRITON_INTERPRET")
    interpreted = device.type == "cpu"
    if interpreted:
        _reimport_triton("1")
    ops = {op: getattr(importlib.import_module(name), op) for op, name in TRITON_MODULES.items()}
    yield ops
    if interpreted:
        _reimport_triton(previous)

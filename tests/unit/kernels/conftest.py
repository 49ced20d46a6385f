"""Fixtures for the kernel tests: the device to test on, and the Triton modules.

Without a GPU the Triton kernels run in Triton's interpreter: ``TRITON_INTERPRET=1`` must be set
before a kernel is decorated (at module import), so the fixture sets it and re-imports the kernel
modules if they were imported earlier without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import pytest
import torch

TRITON_MODULES = {
    "rms_norm": "megamlm.kernels.triton_rms_norm",
    "apply_rotary": "megamlm.kernels.triton_rotary",
    "swiglu": "megamlm.kernels.triton_swiglu",
    "linear_cross_entropy": "megamlm.kernels.triton_cross_entropy",
}


@pytest.fixture(scope="session")
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _interpreted(module) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    kernels = [v for k, v in vars(module).items() if k.startswith("_") and k.endswith("_kernel")]
    return bool(kernels) and all(isinstance(k, InterpretedFunction) for k in kernels)


@pytest.fixture(scope="module")
def triton_ops(device):
    """{op name: Triton implementation}, interpreted on CPU, compiled on GPU."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (pip install 'megamlm[kernels]')")
    previous = os.environ.get("TRITON_INTERPRET")
    if device.type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    ops = {}
    for op, name in TRITON_MODULES.items():
        module = importlib.import_module(name)
        if device.type == "cpu" and not _interpreted(module):
            module = importlib.reload(module)
        ops[op] = getattr(module, op)
    yield ops
    if previous is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = previous

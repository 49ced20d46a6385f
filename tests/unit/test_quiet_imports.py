"""Issue 23, item 8: importing transformers from a megamlm entry point prints none of the known third-party
noise (torchao's unloadable C++ kernels and its pytree-Enum deprecation warnings, when torchao is installed)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from megamlm.log import KNOWN_IMPORT_NOISE, quiet_imports

REPO = Path(__file__).resolve().parents[2]
NOISE = ("Failed to load ", "is an Enum subclass and is now natively supported")


def test_the_known_noise_is_dropped_and_other_records_kept(caplog):
    quiet_imports()
    quiet_imports()  # once is enough: no second filter
    for name in KNOWN_IMPORT_NOISE:
        assert len(logging.getLogger(name).filters) == 1
    with caplog.at_level(logging.INFO):
        logging.getLogger("torchao").warning("Failed to load /x/_C_mxfp8.so: Could not load this library")
        logging.getLogger("torch.utils._pytree").warning("%s is an Enum subclass and is now natively supported by "
                                                          "torch.compile", "<enum 'KernelPreference'>")
        logging.getLogger("torchao").warning("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]


def test_entry_points_import_transformers_quietly(tmp_path):
    """The evaluation and export tools import transformers' models (which import torchao where installed)."""
    code = ("import runpy, sys; sys.argv = ['pretrain.py', '--help']\n"
            f"exec(open({str(REPO / 'pretrain.py')!r}).read().split('from megamlm.cli')[0])\n"
            "import transformers.modeling_utils\n"
            "from transformers import AutoModelForMaskedLM\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert not any(noise in done.stderr + done.stdout for noise in NOISE), done.stderr[-2000:]

"""A crafted checkpoint runs nothing: every command that reads one refuses it in one line (exit 2).

Checkpoints are shared and downloaded. Each case below plants a pickle payload that would create a marker file
when unpickled, in the places a checkpoint holds pickles (``rng_rank*.pt``, megamlm 0.1's ``train_state.pt``, DCP's
``.metadata``), and runs the real command lines as subprocesses: ``pretrain.py --load``, ``--init-from``,
``--continue-from`` and ``tools/convert_to_hf.py``. Each must exit 2 with one line on stderr (no traceback), leave
the checkpoint's files byte-identical, and never create the marker.
"""

import hashlib
import json
import os
import pickle
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from megamlm.checkpoint.catalog import rng_file
from megamlm.checkpoint.integrity import MARKER, describe_files

REPO = Path(__file__).resolve().parents[2]


class Payload:
    """Unpickled, it runs ``touch marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def recommit(folder: Path, name: str) -> None:
    """Update the completion marker's checksum of ``name``, as whoever crafted the file would."""
    marker = json.loads((folder / MARKER).read_text())
    marker["files"].update(describe_files(folder, [name]))
    (folder / MARKER).write_text(json.dumps(marker))


def craft(folder: Path, where: str, marker: Path) -> str:
    """Plant the payload; returns the file it is in."""
    if where == "rng":
        state = torch.load(folder / rng_file(0), weights_only=True)
        torch.save({**state, "extra": Payload(marker)}, folder / rng_file(0))
        recommit(folder, rng_file(0))
        return rng_file(0)
    if where.startswith("metadata"):
        with open(folder / ".metadata", "rb") as f:
            metadata = pickle.load(f)  # our own, trusted
        metadata.storage_meta.modules = [Payload(marker)]  # DCP would unpickle it, run it and load the checkpoint
        with open(folder / ".metadata", "wb") as f:
            pickle.dump(metadata, f)
        recommit(folder, ".metadata")
        if where == "metadata-unmarked":  # as saved before completion markers: only its structure is checked
            (folder / MARKER).unlink()
        return ".metadata"
    assert where == "legacy-train-state"  # megamlm 0.1's layout: a pickled train state, no marker, no RNG files
    state = json.loads((folder / "train_state.json").read_text())
    torch.save({"step": state["step"], "consumed_samples": 8, "rng": Payload(marker)}, folder / "train_state.pt")
    for name in ("train_state.json", MARKER, rng_file(0)):
        (folder / name).unlink()
    return "train_state.pt"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny):
    save = tmp_path_factory.mktemp("untrusted") / "run"
    tiny("--train-iters", "4", "--exit-interval", "2", "--save", save)
    return save / "iter_0000002"


def command(kind: str, folder: Path, out: Path, tiny_flags) -> list[str]:
    if kind == "convert_to_hf":
        return [sys.executable, str(REPO / "tools" / "convert_to_hf.py"), "--input", str(folder), "--output", str(out)]
    flag = {"load": "--load", "init_from": "--init-from", "continue_from": "--continue-from"}[kind]
    return [sys.executable, str(REPO / "pretrain.py"), *tiny_flags, "--train-iters", "6", flag, str(folder),
            "--save", str(out)]


@pytest.mark.parametrize("kind", ["load", "init_from", "continue_from", "convert_to_hf"])
@pytest.mark.parametrize("where", ["rng", "legacy-train-state", "metadata"])
def test_a_crafted_checkpoint_is_refused_in_one_line_and_runs_nothing(checkpoint, tmp_path, tiny_flags, cache_dir,
                                                                     where, kind):
    folder = tmp_path / "shared" / checkpoint.name
    shutil.copytree(checkpoint.parent, folder.parent)
    marker = tmp_path / "payload_ran"
    culprit = craft(folder, where, marker)
    before = digest(folder.parent)
    out = subprocess.run(command(kind, folder, tmp_path / "out", tiny_flags), cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "MEGAMLM_CACHE": cache_dir, "PYTHONPATH": str(REPO)},
                         timeout=300)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("error: ") and f"{folder / culprit} refers to the Python global posix.system" \
        in out.stderr, out.stderr
    assert not marker.exists()
    assert digest(folder.parent) == before
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("iter_*"))


def test_a_crafted_newest_checkpoint_is_skipped_for_the_previous_one_saying_why(tmp_path, tiny, tiny_flags,
                                                                              cache_dir):
    """A save folder scanned for its newest loadable checkpoint passes over the crafted one, with a warning (the
    scan of a checkpoint without a completion marker reads its .metadata: through the allow-list)."""
    save = tmp_path / "run"
    tiny("--train-iters", "4", "--save-interval", "2", "--save", save)
    marker = tmp_path / "payload_ran"
    craft(save / "iter_0000004", "metadata-unmarked", marker)
    out = subprocess.run([sys.executable, str(REPO / "tools" / "convert_to_hf.py"), "--input", str(save),
                          "--output", str(tmp_path / "hf")], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "MEGAMLM_CACHE": cache_dir, "PYTHONPATH": str(REPO)}, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"skipping checkpoint {save / 'iter_0000004'}: " in out.stdout and "posix.system" in out.stdout
    assert (tmp_path / "hf" / "model.safetensors").exists() and not marker.exists()

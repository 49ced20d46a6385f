"""Nothing in a checkpoint's files runs while megamlm reads it: a pickle naming code is refused in one line.

Each crafted file carries a payload that would create a marker file if unpickled; the tests check the refusal,
that the marker was never created, and that the checkpoint's files are as they were.
"""

import json
import os
import pickle
import random
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from helpers import tree_digest as digest

from megamlm.checkpoint import CheckpointError, load_checkpoint, resolve_checkpoint, save_checkpoint
from megamlm.checkpoint.catalog import rng_file
from megamlm.checkpoint.integrity import MARKER, describe_files
from megamlm.checkpoint.untrusted import METADATA_GLOBALS, VettedReader, read_metadata


class Payload:
    """Unpickled, it runs ``touch marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def make_model(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(3, 8)).square().sum().backward()
    optimizer.step()
    return model, optimizer


def save(save_dir: Path, step: int = 3) -> Path:
    model, optimizer = make_model()
    return save_checkpoint(save_dir, step, model, optimizer, {"consumed_samples": 12}, {"step": step})


def recommit(folder: Path, *names: str) -> None:
    """Update the completion marker's checksums, as whoever crafted the file would."""
    marker = json.loads((folder / MARKER).read_text())
    marker["files"].update(describe_files(folder, list(names)))
    (folder / MARKER).write_text(json.dumps(marker))


def craft_metadata(folder: Path, marker: Path) -> None:
    with open(folder / ".metadata", "rb") as f:
        metadata = pickle.load(f)  # our own, trusted
    metadata.storage_meta.modules = [Payload(marker)]  # DCP would unpickle, run it, and load the checkpoint
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(metadata, f)


def test_a_checkpoint_of_a_model_and_adamw_holds_only_the_allowed_metadata_globals(tmp_path):
    folder = save(tmp_path)
    found = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            found.add((module, name))
            return super().find_class(module, name)

    with open(folder / ".metadata", "rb") as f:
        Recording(f).load()
    dtypes = {g for g in found if g[0] == "torch" and isinstance(getattr(torch, g[1]), torch.dtype)}
    assert found - dtypes <= METADATA_GLOBALS and dtypes
    assert read_metadata(folder / ".metadata").state_dict_metadata.keys() == \
        pickle.loads((folder / ".metadata").read_bytes()).state_dict_metadata.keys()


def test_rng_files_hold_only_what_weights_only_loading_reads_and_restore_every_generator(tmp_path):
    folder = save(tmp_path)
    torch.load(folder / rng_file(0), weights_only=True)  # no numpy arrays, no other globals
    np.random.randn()  # a cached Gaussian is part of numpy's state
    saved = save(tmp_path / "again")
    expected = (random.random(), np.random.randn(), np.random.rand(), torch.rand(2).tolist())
    model, optimizer = make_model(1)
    load_checkpoint(resolve_checkpoint(saved), model, optimizer)
    assert (random.random(), np.random.randn(), np.random.rand(), torch.rand(2).tolist()) == expected


def test_an_rng_file_of_the_previous_layout_with_numpy_arrays_still_loads(tmp_path):
    folder = save(tmp_path)
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    torch.save(state, folder / rng_file(0))  # as megamlm wrote it before: numpy's legacy tuple with an array
    recommit(folder, rng_file(0))
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    model, optimizer = make_model(1)
    load_checkpoint(resolve_checkpoint(folder), model, optimizer)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


@pytest.mark.parametrize("where", ["rng", "metadata", "metadata-unmarked", "legacy-train-state"])
def test_a_crafted_pickle_is_refused_naming_the_file_and_runs_nothing(tmp_path, where):
    folder = save(tmp_path / "run")
    marker = tmp_path / "ran"
    if where == "rng":
        state = torch.load(folder / rng_file(0), weights_only=True)
        torch.save({**state, "extra": Payload(marker)}, folder / rng_file(0))
        recommit(folder, rng_file(0))
        culprit = folder / rng_file(0)
    elif where.startswith("metadata"):
        craft_metadata(folder, marker)
        recommit(folder, ".metadata")
        if where == "metadata-unmarked":
            (folder / MARKER).unlink()  # as written before completion markers: checked by its structure
        culprit = folder / ".metadata"
    else:
        (folder / MARKER).unlink()
        (folder / "train_state.json").unlink()
        torch.save({"step": 3, "consumed_samples": 12, "rng": Payload(marker)}, folder / "train_state.pt")
        culprit = folder / "train_state.pt"
    before = digest(folder)
    with pytest.raises(CheckpointError) as err:
        resolve_checkpoint(folder)
    message = str(err.value)
    assert f"{culprit} refers to the Python global posix.system" in message and "\n" not in message
    assert "tools/convert_to_hf.py" in message
    assert not marker.exists() and digest(folder) == before


def test_dcp_itself_reads_metadata_only_through_the_allow_list(tmp_path):
    """Even without the checks of resolve_checkpoint (a folder read directly), DCP never unpickles it."""
    folder = save(tmp_path / "run")
    marker = tmp_path / "ran"
    craft_metadata(folder, marker)
    model, optimizer = make_model(1)
    with pytest.raises(CheckpointError, match="posix.system"):
        load_checkpoint(folder, model, optimizer)
    reader = VettedReader(str(folder))
    with pytest.raises(BaseException):  # noqa: B017 - DCP wraps it in its CheckpointException
        dcp.load({"model": model.state_dict()}, storage_reader=reader)
    assert "posix.system" in str(reader.refused)
    assert not marker.exists()


def test_a_payload_in_the_optimizer_values_of_a_shard_is_refused_when_loading(tmp_path):
    """DCP reads non-tensor values (the optimizer's hyperparameters) with weights_only=False: megamlm does not."""
    marker = tmp_path / "ran"
    model, optimizer = make_model()
    optimizer.param_groups[0]["lr"] = Payload(marker)
    folder = save_checkpoint(tmp_path / "run", 3, model, optimizer, {}, {})
    assert not marker.exists()
    model, optimizer = make_model(1)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(resolve_checkpoint(folder), model, optimizer)
    assert "'optim.param_groups.0.lr'" in str(err.value) and "posix.system" in str(err.value)
    assert not marker.exists()

"""Crash-safe checkpoints: completion marker, skipping damaged checkpoints, retention, failed saves."""

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from megamlm.checkpoint import (
    CheckpointError,
    CheckpointSaveError,
    load_checkpoint,
    read_train_state,
    resolve_checkpoint,
    save_checkpoint,
)
from megamlm.checkpoint.catalog import LATEST, iteration_dir
from megamlm.checkpoint.checkpointer import _keep_own_parameters
from megamlm.checkpoint.integrity import MARKER, file_digest


def make_model(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(3, 8)).square().sum().backward()
    optimizer.step()
    return model, optimizer


def save(save_dir: Path, step: int, seed: int | None = None, **kwargs) -> Path:
    model, optimizer = make_model(step if seed is None else seed)
    return save_checkpoint(save_dir, step, model, optimizer, {"consumed_samples": step * 4}, {"step": step},
                           **kwargs)


def loaded_weight(path: Path) -> torch.Tensor:
    model, optimizer = make_model(999)
    folder = resolve_checkpoint(path)
    load_checkpoint(folder, model, optimizer)
    state = read_train_state(folder)
    assert state["consumed_samples"] == state["step"] * 4 and state["format"] == 2
    return model[0].weight.detach().clone()


def shard(folder: Path) -> Path:
    return sorted(folder.glob("*.distcp"))[0]


def test_marker_is_written_with_the_checksum_of_every_file_and_latest_moves(tmp_path):
    folder = save(tmp_path, 5)
    marker = json.loads((folder / MARKER).read_text())
    names = {p.name for p in folder.iterdir() if p.name != MARKER}
    assert set(marker["files"]) == names >= {".metadata", "train_state.json", "rng_rank00000.pt", "config.json",
                                                shard(folder).name}
    for name, entry in marker["files"].items():
        assert entry == {"bytes": (folder / name).stat().st_size, "sha256": file_digest(folder / name)}
    assert marker["step"] == 5 and marker["world_size"] == 1
    assert (tmp_path / LATEST).read_text() == "5"
    assert not list(tmp_path.glob("*.tmp*")) and not list(folder.glob(".done_rank*"))


def test_truncated_shard_is_skipped_for_the_previous_checkpoint(tmp_path, capsys):
    save(tmp_path, 1)
    newest = save(tmp_path, 2)
    data = shard(newest).read_bytes()
    shard(newest).write_bytes(data[: len(data) // 2])

    assert resolve_checkpoint(tmp_path) == iteration_dir(tmp_path, 1)
    out = capsys.readouterr().out
    assert f"skipping checkpoint {newest}" in out and "truncated" in out
    assert torch.equal(loaded_weight(tmp_path), make_model(1)[0][0].weight)
    with pytest.raises(CheckpointError, match="cannot be loaded: file __0_0.distcp has"):
        resolve_checkpoint(newest)  # named explicitly: refused, not silently replaced


def test_flipped_byte_is_caught_by_the_checksum(tmp_path, capsys):
    save(tmp_path, 1)
    newest = save(tmp_path, 2)
    data = bytearray(shard(newest).read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard(newest).write_bytes(bytes(data))
    assert resolve_checkpoint(tmp_path) == iteration_dir(tmp_path, 1)
    assert "does not match its checksum" in capsys.readouterr().out


def test_interrupted_saves_are_never_loaded(tmp_path):
    save(tmp_path, 1)
    tmp_folder = save(tmp_path / "other", 3).rename(tmp_path / "iter_0000003.tmp")  # a whole save, not committed
    assert tmp_folder.exists()
    half = iteration_dir(tmp_path, 4)  # marker never written, shards partly there
    half.mkdir()
    (half / "__0_0.distcp").write_bytes(b"partial")
    assert resolve_checkpoint(tmp_path) == iteration_dir(tmp_path, 1)


def test_no_loadable_checkpoint_is_one_clear_error(tmp_path):
    newest = save(tmp_path, 1)
    (newest / MARKER).unlink()
    (newest / ".metadata").unlink()
    with pytest.raises(CheckpointError, match="none of the 1 checkpoints .* can be loaded"):
        resolve_checkpoint(tmp_path)


def test_keep_last_keeps_the_newest_and_the_pinned_switch_checkpoint(tmp_path):
    for step in range(1, 6):
        save(tmp_path, step, keep_last=2, pinned="objective switch" if step == 2 else None)
    assert sorted(p.name for p in tmp_path.glob("iter_*")) == ["iter_0000002", "iter_0000004", "iter_0000005"]
    assert not list(tmp_path.glob("*.trash*"))


def test_keep_last_never_counts_a_damaged_checkpoint_as_a_good_one(tmp_path):
    save(tmp_path, 1)
    damaged = save(tmp_path, 2)
    shard(damaged).write_bytes(b"x")
    save(tmp_path, 3, keep_last=2)  # whole: 3 and 1 -> nothing older than 1 to delete
    assert iteration_dir(tmp_path, 1).exists()
    save(tmp_path, 4, keep_last=2)  # whole: 4, 3 -> 2 (damaged) and 1 go
    assert sorted(p.name for p in tmp_path.glob("iter_*")) == ["iter_0000003", "iter_0000004"]


def test_stale_tmp_folders_are_cleaned_by_retention(tmp_path):
    save(tmp_path, 1)
    (tmp_path / "iter_0000002.tmp").mkdir()
    save(tmp_path, 3, keep_last=5)
    assert not (tmp_path / "iter_0000002.tmp").exists()


class FullDisk:
    """DCP's file streams fail with ENOSPC after a few bytes, as on a full disk."""

    def __init__(self, monkeypatch):
        from torch.distributed.checkpoint.filesystem import FileSystem

        original = FileSystem.create_stream

        def create_stream(fs, path, mode):
            stream_cm = original(fs, path, mode)

            class Failing:
                def __enter__(self_inner):
                    self_inner.stream = stream_cm.__enter__()
                    return self_inner

                def __exit__(self_inner, *exc):
                    return stream_cm.__exit__(*exc)

                def write(self_inner, data):
                    self_inner.stream.write(bytes(data)[:10])
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

                def __getattr__(self_inner, name):
                    return getattr(self_inner.stream, name)

            return Failing()

        monkeypatch.setattr(FileSystem, "create_stream", create_stream)


def test_disk_full_during_save_reports_the_cause_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    save(tmp_path, 1)
    FullDisk(monkeypatch)
    with pytest.raises(CheckpointSaveError) as err:
        save(tmp_path, 2)
    message = str(err.value)
    assert "could not save the checkpoint of step 2" in message
    assert "No space left on device (ENOSPC)" in message
    assert f"the previous checkpoint {iteration_dir(tmp_path, 1)} is untouched" in message
    monkeypatch.undo()
    assert not (tmp_path / "iter_0000002.tmp").exists() and not iteration_dir(tmp_path, 2).exists()
    assert (tmp_path / LATEST).read_text() == "1"
    assert torch.equal(loaded_weight(tmp_path), make_model(1)[0][0].weight)


def test_read_only_save_folder_fails_clearly_and_the_old_checkpoint_stays_loadable(tmp_path, monkeypatch):
    # Tests run as root, which chmod cannot stop: refuse creation inside the folder at the os level instead.
    save(tmp_path, 1)
    real_mkdir = os.mkdir

    def read_only_mkdir(path, *args, **kwargs):
        if Path(path).resolve().is_relative_to(tmp_path.resolve()) and not Path(path).exists():
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only_mkdir)
    with pytest.raises(CheckpointSaveError, match=r"Permission denied \(EACCES\) at .*iter_0000002.tmp.* is untouched"):
        save(tmp_path, 2)
    monkeypatch.undo()
    assert resolve_checkpoint(tmp_path) == iteration_dir(tmp_path, 1)
    assert torch.equal(loaded_weight(tmp_path), make_model(1)[0][0].weight)


def test_save_folder_under_a_file_fails_with_the_cause(tmp_path):
    (tmp_path / "not_a_folder").write_text("a file where the save folder must go")
    with pytest.raises(CheckpointSaveError, match=r"Not a directory \(ENOTDIR\).*no earlier checkpoint exists"):
        save(tmp_path / "not_a_folder" / "ckpt", 1)


def test_saving_the_same_step_again_replaces_it_whole(tmp_path):
    save(tmp_path, 3, seed=1)
    save(tmp_path, 3, seed=2)
    assert torch.equal(loaded_weight(tmp_path), make_model(2)[0][0].weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000003", LATEST]


def test_checkpoint_without_marker_from_older_versions_still_loads(tmp_path):
    folder = save(tmp_path, 1)
    (folder / MARKER).unlink()
    assert resolve_checkpoint(tmp_path) == folder
    assert torch.equal(loaded_weight(tmp_path), make_model(1)[0][0].weight)


@pytest.mark.parametrize("damage", ["truncated shard", "missing shard", "unreadable metadata", "unreadable state"])
def test_a_damaged_checkpoint_without_marker_is_checked_by_its_structure_and_skipped(tmp_path, capsys, damage):
    for step in (1, 2):
        (save(tmp_path, step) / MARKER).unlink()  # as written before completion markers existed
    newest = iteration_dir(tmp_path, 2)
    if damage == "truncated shard":
        shard(newest).write_bytes(shard(newest).read_bytes()[:100])
    elif damage == "missing shard":
        shard(newest).unlink()
    elif damage == "unreadable metadata":
        (newest / ".metadata").write_bytes(b"not a pickle")
    else:
        (newest / "train_state.json").write_text("{half")
    assert resolve_checkpoint(tmp_path) == iteration_dir(tmp_path, 1)
    out = capsys.readouterr().out
    assert f"skipping checkpoint {newest}" in out and "checked by its structure" in out
    assert torch.equal(loaded_weight(tmp_path), make_model(1)[0][0].weight)


class Killed(BaseException):
    """Stands for the process dying at this point (nothing after it runs, no cleanup)."""


def test_death_after_the_rename_but_before_latest_moves_still_loads_the_new_checkpoint(tmp_path, monkeypatch):
    from megamlm.checkpoint import checkpointer

    save(tmp_path, 1)

    def die(*args):
        raise Killed

    monkeypatch.setattr(checkpointer, "_write_latest", die)
    with pytest.raises(Killed):
        save(tmp_path, 2)
    monkeypatch.undo()
    assert (tmp_path / LATEST).read_text() == "1"
    assert resolve_checkpoint(tmp_path) == iteration_dir(tmp_path, 2)  # whole: its marker was written first


def test_death_before_the_marker_leaves_only_an_ignored_tmp_folder(tmp_path, monkeypatch):
    from megamlm.checkpoint import checkpointer

    save(tmp_path, 1)

    def die(*args):
        raise Killed

    monkeypatch.setattr(checkpointer, "write_marker", die)
    with pytest.raises(Killed):
        save(tmp_path, 2)
    monkeypatch.undo()
    assert (tmp_path / "iter_0000002.tmp" / "__0_0.distcp").exists() and not iteration_dir(tmp_path, 2).exists()
    assert resolve_checkpoint(tmp_path) == iteration_dir(tmp_path, 1)
    save(tmp_path, 2)  # the next save of that step clears the leftover
    assert resolve_checkpoint(tmp_path) == iteration_dir(tmp_path, 2)


def test_each_rank_rng_is_saved_and_restored(tmp_path):
    model, optimizer = make_model(1)
    torch.manual_seed(77)
    folder = save_checkpoint(tmp_path, 1, model, optimizer, {}, {})
    expected = torch.rand(4)
    torch.manual_seed(5)
    load_checkpoint(folder, model, optimizer)
    assert torch.equal(torch.rand(4), expected)


def test_loaded_parameter_groups_of_another_count_are_refused_in_one_line():
    """The loaded groups are matched to this run's by place (DCP writes one rank's ``param_groups`` for all); a
    count that differs is another optimizer setup, whose hyperparameters must not be dropped silently."""
    loaded = {"param_groups": [{"params": ["w"], "lr": 0.1}]}
    with pytest.raises(CheckpointError, match="1 parameter groups and this run's 2"):
        _keep_own_parameters(loaded, [["a.weight"], ["a.bias"]])
    _keep_own_parameters(loaded, [["a.weight"]])
    assert loaded["param_groups"] == [{"params": ["a.weight"], "lr": 0.1}]

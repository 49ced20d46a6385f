"""Read leases and the retry of a reader whose checkpoint was retired (deterministic; the real race runs in
tests/e2e/test_reading_while_retiring.py)."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from megamlm.checkpoint import CheckpointError, save_checkpoint
from megamlm.checkpoint.catalog import remove_folder, retire_old_checkpoints
from megamlm.checkpoint.leases import live_readers, read_lease
from megamlm.checkpoint.reading import read_newest

REPO = Path(__file__).resolve().parents[3]


def save(save_dir: Path, step: int) -> Path:
    model = torch.nn.Linear(4, 4)
    return save_checkpoint(save_dir, step, model, torch.optim.AdamW(model.parameters()), {}, {"step": step})


def test_a_checkpoint_retired_while_read_is_read_again_from_the_newest(tmp_path, capsys):
    save(tmp_path, 1)
    seen = []

    def read(folder):
        seen.append(folder.name)
        if len(seen) == 1:  # meanwhile the run saves step 2 and retires step 1, then this read opens a file
            save(tmp_path, 2)
            remove_folder(folder)
            (folder / ".metadata").read_bytes()
        return folder.name

    assert read_newest(tmp_path, read) == "iter_0000002" and seen == ["iter_0000001", "iter_0000002"]
    assert "was retired (--keep-last) while it was read; reading the newest one instead" in capsys.readouterr().out


def test_an_explicit_checkpoint_retired_while_read_is_one_clear_error(tmp_path):
    folder = save(tmp_path, 1)

    def read(folder):
        remove_folder(folder)
        raise FileNotFoundError(folder / ".metadata")

    with pytest.raises(CheckpointError, match="was deleted while it was read .*pass its save folder"):
        read_newest(folder, read)


def test_a_problem_of_the_checkpoint_itself_is_not_retried(tmp_path):
    save(tmp_path, 1)
    calls = []

    def read(folder):
        calls.append(folder)
        raise ValueError("bad shapes")

    with pytest.raises(ValueError, match="bad shapes"):
        read_newest(tmp_path, read)
    assert len(calls) == 1


def test_retirement_leaves_a_leased_checkpoint_for_a_later_save(tmp_path):
    first = save(tmp_path, 1)
    save(tmp_path, 2)
    with read_lease(first):
        assert len(live_readers(first)) == 1
        assert retire_old_checkpoints(tmp_path, 1, 2) == [] and first.exists()
    assert live_readers(first) == [] and not list(first.glob(".reader.*"))
    assert retire_old_checkpoints(tmp_path, 1, 2) == [first] and not first.exists()


def test_the_lease_of_a_reader_that_died_holds_nothing_back(tmp_path):
    folder = save(tmp_path, 1)
    code = ("import sys, time; from pathlib import Path; from megamlm.checkpoint.leases import read_lease\n"
            "with read_lease(Path(sys.argv[1])):\n    print('reading', flush=True); time.sleep(600)")
    reader = subprocess.Popen([sys.executable, "-c", code, str(folder)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "reading"
    assert len(live_readers(folder)) == 1
    reader.send_signal(signal.SIGKILL)
    reader.wait()
    assert len(list(folder.glob(".reader.*"))) == 1 and live_readers(folder) == []
    save(tmp_path, 2)
    assert retire_old_checkpoints(tmp_path, 1, 2) == [folder] and not folder.exists()

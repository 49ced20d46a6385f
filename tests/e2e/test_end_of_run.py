"""Issue 23, item 4: nothing trained is thrown away silently, and a finished run relaunched says so."""

from __future__ import annotations

from helpers import TINY

from megamlm.cli import main


def test_a_run_without_save_ends_saying_nothing_was_saved(capsys, cache_dir):
    assert main([*TINY, "--train-iters", "5", "--log-interval", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "nothing was saved: this run had no --save, so its 5 steps are gone" in last
    assert "--save DIR" in last


def test_relaunching_a_finished_run_says_it_is_complete_and_exits_0(tmp_path, capsys, cache_dir):
    argv = [*TINY, "--train-iters", "5", "--log-interval", "1", "--save", str(tmp_path / "ckpt"),
            "--load", str(tmp_path / "ckpt")]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "nothing was saved" not in first
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert "the run is already complete at step 5 (--train-iters 5); nothing to train" in again
    assert "done:" not in again and "of the stream" not in again

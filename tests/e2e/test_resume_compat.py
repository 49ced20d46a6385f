"""Every restart is either exactly right or refused with one line (exit 2, the checkpoint untouched).

Refused: what fixes the samples, the masks or the weights (seed, data, sequence length, masking, shape) and,
without --override-schedule, a history that disagrees with this launch's schedule (objective or LR of a step so
far, optimizer settings; tests/e2e/test_branching.py covers the schedules that agree). Honoured exactly: another
global batch size (the same sample stream continues), and the schedule with the override.
"""

import json

import pytest
import torch
from helpers import TINY_SHAPE

from megamlm.checkpoint.catalog import LEGACY_TRAIN_STATE, TRAIN_STATE
from megamlm.checkpoint.integrity import MARKER
from megamlm.cli import main
from megamlm.training import trainer
from megamlm.training.nonfinite import NonFiniteError
from megamlm.training.optim import LRSchedule

SMALL = [*TINY_SHAPE, "--micro-batch-size", "2", "--lr-warmup-iters", "2", "--lr-wsd-decay-iters", "2",
         "--objective", "clm_then_mlm", "--switch", "0.5"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def small(run):
    return lambda *argv: run(*SMALL, *argv)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, small):
    """A run of 8 steps at global batch 4 (switch after step 4), stopped after step 3."""
    save = tmp_path_factory.mktemp("resume") / "run"
    small("--global-batch-size", "4", "--train-iters", "8", "--save", save, "--exit-interval", "3")
    return save


REFUSED = [
    (["--seed", "99"], "--seed is 1234 in the checkpoint and 99 here", "--init-from"),
    (["--seq-length", "64"], "--seq-length is 32 in the checkpoint and 64 here", "--init-from"),
    (["--mask-ratio", "0.3"], "--mask-ratio is 0.4 in the checkpoint and 0.3 here", "--init-from"),
    (["--mask-replace-prob", "0.8", "--mask-random-prob", "0.1", "--mask-keep-prob", "0.1"],
     "--mask-replace-prob is 1.0 in the checkpoint and 0.8 here", "--init-from"),
    (["--hidden-size", "64"], "--hidden-size is 32 in the checkpoint and 64 here", "--init-from"),
    (["--tie-word-embeddings"], "--tie-word-embeddings is False in the checkpoint and True here", "--init-from"),
    (["--objective", "mlm_then_clm"], "--objective is 'clm_then_mlm' in the checkpoint and 'mlm_then_clm' here",
     "--override-schedule"),
    (["--switch", "0.25"], "the checkpoint (step 3) is past this launch's switch step 2", "--override-schedule"),
    (["--lr", "1e-3"], "--lr is 0.003 in the checkpoint and 0.001 here", "--override-schedule"),
    (["--lr-decay-style", "cosine"], "--lr-decay-style is 'wsd' in the checkpoint and 'cosine' here",
     "--override-schedule"),
    (["--weight-decay", "0.0"], "--weight-decay is 0.1 in the checkpoint and 0.0 here", "--override-schedule"),
    (["--adam-beta2", "0.999"], "--adam-beta2 is 0.95 in the checkpoint and 0.999 here", "--override-schedule"),
    (["--clip-grad", "0.5"], "--clip-grad is 1.0 in the checkpoint and 0.5 here", "--override-schedule"),
]


@pytest.mark.parametrize("change,message,fix", REFUSED, ids=[r[0][0] for r in REFUSED])
def test_a_resume_that_would_silently_differ_is_refused_in_one_line(checkpoint, capsys, fast_flags, tree_digest,
                                                                     change, message, fix):
    before = tree_digest(checkpoint)
    base = {"--global-batch-size": "4", "--train-iters": "8"}
    argv = [*fast_flags, *SMALL, *[x for k, v in base.items() if k not in change for x in (k, v)], *change,
            "--save", str(checkpoint)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot resume") and message in err and fix in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert tree_digest(checkpoint) == before


def test_another_optimizer_under_override_schedule_is_refused_in_one_line(checkpoint, capsys, fast_flags, tree_digest):
    """--override-schedule overrides the schedule's values; another optimizer's state cannot be carried over."""
    pytest.importorskip("optimi", reason='StableAdamW needs torch-optimi: pip install "megamlm[optimi]"')
    before = tree_digest(checkpoint)
    argv = [*fast_flags, *SMALL, "--global-batch-size", "4", "--train-iters", "8", "--optimizer", "stableadamw",
            "--override-schedule", "--save", str(checkpoint)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot resume") and "--optimizer stableadamw: its optimizer state is adamw's" in err
    assert "--continue-from" in err and err.count("\n") == 1 and tree_digest(checkpoint) == before


@pytest.mark.parametrize("new_batch", [2, 8])
def test_another_global_batch_size_continues_the_same_stream_without_repeat_or_gap(checkpoint, small, tmp_path,
                                                                                    new_batch):
    first = small("--global-batch-size", "4", "--train-iters", "8", "--load", checkpoint / "iter_0000003",
                  "--save", tmp_path / "unused", "--exit-interval", "1000")  # the reference continuation
    resumed = small("--global-batch-size", str(new_batch), "--train-iters", "8", "--load",
                    checkpoint / "iter_0000003", "--save", tmp_path / "new")
    assert first.start_step == resumed.start_step == 3
    ids = [k for step in sorted(resumed.sample_ids) for k in resumed.sample_ids[step]]
    assert ids == list(range(12, 12 + 5 * new_batch))  # continues at sample 12, one batch of new_batch per step
    assert set(ids).isdisjoint(range(12))  # the checkpoint's 3 steps x 4 samples are not trained again
    assert ids[:4] == first.sample_ids[4]


def test_override_schedule_continues_with_this_launchs_values_and_logs_them(checkpoint, small, tmp_path, capsys):
    resumed = small("--global-batch-size", "4", "--train-iters", "12", "--lr", "1e-3", "--load",
                    checkpoint / "iter_0000003", "--save", tmp_path / "longer", "--override-schedule")
    out = capsys.readouterr().out
    assert "--override-schedule: the learning rate of step 1 is 0.0015 in the checkpoint's history and 0.0005" in out
    assert "--lr is 0.003 in the checkpoint and 0.001 here; --train-iters is 8 in the checkpoint and 12 here" in out
    assert resumed.start_step == 3 and sorted(resumed.losses) == list(range(4, 13))
    expected = LRSchedule(1e-3, 0.0, "wsd", 2, 2, 12)
    assert [resumed.lrs[s] for s in range(4, 13)] == [expected.lr_at(s) for s in range(4, 13)]
    assert resumed.objectives[6] == "clm" and resumed.objectives[7] == "mlm"  # switch 0.5 x 12 = step 6


def test_a_checkpoint_of_megamlm_0_1_is_refused_naming_the_version_and_its_weights_still_load(tmp_path, capsys,
                                                                                             small, fast_flags):
    save = tmp_path / "old"
    small("--global-batch-size", "4", "--train-iters", "4", "--save", save)
    folder = save / "iter_0000004"
    # Make it look like a format-1 checkpoint: a pickled train state and no completion marker (0.1.0 layout).
    state = json.loads((folder / TRAIN_STATE).read_text())
    torch.save({"step": 4, "consumed_samples": 16, "objective_schedule": {}, "lr_schedule": {},
                "sampler": {"consumed_samples": 16}, "rng": {}}, folder / LEGACY_TRAIN_STATE)
    (folder / TRAIN_STATE).unlink()
    (folder / MARKER).unlink()
    for rng in folder.glob("rng_rank*.pt"):
        rng.unlink()
    assert state["step"] == 4
    argv = [*fast_flags, *SMALL, "--global-batch-size", "4", "--train-iters", "8", "--load", str(folder),
            "--save", str(tmp_path / "new")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "written by megamlm 0.1 (checkpoint format 1)" in err and f"--init-from {folder}" in err
    assert err.count("\n") == 1
    cpt = small("--global-batch-size", "4", "--train-iters", "4", "--init-from", folder)
    assert sorted(cpt.losses) == [1, 2, 3, 4]


def test_a_checkpoint_recorded_before_the_decoder_features_existed_resumes(tmp_path, small):
    """Its shape record lacks head_dim, the attention biases, RoPE scaling and tying: they read as the defaults."""
    from megamlm.checkpoint.catalog import CONFIG
    from megamlm.checkpoint.integrity import describe_files

    save = tmp_path / "before"
    small("--global-batch-size", "4", "--train-iters", "4", "--save", save, "--exit-interval", "2")
    folder = save / "iter_0000002"
    record = json.loads((folder / CONFIG).read_text())
    for key in ("head_dim", "attention_bias", "attention_out_bias", "rope_scaling", "tie_word_embeddings"):
        del record["model_args"][key]
    (folder / CONFIG).write_text(json.dumps(record, indent=2, sort_keys=True))
    marker = json.loads((folder / MARKER).read_text())
    marker["files"].update(describe_files(folder, [CONFIG]))
    (folder / MARKER).write_text(json.dumps(marker))
    resumed = small("--global-batch-size", "4", "--train-iters", "4", "--save", save)
    assert resumed.start_step == 2 and sorted(resumed.losses) == [3, 4]


class InjectHugeGradient:
    """Wraps the trainer's step: at the chosen steps a finite gradient of 1e20 is added to one weight."""

    def __init__(self, monkeypatch, steps):
        self.real, self.steps, self.step = trainer.train_step, set(steps), None
        monkeypatch.setattr(trainer, "train_step", self)

    def __call__(self, setup, optimizer, micro_batches, lr, *args, **kwargs):
        self.step = micro_batches[0].sample_ids[0] // 4 + 1  # global batch 4: the step from its first sample
        handle = None
        if self.step in self.steps:
            handle = setup.pm.model.layers["0"].mlp.up_proj.weight.register_hook(lambda g: g + 1e20)
        try:
            return self.real(setup, optimizer, micro_batches, lr, *args, **kwargs)
        finally:
            if handle is not None:
                handle.remove()


def test_a_skip_streak_survives_a_resume(tmp_path, monkeypatch, small):
    common = ["--global-batch-size", "4", "--train-iters", "10", "--save", tmp_path / "run", "--max-skipped-steps",
              "3"]
    InjectHugeGradient(monkeypatch, steps=[3, 4, 5])
    first = small(*common, "--exit-interval", "4")
    assert first.skipped_steps == [3, 4] and first.total_skipped == 2
    assert all(first.grad_norms[s] == float("inf") for s in (3, 4))
    saved = json.loads((tmp_path / "run" / "iter_0000004" / TRAIN_STATE).read_text())
    assert [s["step"] for s in saved["state"]["guard"]["in_a_row"]] == [3, 4]
    with pytest.raises(NonFiniteError, match="3 steps in a row") as err:
        small(*common)  # the relaunch resumes at step 4: step 5 is the third of the streak, not the first
    assert "step 3:" in str(err.value) and "step 5:" in str(err.value)

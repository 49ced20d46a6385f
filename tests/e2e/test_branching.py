"""Runs of a study share prefixes: a checkpoint continues into any schedule whose history agrees up to its step.

Bitwise on CPU: a CLM run branched into CLM-then-MLM at its switch step is the straight CLM-then-MLM run, and a
checkpoint from the stable phase of a longer WSD run continues into a shorter budget. Histories that disagree
are refused in one line naming the first difference. --save-at pins branch points; --continue-from starts a
fresh optimizer and schedule on the parent's next samples.
"""

import json
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from megamlm.cli import main
from megamlm.config import parse_args, warmup_iters, wsd_decay_iters
from megamlm.hf.megamlm_checkpoint import write_weights_checkpoint
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer
from megamlm.training.lineage import Segment
from megamlm.training.optim import LRSchedule
from megamlm.training.resume import history_difference
from megamlm.training.run_record import RUN_RECORD

GBS = 4  # the TINY settings' global batch size (conftest.py)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def clm_parent(tmp_path_factory, tiny, module_one_thread):
    """A CLM run of 12 steps (warmup 2, WSD decay over steps 11-12) with branch points at steps 2 and 4, stopped
    after step 4: the shared prefix of the runs below, on one thread like them."""
    save = tmp_path_factory.mktemp("study") / "clm"
    result = tiny("--objective", "clm", "--train-iters", "12", "--save", save, "--save-at", "2,4",
                 "--exit-interval", "4")
    return save, result


def test_a_clm_run_branched_at_its_switch_step_reproduces_the_straight_clm_then_mlm_run_bitwise(tiny, clm_parent,
                                                                                                 tmp_path):
    save, parent = clm_parent
    schedule = ["--objective", "clm_then_mlm", "--switch-step", "4", "--train-iters", "8"]
    straight = tiny(*schedule)
    branch = tiny(*schedule, "--load", save / "iter_0000004", "--save", tmp_path / "branch")
    assert branch.start == "branch" and branch.start_step == 4 and sorted(branch.losses) == [5, 6, 7, 8]
    for step in range(1, 5):
        assert parent.losses[step] == straight.losses[step], step
    for step in range(5, 9):
        assert branch.losses[step] == straight.losses[step], step  # bitwise on CPU
        assert branch.sample_ids[step] == straight.sample_ids[step]
        assert branch.objectives[step] == straight.objectives[step] == "mlm"
        assert branch.lrs[step] == straight.lrs[step]
    record = json.loads((tmp_path / "branch" / RUN_RECORD).read_text())
    # Bitwise needs the same arithmetic: the parent ran on one thread too (a module fixture, built before one_thread).
    assert json.loads((save / RUN_RECORD).read_text())["arithmetic"] == record["arithmetic"]
    assert record["arithmetic"]["intra_op_threads"] == 1
    [event] = record["lineage"]
    assert event["kind"] == "branch" and event["step"] == 4 and event["consumed_samples"] == 4 * GBS
    assert not any("thread" in change for change in event["changes"])
    assert event["checkpoint"] == str(save / "iter_0000004") and event["parent_run"] == str(save)
    state = json.loads((tmp_path / "branch" / "iter_0000008" / "train_state.json").read_text())
    segments = state["state"]["history"]["segments"]
    assert [(s["first_step"], s["objective_schedule"]["objective"]) for s in segments] == [(1, "clm"),
                                                                                          (5, "clm_then_mlm")]


def test_a_checkpoint_from_the_stable_phase_continues_into_a_shorter_budget(tiny, clm_parent, tmp_path):
    save, _ = clm_parent  # 12 steps, decay from step 11; its checkpoint of step 4 is in the stable phase
    straight = tiny("--objective", "clm", "--train-iters", "6")  # decay over steps 5-6
    shorter = tiny("--objective", "clm", "--train-iters", "6", "--load", save / "iter_0000004")
    assert shorter.start == "branch" and sorted(shorter.losses) == [5, 6]
    assert [shorter.lrs[s] for s in (5, 6)] == [LRSchedule(3e-3, 0.0, "wsd", 2, 2, 6).lr_at(s) for s in (5, 6)]
    for step in (5, 6):
        assert shorter.losses[step] == straight.losses[step], step


def test_a_branch_on_another_thread_count_continues_and_its_lineage_says_it_may_differ_in_the_last_bits(
        tiny, clm_parent, tmp_path, capsys):
    save, _ = clm_parent
    torch.set_num_threads(2)  # one_thread restores it
    branch = tiny("--objective", "clm", "--train-iters", "6", "--load", save / "iter_0000004", "--save",
                  tmp_path / "threads")
    assert branch.start == "branch" and sorted(branch.losses) == [5, 6]
    note = ("the intra-op thread count (torch.get_num_threads(), OMP_NUM_THREADS) is 1 in the checkpoint and 2 "
            "here: the run continues exactly, but its numbers can differ in the last bits")
    [event] = json.loads((tmp_path / "threads" / RUN_RECORD).read_text())["lineage"]
    assert any(change.startswith(note) for change in event["changes"]), event["changes"]
    assert note in capsys.readouterr().out


def test_another_global_batch_size_is_honoured_and_the_lineage_says_so(tiny, clm_parent, tmp_path):
    save, _ = clm_parent
    branch = tiny("--objective", "clm", "--train-iters", "6", "--global-batch-size", "8", "--load",
                  save / "iter_0000004", "--save", tmp_path / "wider")
    assert branch.sample_ids[5] == list(range(16, 24))  # the stream continues at sample 4 x 4
    [event] = json.loads((tmp_path / "wider" / RUN_RECORD).read_text())["lineage"]
    assert any("--global-batch-size is 4 in the checkpoint and 8 here" in change for change in event["changes"])


REFUSED = [
    (["--objective", "clm_then_mlm", "--switch-step", "3", "--train-iters", "8"],
     "the checkpoint (step 4) is past this launch's switch step 3: step 4 trained clm in the checkpoint's history "
     "and trains mlm here"),
    (["--objective", "mlm_then_clm", "--switch-step", "4", "--train-iters", "8"],
     "step 1 trained clm in the checkpoint's history and trains mlm here (--objective is 'clm' in the checkpoint "
     "and 'mlm_then_clm' here"),
    (["--objective", "clm", "--train-iters", "8", "--lr", "1e-3"],
     "the learning rate of step 1 is 0.0015 in the checkpoint's history and 0.0005 here (--lr is 0.003 in the "
     "checkpoint and 0.001 here"),
    (["--objective", "clm", "--train-iters", "8", "--lr-warmup-iters", "3"],
     "the learning rate of step 1 is 0.0015 in the checkpoint's history and 0.001 here"),
    (["--objective", "clm", "--train-iters", "4", "--lr-decay-style", "cosine"], "the learning rate of step 3"),
    (["--objective", "clm", "--train-iters", "8", "--weight-decay", "0.0"],
     "--weight-decay is 0.1 in the checkpoint and 0.0 here"),
    (["--objective", "clm", "--train-iters", "8", "--seed", "99"], "--seed is 1234 in the checkpoint and 99 here"),
    (["--objective", "clm", "--train-iters", "3", "--lr-wsd-decay-iters", "1"],
     "it is at step 4, past --train-iters 3"),
]


@pytest.mark.parametrize("argv,message", REFUSED, ids=[" ".join(r[0][-2:]) for r in REFUSED])
def test_a_branch_whose_history_disagrees_is_refused_in_one_line(clm_parent, tmp_path, capsys, tiny_flags,
                                                                 tree_digest, argv, message):
    save, _ = clm_parent
    before = tree_digest(save)
    assert main([*tiny_flags, *argv, "--load", str(save / "iter_0000004"), "--save", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot resume") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert tree_digest(save) == before and not (tmp_path / "b").exists()


def test_a_branch_on_other_data_is_refused(clm_parent, tmp_path, capsys, tiny_flags, other_corpus):
    save, _ = clm_parent
    data_path, tokenizer = other_corpus
    argv = [*tiny_flags, "--objective", "clm", "--train-iters", "8", "--data-path", data_path, "--tokenizer-model",
            tokenizer, "--load", str(save / "iter_0000004")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "was trained on other data" in err and err.count("\n") == 1


def test_keep_last_keeps_the_save_at_checkpoints(clm_parent, tiny, tmp_path):
    save, _ = clm_parent
    assert sorted(p.name for p in save.glob("iter_*")) == ["iter_0000002", "iter_0000004"]
    tiny("--objective", "mlm", "--train-iters", "6", "--save", tmp_path / "run", "--save-interval", "1",
         "--keep-last", "1", "--save-at", "2,3")
    assert sorted(p.name for p in (tmp_path / "run").glob("iter_*")) == ["iter_0000002", "iter_0000003",
                                                                      "iter_0000006"]


def optimizer_steps(checkpoint) -> set[int]:
    """The AdamW step count of every parameter in a checkpoint."""
    out = checkpoint.parent / "flat.pt"
    dcp_to_torch_save(checkpoint, out)
    state = torch.load(out, weights_only=False)["optim"]["state"]
    return {int(s["step"]) for s in state.values()}


def test_continue_from_starts_on_the_parents_next_samples_with_a_fresh_optimizer_and_schedule(clm_parent, tiny,
                                                                                           tmp_path):
    save, _ = clm_parent
    cpt = tiny("--objective", "mlm", "--train-iters", "5", "--continue-from", save / "iter_0000004", "--save",
               tmp_path / "cpt")
    assert cpt.start == "continue" and cpt.start_step == 0 and sorted(cpt.losses) == [1, 2, 3, 4, 5]
    # The parent's step 5 would have trained samples 16-19 (its 4 steps consumed 4 x 4).
    assert cpt.sample_ids[1] == list(range(16, 20)) and cpt.sample_ids[2] == list(range(20, 24))
    fresh = LRSchedule(3e-3, 0.0, "wsd", 2, 2, 5)
    assert [cpt.lrs[s] for s in range(1, 6)] == [fresh.lr_at(s) for s in range(1, 6)]
    assert optimizer_steps(save / "iter_0000004") == {4}
    assert optimizer_steps(tmp_path / "cpt" / "iter_0000005") == {5}  # 5, not 4 + 5: a fresh optimizer
    state = json.loads((tmp_path / "cpt" / "iter_0000005" / "train_state.json").read_text())["state"]
    assert state["progress"] == {"step": 5, "consumed_samples": 9 * GBS}
    [event] = json.loads((tmp_path / "cpt" / RUN_RECORD).read_text())["lineage"]
    assert event["kind"] == "continue" and event["step"] == 4 and event["consumed_samples"] == 4 * GBS


@pytest.mark.parametrize("change,message", [
    (["--seed", "99"], "--seed is 1234 in the parent and 99 here"),
    (["--seq-length", "64"], "--seq-length is 32 in the parent and 64 here"),
    (["--split", "969,30,1"], "--split is None in the parent and '969,30,1' here"),
])
def test_continue_from_a_parent_of_another_stream_is_refused(clm_parent, tmp_path, capsys, tiny_flags, change,
                                                             message):
    save, _ = clm_parent
    argv = [*tiny_flags, "--objective", "mlm", "--train-iters", "5", "--continue-from", str(save / "iter_0000004"),
            "--save", str(tmp_path / "cpt"), *change]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --continue-from {save / 'iter_0000004'} continues its sample stream at sample "
                          "16, but") and message in err and "--init-from" in err, err
    assert err.count("\n") == 1 and not (tmp_path / "cpt").exists()


def test_continue_from_a_parent_on_other_data_is_refused(clm_parent, tmp_path, capsys, tiny_flags, other_corpus):
    save, _ = clm_parent
    data_path, tokenizer = other_corpus
    argv = [*tiny_flags, "--objective", "mlm", "--train-iters", "5", "--continue-from", str(save / "iter_0000004"),
            "--data-path", data_path, "--tokenizer-model", tokenizer]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the parent was trained on other data" in err and err.count("\n") == 1


def test_a_2000_step_continuation_with_default_warmup_and_decay_passes_validation():
    cfg = parse_args(["--objective", "mlm", "--continue-from", "ckpt/clm/iter_0042000", "--train-iters", "2000"])
    assert cfg.checkpoint.continue_from == "ckpt/clm/iter_0042000"
    assert (warmup_iters(cfg.training), wsd_decay_iters(cfg.training)) == (100, 100)
    # With the paper's config (absolute 2,000-step warmup and decay), fractions on the command line replace them.
    paper = Path(__file__).resolve().parents[2] / "examples" / "configs" / "paper_610m_clm_then_mlm.yaml"
    cfg = parse_args(["--config", str(paper), "--objective", "mlm", "--continue-from", "ckpt/clm/iter_0042000",
                      "--train-iters", "2000", "--save", "ckpt/cpt", "--lr-warmup-fraction", "0.05",
                      "--lr-wsd-decay-fraction", "0.1"])
    assert cfg.training.lr_warmup_iters is None and cfg.training.lr_wsd_decay_iters is None
    assert (warmup_iters(cfg.training), wsd_decay_iters(cfg.training)) == (100, 200)


def test_a_weights_only_checkpoint_is_neither_continued_nor_resumed_but_named_for_init_from(clm_parent, tmp_path,
                                                                                          capsys, tiny_flags):
    save, _ = clm_parent
    record = json.loads((save / "iter_0000004" / "config.json").read_text())
    model = Transformer(ModelArgs(**record["model_args"]))
    write_weights_checkpoint(tmp_path / "weights", model.state_dict(), record, {"consumed_samples": 0})
    for flag in ("--continue-from", "--load"):
        assert main([*tiny_flags, "--objective", "mlm", "--train-iters", "5", flag, str(tmp_path / "weights")]) == 2
        err = capsys.readouterr().err
        assert "holds weights only" in err and f"--init-from {tmp_path / 'weights' / 'iter_0000000'}" in err, err
        assert err.count("\n") == 1


def test_a_script_asks_whether_a_checkpoint_continues_into_a_config(clm_parent, tiny_flags):
    save, _ = clm_parent
    parent = parse_args([*tiny_flags, "--objective", "clm", "--train-iters", "12"])
    record = json.loads((save / "iter_0000004" / "config.json").read_text())
    assert Segment.of_config(parent) == Segment.of_record(record)  # what a planner computes is what a run records
    branch = parse_args([*tiny_flags, "--objective", "clm_then_mlm", "--switch-step", "4", "--train-iters", "8"])
    assert history_difference(save, branch) is None  # the folder's newest checkpoint: step 4
    late = parse_args([*tiny_flags, "--objective", "clm_then_mlm", "--switch-step", "3", "--train-iters", "8"])
    assert history_difference(save / "iter_0000004", late).startswith("the checkpoint (step 4) is past this launch's")
    assert history_difference(save / "iter_0000002", late) is None

"""Schedules of any number of phases: the CLM detour (mlm,clm,mlm) is one run whose every boundary is logged,
checkpointed (pinned), validated and recorded in the history; it equals, bitwise on CPU, the same schedule run as
three chained runs branching at the boundaries, and it resumes exactly across each boundary. MNTP trains in any
phase and is scored by validation where a run trains it."""

import json

import pytest

from megamlm.training.metrics_file import read_metrics
from megamlm.training.run_curves import load_run

pytestmark = pytest.mark.usefixtures("one_thread")

DETOUR = ["--objective", "mlm,clm,mlm", "--switch", "0.6,0.9", "--train-iters", "10"]
VALIDATION = ["--split", "969,30,1", "--eval-interval", "100", "--eval-iters", "1"]


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory, module_one_thread):  # the chained runs it is compared with take one thread
    save = tmp_path_factory.mktemp("detour") / "straight"
    return save, tiny(*DETOUR, "--save", save, "--keep-last", "1", *VALIDATION)  # keeps the pinned boundaries


def test_a_three_phase_run_checkpoints_validates_and_records_every_boundary(straight, capsys):
    save, run = straight
    assert [run.objectives[s] for s in range(1, 11)] == ["mlm"] * 6 + ["clm"] * 3 + ["mlm"]
    assert run.switch_step == 6 and run.switch_steps == (6, 9)
    assert sorted(p.name for p in save.glob("iter_*")) == ["iter_0000006", "iter_0000009", "iter_0000010"]
    assert [r["step"] for r in read_metrics(save, kind="validation")] == [6, 9, 10]
    record = json.loads((save / "run_record.json").read_text())
    assert record["schedule"]["objective_schedule"] == {"objective": "mlm,clm,mlm", "train_iters": 10,
                                                        "switch_step": [6, 9]}
    assert record["switch_steps"] == [6, 9]
    state = json.loads((save / "iter_0000009" / "train_state.json").read_text())
    assert state["state"]["objective_schedule"]["switch_step"] == [6, 9]
    assert load_run(save).switch_steps == (6, 9)  # the training-loss figure marks both switches


def test_the_model_card_names_every_phase(straight, tmp_path):
    from megamlm.hf.export import export_checkpoint

    save, _ = straight
    export_checkpoint(save, tmp_path / "hf", log=lambda *_: None)
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "- Objective schedule: MLM, then CLM, then MLM, switching after steps 6, 9 of 10" in card
    assert "- Switch steps: 6, 9" in card


def test_the_detour_equals_three_chained_runs_branching_at_its_boundaries_bitwise(straight, tiny, tmp_path):
    _, run = straight
    mlm = tiny("--objective", "mlm", "--train-iters", "10", "--save", tmp_path / "mlm", "--exit-interval", "6",
               *VALIDATION)
    clm = tiny("--objective", "mlm_then_clm", "--switch-step", "6", "--train-iters", "10", "--load",
               tmp_path / "mlm" / "iter_0000006", "--save", tmp_path / "clm", "--exit-interval", "9", *VALIDATION)
    decay = tiny("--objective", "mlm,clm,mlm", "--switch-step", "6,9", "--train-iters", "10", "--load",
                 tmp_path / "clm" / "iter_0000009", "--save", tmp_path / "decay", *VALIDATION)
    assert (clm.start, decay.start) == ("branch", "branch")
    chained = {**mlm.losses, **clm.losses, **decay.losses}
    assert sorted(chained) == list(range(1, 11))
    for step in range(1, 11):
        assert chained[step] == run.losses[step], step  # bitwise on CPU
    assert {**mlm.lrs, **clm.lrs, **decay.lrs} == run.lrs  # one LR schedule across the phases
    state = json.loads((tmp_path / "decay" / "iter_0000010" / "train_state.json").read_text())
    segments = state["state"]["history"]["segments"]
    assert [(s["first_step"], s["objective_schedule"]["objective"]) for s in segments] == [
        (1, "mlm"), (7, "mlm_then_clm"), (10, "mlm,clm,mlm")]


def test_the_detour_resumes_exactly_across_each_boundary(straight, tiny, tmp_path):
    _, run = straight
    save = tmp_path / "resumed"
    first = tiny(*DETOUR, *VALIDATION, "--save", save, "--exit-interval", "4")   # stops after step 4
    second = tiny(*DETOUR, *VALIDATION, "--save", save, "--exit-interval", "4")  # 5-8: across the switch after 6
    third = tiny(*DETOUR, *VALIDATION, "--save", save)                          # 9-10: across the switch after 9
    assert (second.start, third.start) == ("resume", "resume")
    resumed = {**first.losses, **second.losses, **third.losses}
    assert sorted(resumed) == list(range(1, 11))
    assert all(resumed[s] == run.losses[s] for s in range(1, 11))


def test_a_detour_launched_from_a_checkpoint_past_its_boundary_is_refused(tiny, tiny_flags, tmp_path, capsys):
    from megamlm.cli import main

    tiny("--objective", "mlm", "--train-iters", "10", "--save", tmp_path / "mlm", "--exit-interval", "7")
    assert main([*tiny_flags, *DETOUR, "--load", str(tmp_path / "mlm" / "iter_0000007")]) == 2
    err = capsys.readouterr().err
    assert "the checkpoint (step 7) is past this launch's switch step 6" in err and err.count("\n") == 1, err


def test_mntp_trains_in_a_phase_and_validation_scores_it(tiny, tmp_path, capsys):
    run = tiny("--objective", "mntp,mlm", "--switch-step", "3", "--train-iters", "5", "--save", tmp_path / "run",
               *VALIDATION)
    assert [run.objectives[s] for s in range(1, 6)] == ["mntp"] * 3 + ["mlm"] * 2
    records = read_metrics(tmp_path / "run", kind="validation")
    assert [r["step"] for r in records] == [3, 5]
    assert all(r["mntp_loss"] > 0 and 0 < r["mntp_tokens"] <= r["mlm_tokens"] for r in records)
    assert f"| mntp loss {records[0]['mntp_loss']:.4f} |" in capsys.readouterr().out
    plain = tiny("--objective", "mlm", "--train-iters", "4", "--save", tmp_path / "mlm", *VALIDATION)
    assert plain.losses and "mntp_loss" not in read_metrics(tmp_path / "mlm", kind="validation")[0]

"""Schedules of any number of phases (the CLM detour: mlm,clm,mlm) and MNTP targets."""

import numpy as np
import pytest

from megamlm.config import ConfigError, ObjectiveConfig, parse_args, switch_steps
from megamlm.objectives import IGNORE_INDEX, MaskingSpec, ObjectiveSchedule, mlm_mask, mntp_targets
from megamlm.objectives.schedule import objective_at_step, schedule_state

SPEC = MaskingSpec(0.4, 1.0, 0.0, 0.0, mask_id=3, special_ids=(0, 1, 2, 3), random_vocab_size=100)


def test_a_three_phase_schedule_trains_each_phase_between_its_switches():
    steps = switch_steps(ObjectiveConfig(objective="mlm,clm,mlm", switch=[0.6, 0.9]), 10)
    assert steps == (6, 9)
    schedule = ObjectiveSchedule("mlm,clm,mlm", steps, 10, SPEC, seed=0)
    assert [schedule.objective_at(s) for s in range(1, 11)] == ["mlm"] * 6 + ["clm"] * 3 + ["mlm"]
    assert [s for s in range(1, 11) if schedule.is_switch_step(s)] == [6, 9]
    assert schedule.switch_step == 6 and schedule.switch_steps == (6, 9)
    assert schedule.state_dict() == {"objective": "mlm,clm,mlm", "train_iters": 10, "switch_step": [6, 9]}
    assert schedule.describe() == ("objective mlm,clm,mlm: mlm for steps 1-6, clm for steps 7-9, mlm for steps 10-10 "
                                   "(switch steps 6, 9)")
    assert objective_at_step("mlm,clm,mlm", [6, 9], 7) == "clm"
    steps = switch_steps(ObjectiveConfig(objective="mntp,mlm,clm,mlm", switch_step=[2, 5, 8]), 10)
    assert [objective_at_step("mntp,mlm,clm,mlm", steps, s) for s in (1, 2, 3, 5, 6, 8, 9)] == [
        "mntp", "mntp", "mlm", "mlm", "clm", "clm", "mlm"]


def test_a_two_phase_sequence_is_stored_as_the_named_objective_so_both_spellings_resume_each_other():
    named = ObjectiveSchedule("clm_then_mlm", 25, 100, SPEC, seed=0)
    spelled = ObjectiveSchedule("clm,mlm", (25,), 100, SPEC, seed=0)
    assert named.state_dict() == spelled.state_dict() == {"objective": "clm_then_mlm", "train_iters": 100,
                                                          "switch_step": 25}
    assert schedule_state("mlm", 10, None) == {"objective": "mlm", "train_iters": 10, "switch_step": None}
    assert schedule_state("mntp,mlm", 10, 4) == {"objective": "mntp,mlm", "train_iters": 10, "switch_step": 4}
    assert named.describe() == spelled.describe()


def test_one_switch_and_a_default_switch_mean_what_they_meant():
    assert switch_steps(ObjectiveConfig(objective="clm_then_mlm"), 100) == (25,)
    assert switch_steps(ObjectiveConfig(objective="clm_then_mlm", switch=0.3), 100) == (30,)
    assert switch_steps(ObjectiveConfig(objective="mlm_then_clm", switch_step=7), 100) == (7,)
    assert switch_steps(ObjectiveConfig(objective="mlm"), 100) == ()
    cfg = parse_args(["--objective", "clm_then_mlm", "--switch", "0.3", "--train-iters", "100"])
    assert cfg.objective.switch == 0.3  # one value stays a number (records and configs keep their form)
    cfg = parse_args(["--objective", "mlm,clm,mlm", "--switch", "0.6,0.9", "--train-iters", "100"])
    assert cfg.objective.switch == [0.6, 0.9]
    cfg = parse_args(["--objective", "mlm,clm,mlm", "--switch-step", "60", "90", "--train-iters", "100"])
    assert cfg.objective.switch_step == [60, 90]


def test_a_yaml_file_gives_the_switches_as_a_list(tmp_path):
    path = tmp_path / "detour.yaml"
    path.write_text("objective:\n  objective: mlm,clm,mlm\n  switch_step: [6, 9]\ntraining:\n  train_iters: 10\n")
    cfg = parse_args(["--config", str(path)])
    assert switch_steps(cfg.objective, 10) == (6, 9)
    path.write_text("objective:\n  objective: mlm,clm,mlm\n  switch: [0.6, 0.9]\ntraining:\n  train_iters: 10\n")
    assert switch_steps(parse_args(["--config", str(path)]).objective, 10) == (6, 9)


@pytest.mark.parametrize("argv,message", [
    (["--objective", "mlm,clm,mlm", "--switch", "0.9,0.6"], "--switch 0.9,0.6 is not strictly increasing"),
    (["--objective", "mlm,clm,mlm", "--switch-step", "9,6", "--train-iters", "10"],
     "--switch-step 9,6 is not strictly increasing"),
    (["--objective", "mlm,clm,mlm", "--switch-step", "6,6", "--train-iters", "10"],
     "--switch-step 6,6 is not strictly increasing"),
    (["--objective", "mlm,clm,mlm", "--switch", "0.5,0.52", "--train-iters", "10"],
     "--switch 0.5,0.52 with --train-iters 10 puts two switches at steps 5,5, leaving a stage empty"),
    (["--objective", "mlm,clm,mlm", "--switch-step", "6,10", "--train-iters", "10"],
     "--switch-step 6,10 with --train-iters 10 puts a switch at step 10, leaving one stage empty"),
    (["--objective", "mlm,clm,mlm", "--switch-step", "0,6", "--train-iters", "10"],
     "puts a switch at step 0, leaving one stage empty"),
    (["--objective", "mlm,clm,mlm", "--switch", "0.6,1.2"], "--switch must be a fraction strictly between 0 and 1"),
    (["--objective", "mlm,clm,mlm", "--switch", "0.6"],
     "--objective mlm,clm,mlm has 3 stages, so 2 switches, but --switch gives 1; give one per boundary"),
    (["--objective", "mlm,clm,mlm"], "--objective mlm,clm,mlm has 3 stages, so 2 switches, but --switch gives 0"),
    (["--objective", "clm_then_mlm", "--switch", "0.3,0.6"],
     "--objective clm_then_mlm has 2 stages, so 1 switch, but --switch gives 2"),
    (["--objective", "mlm,mlm,clm", "--switch", "0.3,0.6"],
     "--objective mlm,mlm,clm trains mlm in stages 1 and 2 next to each other; make them one stage"),
    (["--objective", "mlm,bert"], "argument --objective: invalid choice: 'mlm,bert'"),
    (["--objective", "mntp", "--switch", "0.3"], "--switch places the objective switch, but --objective mntp has one"),
    (["--switch", "0.3,x"], "--switch takes numbers (e.g. 0.6,0.9), got 0.3,x"),
])
def test_bad_phase_schedules_are_refused_in_one_line(argv, message):
    with pytest.raises(ConfigError) as err:
        parse_args(argv)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_an_unknown_phase_in_a_yaml_file_is_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("objective:\n  objective: mlm,bert\n")
    with pytest.raises(ConfigError, match="unknown --objective 'mlm,bert'; choose one of mlm, clm, clm_then_mlm"):
        parse_args(["--config", str(path)])


def test_mntp_scores_each_masked_token_from_the_position_before_it():
    tokens = np.arange(10, 74)
    for sample in range(20):
        inputs, targets = mntp_targets(tokens, sample, 7, SPEC)
        mlm_inputs, mlm_targets = mlm_mask(tokens, sample, 7, SPEC)
        selected = mlm_targets != IGNORE_INDEX
        selected[0] = False  # no predecessor: never a target
        assert (targets[:-1] == np.where(selected[1:], tokens[1:], IGNORE_INDEX)).all()
        assert targets[-1] == IGNORE_INDEX
        assert (inputs[1:] == mlm_inputs[1:]).all() and inputs[0] == tokens[0]  # the MLM mask, the first shown


def test_mntp_never_scores_a_token_from_another_documents_position():
    tokens = np.arange(10, 74)
    documents = np.repeat([0, 1, 2, 3], 16)
    spec = MaskingSpec(0.99, 1.0, 0.0, 0.0, mask_id=3, special_ids=(0, 1, 2, 3), random_vocab_size=100)
    inputs, targets = mntp_targets(tokens, 0, 0, spec, documents)
    starts = [16, 32, 48]
    assert all(targets[s - 1] == IGNORE_INDEX and inputs[s] == tokens[s] for s in starts)
    assert (targets != IGNORE_INDEX).sum() > 40


def test_an_mntp_batch_is_bidirectional():
    schedule = ObjectiveSchedule("mntp,mlm", 2, 4, SPEC, seed=0)
    tokens = np.arange(10, 42).reshape(2, 16)
    mntp = schedule.make_batch(1, tokens, [0, 1])
    assert not mntp.causal and schedule.objective_at(3) == "mlm"
    rows, cols = np.nonzero(mntp.targets.numpy() != IGNORE_INDEX)
    assert (mntp.input_ids[rows, cols + 1] == 3).all()  # the masked token follows each scored position

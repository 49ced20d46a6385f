"""Histories compared step by step, at the paper's scale: which checkpoints of a study continue into which runs."""

import pytest

from megamlm.training.lineage import History, Segment

OPTIMIZER = {"weight_decay": 0.1, "adam_beta1": 0.9, "adam_beta2": 0.95, "adam_eps": 1e-5, "clip_grad": 1.0}


def run(objective: str, train_iters: int, switch_step: int | None = None, warmup: int = 2000, decay: int = 2000,
        lr: float = 5e-4, style: str = "wsd", batch: int = 1152, **optimizer) -> Segment:
    return Segment(1, {"objective": objective, "train_iters": train_iters, "switch_step": switch_step},
                   {"peak_lr": lr, "min_lr": 0.0, "style": style, "warmup_iters": warmup, "decay_iters": decay,
                    "train_iters": train_iters}, {**OPTIMIZER, **optimizer}, batch)


CLM_42K = History([run("clm", 42_000)])


@pytest.mark.parametrize("budget,switch", [(12_000, 10_000), (22_000, 20_000), (42_000, 10_000), (42_000, 40_000)])
def test_the_42k_clm_run_is_the_prefix_of_every_clm_then_mlm_budget_that_switches_before_its_decay(budget, switch):
    assert CLM_42K.first_difference(run("clm_then_mlm", budget, switch), upto=switch) is None


def test_a_switch_inside_the_budgets_decay_is_no_branch_point_of_a_longer_run():
    """A 22k-step run decays over steps 20,001-22,000: its history differs from the 42k run's from step 20,001."""
    message = CLM_42K.first_difference(run("clm_then_mlm", 22_000, 21_000), upto=21_000)
    assert message.startswith("the learning rate of step 20001 is 0.0005 in the checkpoint's history")


def test_a_checkpoint_past_the_switch_is_refused_naming_both_steps():
    message = CLM_42K.first_difference(run("clm_then_mlm", 42_000, 10_000), upto=11_000)
    assert message.startswith("the checkpoint (step 11000) is past this launch's switch step 10000: step 10001 "
                              "trained clm in the checkpoint's history and trains mlm here")


def test_a_shorter_budget_shares_the_prefix_only_until_its_own_decay_starts():
    assert CLM_42K.first_difference(run("clm", 12_000), upto=10_000) is None
    message = CLM_42K.first_difference(run("clm", 12_000), upto=10_001)
    assert message.startswith("the learning rate of step 10001 is 0.0005 in the checkpoint's history and "
                              "0.00049975 here (--train-iters is 42000 in the checkpoint and 12000 here)")


@pytest.mark.parametrize("launch,message", [
    (run("mlm", 42_000), "step 1 trained clm in the checkpoint's history and trains mlm here (--objective is 'clm'"),
    (run("clm", 42_000, warmup=1000), "the learning rate of step 1 is 2.5e-07 in the checkpoint's history and 5e-07"),
    (run("clm", 42_000, style="cosine"), "the learning rate of step 2001"),
    (run("clm", 42_000, adam_beta2=0.98), "--adam-beta2 is 0.95 in the checkpoint and 0.98 here"),
])
def test_each_disagreement_names_its_first_step_and_the_settings(launch, message):
    assert message in CLM_42K.first_difference(launch, upto=5000)


def test_the_batch_size_is_no_part_of_the_comparison_but_a_segment_records_it():
    wider = run("clm", 42_000, batch=2304)
    assert CLM_42K.first_difference(wider, upto=5000) is None
    continued = CLM_42K.continued_at(5000, wider)
    assert [(s.first_step, s.global_batch_size) for s in continued.segments] == [(1, 1152), (5001, 2304)]


def test_a_continued_history_answers_for_each_step_with_the_settings_it_was_trained_with():
    branched = CLM_42K.continued_at(10_000, run("clm_then_mlm", 12_000, 10_000))
    assert [s.first_step for s in branched.segments] == [1, 10_001]
    assert branched.segment_at(10_000).objective_at(10_000) == "clm"
    assert branched.segment_at(10_001).objective_at(10_001) == "mlm"
    # Its checkpoint at 11k continues into the same schedule, and a resume with it adds no segment.
    same = run("clm_then_mlm", 12_000, 10_000)
    assert branched.first_difference(same, upto=11_000) is None
    assert branched.continued_at(11_000, same).segments == branched.segments
    # An overridden history keeps what was trained: the old LR before the override, the new one after.
    overridden = CLM_42K.continued_at(3000, run("clm", 42_000, lr=1e-3))
    assert overridden.first_difference(run("clm", 42_000, lr=1e-3), upto=4000).startswith(
        "the learning rate of step 1 is")
    assert overridden.first_difference(run("clm", 42_000), upto=4000).startswith("the learning rate of step 3001")


def test_state_dict_round_trips_and_a_checkpoint_without_a_history_has_one_segment():
    branched = CLM_42K.continued_at(10_000, run("clm_then_mlm", 12_000, 10_000))
    restored = History()
    restored.load_state_dict(branched.state_dict())
    assert restored == branched
    segment = CLM_42K.segments[0]
    old = {"state": {"objective_schedule": segment.objective_schedule, "lr_schedule": segment.lr_schedule}}
    record = {"config": {"training": {**OPTIMIZER, "global_batch_size": 1152}}}
    assert History.of_checkpoint(old, record) == CLM_42K

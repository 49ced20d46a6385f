import numpy as np
import pytest

from megamlm.config import ObjectiveConfig, switch_step
from megamlm.objectives import MaskingSpec, ObjectiveSchedule

SPEC = MaskingSpec(0.4, 1.0, 0.0, 0.0, mask_id=3, special_ids=(0, 1, 2, 3), random_vocab_size=100)


@pytest.mark.parametrize("iters,switch", [(100, 0.25), (42_000, 10_000 / 42_000), (7, 0.3), (10, 0.55)])
def test_clm_then_mlm_switches_exactly_at_round_switch_times_iters(iters, switch):
    step = switch_step(ObjectiveConfig(objective="clm_then_mlm", switch=switch), iters)
    schedule = ObjectiveSchedule("clm_then_mlm", step, iters, SPEC, seed=0)
    expected = round(switch * iters)
    assert schedule.switch_step == expected
    objectives = [schedule.objective_at(s) for s in range(1, iters + 1)]
    assert objectives == ["clm"] * expected + ["mlm"] * (iters - expected)
    assert [s for s in range(1, iters + 1) if schedule.is_switch_step(s)] == [expected]


def test_mlm_then_clm_and_single_objectives():
    schedule = ObjectiveSchedule("mlm_then_clm", 5, 10, SPEC, seed=0)
    assert [schedule.objective_at(s) for s in (1, 5, 6, 10)] == ["mlm", "mlm", "clm", "clm"]
    for name in ("mlm", "clm"):
        assert switch_step(ObjectiveConfig(objective=name, switch=0.25), 10) is None
        single = ObjectiveSchedule(name, None, 10, SPEC, seed=0)
        assert single.switch_step is None
        assert {single.objective_at(s) for s in range(1, 11)} == {name}


def test_batches_carry_attention_mode_and_targets_of_the_phase():
    schedule = ObjectiveSchedule("clm_then_mlm", 2, 4, SPEC, seed=0)
    tokens = np.arange(10, 42).reshape(2, 16)
    clm = schedule.make_batch(1, tokens, [0, 1])
    mlm = schedule.make_batch(3, tokens, [0, 1])
    assert clm.causal and not mlm.causal
    assert (clm.targets[:, :-1] == clm.input_ids[:, 1:]).all()
    assert (mlm.input_ids[mlm.targets != -100] == 3).all()


def test_loading_another_schedule_is_refused():
    schedule = ObjectiveSchedule("clm_then_mlm", 25, 100, SPEC, seed=0)
    other = ObjectiveSchedule("clm_then_mlm", 50, 100, SPEC, seed=0)
    with pytest.raises(ValueError, match="--override-schedule"):
        other.load_state_dict(schedule.state_dict())

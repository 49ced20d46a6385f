"""A study over a recipe's phases, trained as planned (issue 44, item 7): the arm whose decay masks less branches
from the stable run's checkpoint at the decay's first step, and that branch is bitwise the arm's straight run."""

import pytest
import yaml

from megamlm.study.planning.load import load_study
from megamlm.study.planning.plan import build_plan
from megamlm.study.running.commands import write_config_file

pytestmark = pytest.mark.usefixtures("one_thread")

TRUNK = {"training": {"lr_decay_style": "wsd"}, "validation": {"eval_iters": 1, "eval_interval": 100},
         "data": {"split": "969,30,1"},
         "phases": [{"steps": 4, "mask_ratio": 0.3}, {"lr_decay": True}]}
STUDY = {"name": "wsd", "sizes": ["tiny"], "seeds": [1], "root": "runs", "pretrain": {"config": "trunk.yaml"},
         "phase_arms": [{"budgets": [6], "arms": [{"label": "decay-m30"},
                                                  {"label": "decay-m15", "phases": [{}, {"mask_ratio": 0.15}]}]}]}


def test_the_planned_branch_equals_the_arms_straight_run_bitwise(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trunk.yaml").write_text(yaml.safe_dump(TRUNK))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(STUDY))
    plan = build_plan(load_study(tmp_path / "study.yaml"))
    trunk, branch = plan.runs
    assert (branch.label, branch.parent, branch.branch_step) == ("decay-m15", trunk.name, 4)
    for run in plan.runs:
        write_config_file(plan, run)
    # As the plan launches them (the tests' small shape first: the plan's flags override nothing of it).
    stable = tiny(*plan.flags(trunk))
    branched = tiny(*plan.flags(branch))
    assert sorted(branched.losses) == [5, 6]
    straight = tiny("--config", plan.config_file(branch), "--save", tmp_path / "straight")
    assert sorted(straight.losses) == list(range(1, 7))
    assert branched.losses == {step: straight.losses[step] for step in (5, 6)}
    assert branched.losses[5] != stable.losses[5]  # the decay masks 15%, not the stable run's 30%

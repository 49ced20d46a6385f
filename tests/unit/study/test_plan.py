"""The plan of a small grid: every arm once, each branching from the run it shares the longest prefix with, at the
step where their histories part; the pinned checkpoints; the flags pretrain.py gets."""

import pytest

from megamlm.config import parse_args
from megamlm.study.planning.plan import build_plan
from megamlm.study.planning.prefixes import shared_steps, step_settings
from megamlm.study.planning.schema import StudyError
from megamlm.training.lineage import History, Segment

EXPECTED = {  # run: (parent, branch step)
    "tiny-clm100-m40": (None, 0),
    "tiny-mlm100-m40": (None, 0),
    "tiny-clm50-mlm50-m40": ("tiny-clm100-m40", 50),
    "tiny-clm25-mlm75-m40": ("tiny-clm100-m40", 25),
    "tiny-clm60-m40": ("tiny-clm100-m40", 40),  # the end of the 60-step run's stable phase (20 decay steps)
    "tiny-mlm60-m40": ("tiny-mlm100-m40", 40),
    "tiny-clm30-mlm30-m40": ("tiny-clm100-m40", 30),
    "tiny-clm15-mlm45-m40": ("tiny-clm100-m40", 15),
    "tiny-clm100-m40-cpt-mlm40": ("tiny-clm100-m40", 0),
}


def test_small_grid_runs_parents_and_branch_steps(small_plan):
    plan = small_plan()
    assert {r.name: (r.parent, r.branch_step) for r in plan.runs} == EXPECTED
    assert [r.name for r in plan.runs] == list(EXPECTED)  # parents before children
    clm = plan.run("tiny-clm100-m40")
    assert clm.save_at == [15, 25, 30, 40, 50]
    assert plan.run("tiny-mlm100-m40").save_at == [40]
    assert sorted(clm.children) == sorted(n for n, (p, _) in EXPECTED.items() if p == clm.name)
    cpt = plan.run("tiny-clm100-m40-cpt-mlm40")
    assert cpt.continues == clm.name and cpt.steps_trained == 40
    assert plan.descendants("tiny-mlm100-m40") == ["tiny-mlm60-m40"]


def test_flags_load_the_branch_checkpoint_and_continue_the_parent(small_plan):
    plan = small_plan()
    flags = plan.flags(plan.run("tiny-clm30-mlm30-m40"))
    assert flags[flags.index("--load") + 1] == f"{plan.root}/tiny-clm100-m40/iter_0000030"
    config = parse_args(flags)
    assert (config.objective.objective, config.objective.switch_step, config.training.train_iters) == \
        ("clm_then_mlm", 30, 60)
    cpt = parse_args(plan.flags(plan.run("tiny-clm100-m40-cpt-mlm40")))
    assert cpt.checkpoint.continue_from == f"{plan.root}/tiny-clm100-m40"
    assert cpt.training.lr_warmup_fraction == 0.1 and cpt.training.train_iters == 40
    parent = parse_args(plan.flags(plan.run("tiny-clm100-m40")))
    assert parent.checkpoint.save_at == [15, 25, 30, 40, 50]


def test_every_branch_is_one_the_trainer_accepts(small_plan):
    """The trainer's own lineage check agrees with every planned branch, and refuses one step later."""
    plan = small_plan()
    for run in plan.runs:
        if not run.branch_step:
            continue
        parent = Segment.of_config(plan.run(run.parent).config)
        child = Segment.of_config(run.config)
        assert History([parent]).first_difference(child, run.branch_step) is None
        if run.branch_step < run.train_iters - 1:
            assert History([parent]).first_difference(child, run.branch_step + 1) is not None, run.name


def test_shared_steps_stop_at_the_first_lr_or_objective_difference():
    a = step_settings(parse_args(["--objective", "clm", "--train-iters", "100", "--lr-warmup-iters", "10",
                                  "--lr-wsd-decay-iters", "20"]))
    b = step_settings(parse_args(["--objective", "clm", "--train-iters", "60", "--lr-warmup-iters", "10",
                                  "--lr-wsd-decay-iters", "20"]))
    c = step_settings(parse_args(["--objective", "clm_then_mlm", "--switch-step", "30", "--train-iters", "100",
                                  "--lr-warmup-iters", "10", "--lr-wsd-decay-iters", "20"]))
    assert shared_steps(a, b) == 40
    assert shared_steps(a, c) == 30
    assert shared_steps(a, a) == 100


def test_different_streams_never_branch(small_plan):
    """Two seeds or two mask ratios: separate trees (their samples or masks differ)."""
    plan = small_plan({"seeds": [1, 2], "continued_pretraining": []})
    for run in plan.runs:
        if run.parent:
            assert plan.run(run.parent).seed == run.seed
    assert sum(r.parent is None for r in plan.runs) == 4
    assert {r.name for r in plan.runs if r.parent is None} == {"tiny-clm100-m40-s1", "tiny-mlm100-m40-s1",
                                                              "tiny-clm100-m40-s2", "tiny-mlm100-m40-s2"}


def test_a_different_warmup_in_a_grid_is_a_separate_tree(small_plan):
    plan = small_plan({"continued_pretraining": [], "grids": [{"budgets": [100], "clm_fractions": [0, 1]}]})
    assert all(r.parent is None for r in plan.runs)


def test_switch_steps_instead_of_fractions(small_plan):
    plan = small_plan({"continued_pretraining": [], "grids": [{"budgets": [100], "switch_steps": [0, 20, 100]}]})
    assert {r.name: (r.parent, r.branch_step) for r in plan.runs} == {
        "tiny-clm100-m40": (None, 0), "tiny-mlm100-m40": (None, 0), "tiny-clm20-mlm80-m40": ("tiny-clm100-m40", 20)}


def test_grids_are_a_union_an_arm_in_two_grids_is_one_run(small_plan):
    plan = small_plan({"continued_pretraining": [], "grids": [{"budgets": [100], "clm_fractions": [0, 1]},
                                                              {"budgets": [100], "clm_fractions": [0, 0.5]}]})
    assert sorted(r.name for r in plan.runs) == ["tiny-clm100-m40", "tiny-clm50-mlm50-m40", "tiny-mlm100-m40"]


def test_a_grid_of_its_own_seeds_trains_its_arms_at_those_seeds_only(small_plan):
    """More seeds for the arms a claim compares alone, fewer for the arms it pools: each split branches from the
    CLM run of its own seed, a continuation exists at every seed of its parent, and only there."""
    plan = small_plan({"seeds": [1, 2, 3], "grids": [{"budgets": [100], "clm_fractions": [0, 1]},
                                                     {"budgets": [100], "clm_fractions": [0.5], "seeds": [1, 2]}]})
    names = {r.name: (r.parent, r.branch_step) for r in plan.runs}
    for seed in (1, 2, 3):
        assert names[f"tiny-mlm100-m40-s{seed}"] == (None, 0) and names[f"tiny-clm100-m40-s{seed}"] == (None, 0)
        assert names[f"tiny-clm100-m40-cpt-mlm40-s{seed}"] == (f"tiny-clm100-m40-s{seed}", 0)
    for seed in (1, 2):
        assert names[f"tiny-clm50-mlm50-m40-s{seed}"] == (f"tiny-clm100-m40-s{seed}", 50)
    assert "tiny-clm50-mlm50-m40-s3" not in names and len(names) == 11
    assert plan.run("tiny-clm50-mlm50-m40-s2").config.training.seed == 2


def test_one_seed_in_the_study_and_two_in_a_grid_names_every_run_by_its_seed(small_plan):
    plan = small_plan({"seeds": [1], "continued_pretraining": [],
                       "grids": [{"budgets": [100], "clm_fractions": [0]},
                                 {"budgets": [100], "clm_fractions": [1], "seeds": [1, 2]}]})
    assert sorted(r.name for r in plan.runs) == ["tiny-clm100-m40-s1", "tiny-clm100-m40-s2", "tiny-mlm100-m40-s1"]


def test_a_grid_seed_given_twice_is_refused(small_plan):
    with pytest.raises(StudyError, match=r"grids\[0\]\.seeds"):
        small_plan({"grids": [{"budgets": [100], "clm_fractions": [0], "seeds": [1, 1]}]})


def test_a_run_pretrain_would_refuse_is_named(small_plan):
    with pytest.raises(StudyError, match="run tiny-.*global-batch-size"):
        small_plan({"pretrain": {"training": {"micro_batch_size": 3, "global_batch_size": 8}}})


def test_scale_keeps_the_shape_of_the_plan(small_study, tmp_path):
    from megamlm.study.planning.scaling import scale_steps

    study = scale_steps(small_study(), 0.5)
    plan = build_plan(study, str(tmp_path / "r"))
    assert {r.name for r in plan.runs} >= {"tiny-clm50-m40", "tiny-clm25-mlm25-m40", "tiny-clm50-m40-cpt-mlm20"}
    assert plan.run("tiny-clm25-mlm25-m40").branch_step == 25
    assert plan.run("tiny-clm50-m40").config.training.lr_warmup_iters == 5


def test_the_table_marks_the_papers_runs_and_the_extension(small_plan):
    from megamlm.study.planning.cost import Throughput
    from megamlm.study.planning.table import plan_table

    plan = small_plan({"grids": [{"budgets": [100], "clm_fractions": [0, 1], "reproduces_paper": True},
                                 {"budgets": [100, 60], "clm_fractions": [0, 0.5, 1]}]})
    marked = {r.name for r in plan.runs if r.reproduces_paper}
    assert marked == {"tiny-clm100-m40", "tiny-mlm100-m40"}  # an arm in a marked and an unmarked grid is the paper's
    table = plan_table(plan, Throughput())
    assert "2 of the 7 runs reproduce models the paper trained (arXiv 2507.00994; `yes`); 5 extend it" in table
    assert "| run | paper's model? | starts from |" in table
    assert "| tiny-clm100-m40 | yes | scratch |" in table
    assert "| tiny-clm50-mlm50-m40 | extension | tiny-clm100-m40 @ 50 |" in table
    assert "| tiny-clm100-m40-cpt-mlm40 | extension |" in table  # the continuation is not marked
    cpt = small_plan({"continued_pretraining": [{"parents": ["clm100-m40"], "steps": [40], "reproduces_paper": True}]})
    assert [r.name for r in cpt.runs if r.reproduces_paper] == ["tiny-clm100-m40-cpt-mlm40"]
    unmarked = plan_table(small_plan(), Throughput())
    assert "paper's model?" not in unmarked and "reproduce" not in unmarked  # a study that says nothing: no column

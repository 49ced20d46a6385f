"""Arms of any phase sequence (a study's ``schedules``): each shares its longest common prefix with the other arms of
its stream (a CLM detour with the MLM run, MNTP-then-MLM with the MNTP run), only where the prefix's learning rates
are the same; the parent pins the branch step; the table shows the phases; bad schedules are one line each."""

import pytest
from helpers import expect_one_line, tool_main
from small_study import SMALL, write_study

from megamlm.config import parse_args
from megamlm.study.evidence.claims import _arm_pairs
from megamlm.study.planning.arms import arms
from megamlm.study.planning.claims_table import load_claims
from megamlm.study.planning.cost import Throughput, run_cost
from megamlm.study.planning.load import load_study
from megamlm.study.planning.plan import build_plan
from megamlm.study.planning.schema import StudyError
from megamlm.study.planning.table import plan_table
from megamlm.study.running.commands import REPO
from megamlm.training.lineage import History, Segment

DETOUR = {"phases": ["mlm", "clm", "mlm"], "budgets": [100], "switches": [0.6, 0.9]}
MNTP = {"phases": ["mntp"], "budgets": [100]}
MNTP_MLM = {"phases": ["mntp", "mlm"], "budgets": [100], "switch_steps": [50]}
SCHEDULES = {"continued_pretraining": [], "schedules": [DETOUR, MNTP, MNTP_MLM]}


def test_a_detour_branches_from_the_mlm_run_and_mntp_then_mlm_from_the_mntp_run(small_plan):
    plan = small_plan(SCHEDULES)
    detour, mlm = plan.run("tiny-mlm60-clm30-mlm10-m40"), plan.run("tiny-mlm100-m40")
    assert (detour.parent, detour.branch_step) == ("tiny-mlm100-m40", 60)  # 0.6 x 100: its MLM prefix
    assert detour.switch_steps == (60, 90) and detour.steps_trained == 40
    assert mlm.save_at == [40, 60]  # the 60-step MLM arm's branch point, and the detour's
    mntp, mntp_mlm = plan.run("tiny-mntp100-m40"), plan.run("tiny-mntp50-mlm50-m40")
    assert (mntp.parent, mntp.branch_step, mntp.save_at) == (None, 0, [50])
    assert (mntp_mlm.parent, mntp_mlm.branch_step) == ("tiny-mntp100-m40", 50)
    # The grid's arms are planned as before.
    assert (plan.run("tiny-clm25-mlm75-m40").parent, plan.run("tiny-clm25-mlm75-m40").branch_step) == \
        ("tiny-clm100-m40", 25)
    assert plan.run("tiny-clm100-m40").save_at == [15, 25, 30, 40, 50]


def test_every_schedule_branch_is_one_the_trainer_accepts(small_plan):
    """The trainer's lineage check agrees with each planned branch, and refuses it one step later."""
    plan = small_plan(SCHEDULES)
    branched = 0
    for run in plan.runs:
        if run.branch_step:
            parent, child = Segment.of_config(plan.run(run.parent).config), Segment.of_config(run.config)
            assert History([parent]).first_difference(child, run.branch_step) is None, run.name
            assert History([parent]).first_difference(child, run.branch_step + 1) is not None, run.name
            branched += 1
    assert branched == 8  # 6 of the grid, the detour and MNTP-then-MLM


def test_flags_give_pretrain_the_phases_switches_and_the_branch_checkpoint(small_plan):
    plan = small_plan(SCHEDULES)
    flags = plan.flags(plan.run("tiny-mlm60-clm30-mlm10-m40"))
    assert flags[flags.index("--load") + 1] == f"{plan.root}/tiny-mlm100-m40/iter_0000060"
    config = parse_args(flags)
    assert (config.objective.objective, config.objective.switch_step, config.training.train_iters) == \
        ("mlm,clm,mlm", [60, 90], 100)
    mntp = parse_args(plan.flags(plan.run("tiny-mntp100-m40")))
    assert (mntp.objective.objective, mntp.objective.switch_step, mntp.checkpoint.save_at) == ("mntp", None, [50])
    assert parse_args(plan.flags(plan.run("tiny-mlm100-m40"))).checkpoint.save_at == [40, 60]


def test_a_prefix_is_shared_only_where_its_learning_rates_are_the_same(small_plan):
    """With the warmup a fraction of the budget, a 60-step detour's first steps see other learning rates than the
    100-step MLM run's: it branches from the 60-step MLM run (same budget), never from the longer one."""
    detour = {**DETOUR, "budgets": [100, 60], "switches": [0.5, 0.8]}
    plan = small_plan({"continued_pretraining": [], "schedules": [detour],
                       "pretrain": {**SMALL["pretrain"], "training": {
                           **{k: v for k, v in SMALL["pretrain"]["training"].items() if k != "lr_warmup_iters"},
                           "lr_warmup_fraction": 0.1}}})
    assert (plan.run("tiny-mlm60-m40").parent, plan.run("tiny-mlm100-m40").parent) == (None, None)
    assert (plan.run("tiny-mlm30-clm18-mlm12-m40").parent, plan.run("tiny-mlm30-clm18-mlm12-m40").branch_step) == \
        ("tiny-mlm60-m40", 30)
    assert (plan.run("tiny-mlm50-clm30-mlm20-m40").parent, plan.run("tiny-mlm50-clm30-mlm20-m40").branch_step) == \
        ("tiny-mlm100-m40", 50)


def test_two_detours_share_their_mlm_and_clm_steps(small_plan):
    """A detour that returns to MLM earlier branches from the other detour at its own second switch."""
    plan = small_plan({"continued_pretraining": [], "grids": [{"budgets": [100], "clm_fractions": [0]}],
                       "schedules": [{**DETOUR, "switch_steps": [60, 80], "switches": []}, DETOUR]})
    early, late = plan.run("tiny-mlm60-clm20-mlm20-m40"), plan.run("tiny-mlm60-clm30-mlm10-m40")
    assert (late.parent, late.branch_step) == ("tiny-mlm100-m40", 60)
    assert (early.parent, early.branch_step) == (late.name, 80)
    assert late.save_at == [80]


def test_the_table_shows_each_runs_phases_and_where_it_branches(small_plan):
    table = plan_table(small_plan(SCHEDULES), Throughput())
    assert ("| tiny-mlm60-clm30-mlm10-m40 | tiny-mlm100-m40 @ 60 | mlm 1-60 -> clm 61-90 -> mlm 91-100 | "
            "61-100 (40) |") in table
    assert "| tiny-mntp50-mlm50-m40 | tiny-mntp100-m40 @ 50 | mntp 1-50 -> mlm 51-100 | 51-100 (50) |" in table
    assert "| tiny-mntp100-m40 | scratch | mntp 1-100 | 1-100 (100) |" in table
    assert "| tiny-clm25-mlm75-m40 | tiny-clm100-m40 @ 25 | clm 1-25 -> mlm 26-100 | 26-100 (75) |" in table


def test_costs_count_each_phase_at_its_objective(small_plan):
    plan = small_plan(SCHEDULES)
    detour = plan.run("tiny-mlm60-clm30-mlm10-m40")
    assert detour.objective_steps() == {"clm": 30, "mlm": 10}
    assert detour.objective_steps(independent=True) == {"mlm": 70, "clm": 30}
    throughput = Throughput({(None, "mlm"): 1000.0, (None, "clm"): 500.0})
    assert run_cost(detour, throughput).gpu_hours == pytest.approx((10 / 1000 + 30 / 500) * 512 / 3600)


def test_a_grid_arm_and_the_same_schedule_are_one_run(small_plan):
    plan = small_plan({"continued_pretraining": [], "grids": [{"budgets": [100], "clm_fractions": [0.5, 1]}],
                       "schedules": [{"phases": ["clm", "mlm"], "budgets": [100], "switches": [0.5]}]})
    assert sorted(r.name for r in plan.runs) == ["tiny-clm100-m40", "tiny-clm50-mlm50-m40"]


def test_a_study_of_schedules_only_and_a_continuation_of_a_schedule_arm(small_plan):
    plan = small_plan({"grids": [], "schedules": [MNTP, MNTP_MLM],
                       "continued_pretraining": [{"parents": ["mntp50-mlm50-m40"], "steps": [40]}]})
    assert [r.name for r in plan.runs] == ["tiny-mntp100-m40", "tiny-mntp50-mlm50-m40",
                                           "tiny-mntp50-mlm50-m40-cpt-mlm40"]
    assert plan.run("tiny-mntp50-mlm50-m40-cpt-mlm40").continues == "tiny-mntp50-mlm50-m40"


def test_scale_shrinks_schedules_and_keeps_their_sharing(small_plan):
    plan = small_plan({**SCHEDULES, "schedules": [DETOUR, MNTP, {**MNTP_MLM, "switch_steps": [40]}]}, scale=0.5)
    assert (plan.run("tiny-mlm30-clm15-mlm5-m40").parent, plan.run("tiny-mlm30-clm15-mlm5-m40").branch_step) == \
        ("tiny-mlm50-m40", 30)
    assert plan.run("tiny-mntp20-mlm30-m40").branch_step == 20


def test_new_kinds_are_part_of_no_claim_of_the_papers_table(small_plan):
    plan = small_plan(SCHEDULES)
    kinds = {arm.label: arm.kind for arm in arms(plan)}
    assert kinds["tiny-mlm60-clm30-mlm10-m40"] == "mlm,clm,mlm" and kinds["tiny-mntp100-m40"] == "mntp"
    assert kinds["tiny-mntp50-mlm50-m40"] == "mntp,mlm" and kinds["tiny-clm50-mlm50-m40"] == "clm_then_mlm"
    fractions = {arm.label: arm.clm_fraction for arm in arms(plan)}
    assert fractions["tiny-mlm60-clm30-mlm10-m40"] is None and fractions["tiny-mntp100-m40"] is None
    assert fractions["tiny-clm25-mlm75-m40"] == 0.25 and fractions["tiny-mlm100-m40"] == 0.0
    table = load_claims(REPO / "examples" / "studies" / "claims" / "clm_mlm_2507.00994.yaml")
    compared = {arm.label for spec in table.claims if spec.compare != "continuation"
                for pair in _arm_pairs(plan, spec) for arm in pair}
    assert compared and not compared & {"tiny-mlm60-clm30-mlm10-m40", "tiny-mntp100-m40", "tiny-mntp50-mlm50-m40"}


@pytest.mark.parametrize("schedule, message", [
    ({**DETOUR, "switches": [0.9, 0.6]}, "--switch 0.9,0.6 is not strictly increasing"),
    ({**DETOUR, "switches": [0.6, 1.2]}, "--switch must be a fraction strictly between 0 and 1, got 1.2"),
    ({**DETOUR, "switches": [], "switch_steps": [60, 120]}, "puts a switch at step 120"),
    ({**DETOUR, "switches": [0.5]}, "has 3 stages, so 2 switches, but --switch gives 1"),
    ({"phases": ["mlm", "mlm"], "budgets": [100], "switches": [0.5]}, "trains mlm in stages 1 and 2 next to each"),
    ({"phases": ["mlm", "nsp"], "budgets": [100], "switches": [0.5]}, "unknown --objective 'mlm,nsp'"),
    ({"phases": ["mntp"], "budgets": [100], "switches": [0.5]}, "has one objective and no switch"),
    ({"phases": ["clm", "mlm"], "budgets": [100]}, "have 1 boundary; give switches"),
    ({**DETOUR, "switch_steps": [60, 90]}, "either switches or switch_steps"),
    ({"phases": ["clm_then_mlm"], "budgets": [100]}, "list them one by one ([clm, mlm])"),
    ({"phases": [], "budgets": [100]}, "schedules[0].phases is empty"),
    ({**DETOUR, "mask_ratios": [1.5]}, "schedules[0].mask_ratios must lie strictly between 0 and 1"),
])
def test_a_bad_schedule_is_refused_in_one_line(tmp_path, capsys, schedule, message):
    study = write_study(tmp_path, {**SMALL, "continued_pretraining": [], "schedules": [schedule]})
    line = expect_one_line(capsys, tool_main("plan_study")([str(study)]), message)
    assert "schedules[0]" in line


def test_a_study_without_arms_is_refused(tmp_path):
    data = {k: v for k, v in SMALL.items() if k not in ("grids", "continued_pretraining")}
    with pytest.raises(StudyError, match="grids is missing or empty, and so is schedules"):
        load_study(write_study(tmp_path, data))


def test_the_recipes_study_shares_the_detour_and_mntp_prefixes(monkeypatch):
    monkeypatch.chdir(REPO)
    plan = build_plan(load_study("examples/studies/recipes_2026.yaml"))
    starts = {r.name: (r.parent, r.branch_step) for r in plan.runs}
    assert starts["tiny-mlm300-clm150-mlm50-m40"] == ("tiny-mlm500-m40", 300)
    assert starts["tiny-mntp250-mlm250-m40"] == ("tiny-mntp500-m40", 250)
    assert starts["tiny-clm250-mlm250-m40"] == ("tiny-clm500-m40", 250)
    assert plan.run("tiny-mlm500-m40").save_at == [300]
    assert sum(r.steps_trained for r in plan.runs) == 2700 and len(plan.runs) == 8

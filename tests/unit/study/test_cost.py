"""GPU-hours and the saving against independent runs, checked against sums done by hand for the small grid."""

import json

import pytest

from megamlm.study.planning.cost import Throughput, run_cost, throughput_for, totals
from megamlm.study.planning.schema import StudyError
from megamlm.study.planning.table import plan_table

TOKENS_PER_STEP = 8 * 64  # global batch x sequence length of the small study


def by_objective(mlm: float, clm: float) -> Throughput:
    t = Throughput()
    t.add(None, "mlm", mlm, "mlm figure")
    t.add(None, "clm", clm, "clm figure")
    return t


def test_steps_tokens_and_saving_by_hand(small_plan):
    plan = small_plan()
    t = totals(plan, by_objective(1024, 512))
    # Trained by the plan: clm100 100, mlm100 100, clm50-mlm50 50 (51-100), clm25-mlm75 75, clm60 20 (41-60),
    # mlm60 20, clm30-mlm30 30, clm15-mlm45 45, the continuation 40.
    assert t.plan.steps == 100 + 100 + 50 + 75 + 20 + 20 + 30 + 45 + 40 == 480
    # From scratch: four 100-step models, four 60-step models, the continuation.
    assert t.independent.steps == 4 * 100 + 4 * 60 + 40 == 680
    assert t.plan.tokens == 480 * TOKENS_PER_STEP
    assert t.saving_fraction == pytest.approx(200 / 680)


def test_gpu_hours_price_each_objective_at_its_own_figure(small_plan):
    plan = small_plan()
    t = totals(plan, by_objective(mlm=1024, clm=512))
    # The plan trains 120 CLM steps (clm100: 100, clm60: 20) and 360 MLM steps; 512 tokens per step.
    assert t.plan.gpu_hours == pytest.approx((120 * 512 / 512 + 360 * 512 / 1024) / 3600)
    # From scratch: CLM 100+50+25+60+30+15 = 280 steps, MLM 100+50+75+60+30+45+40 = 400 steps.
    assert t.independent.gpu_hours == pytest.approx((280 * 512 / 512 + 400 * 512 / 1024) / 3600)
    branch = run_cost(plan.run("tiny-clm25-mlm75-m40"), by_objective(1024, 512))
    assert (branch.steps, branch.gpu_hours) == (75, pytest.approx(75 * 512 / 1024 / 3600))


def test_tokens_follow_a_batch_ramp_up_step_by_step(small_plan):
    """With --rampup-batch-size 4 4 40 the first steps take 4 samples (10 steps), then 8: a step is not
    global batch x sequence length until the ramp ends, in the plan's tokens and GPU-hours alike."""
    ramp = {"pretrain": {"model": {"seq_length": 64},
                         "training": {"micro_batch_size": 4, "global_batch_size": 8, "rampup_batch_size": [4, 4, 40],
                                      "lr_warmup_iters": 10, "lr_wsd_decay_iters": 20}}}
    plan = small_plan(ramp)
    mlm = run_cost(plan.run("tiny-mlm100-m40"), by_objective(1024, 512))
    assert mlm.tokens == (10 * 4 + 90 * 8) * 64
    assert mlm.gpu_hours == pytest.approx(mlm.tokens / 1024 / 3600)
    branch = run_cost(plan.run("tiny-clm25-mlm75-m40"), by_objective(1024, 512))
    assert branch.tokens == 75 * 8 * 64  # steps 26-100, after the ramp


def test_throughput_from_the_command_line_and_from_benchmark_files(small_study, tmp_path):
    study = small_study()
    one = throughput_for(study, ["tiny=2048"])
    assert one.per_gpu("tiny", "clm") == 2048 and one.per_gpu("610m", "mlm") is None
    for objective, value in (("mlm", 1024), ("clm", 512)):
        (tmp_path / f"{objective}.json").write_text(json.dumps(
            {"preset": "tiny", "objective": objective, "megamlm_tokens_per_s": value, "device_name": "H200"}))
    files = throughput_for(study, benchmarks=[tmp_path / "mlm.json", tmp_path / "clm.json"])
    assert (files.per_gpu("tiny", "mlm"), files.per_gpu("tiny", "clm")) == (1024, 512)
    with pytest.raises(StudyError, match="SIZE=N"):
        throughput_for(study, ["fast"])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(StudyError, match="benchmarks/train_step.py result"):
        throughput_for(study, benchmarks=[tmp_path / "bad.json"])


def test_table_rows_and_totals(small_plan):
    plan = small_plan()
    table = plan_table(plan, by_objective(1024, 512))
    assert "| tiny-clm60-m40 | tiny-clm100-m40 @ 40 | clm 1-60 | 41-60 (20) |" in table
    assert "| tiny-clm100-m40-cpt-mlm40 | tiny-clm100-m40 (continued) | mlm 1-40 | 1-40 (40) |" in table
    assert "| this plan | 480 |" in table and "| every model from scratch | 680 |" in table
    assert "(29%)" in table
    assert "| ? |" in plan_table(plan, Throughput())

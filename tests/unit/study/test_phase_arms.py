"""Studies over a recipe's phases (issue 44, item 7): arms that change a phase's settings share every prefix they
train alike, the WSD-branching ablation trains its stable phase once, and the runs are launched with their
phases in a --config file that pretrain.py reads as the planner did."""

import json
from pathlib import Path

import pytest
import yaml
from helpers import expect_one_line, tool_main
from small_study import write_study
from test_local import make_checkpoint

from megamlm.config import parse_args
from megamlm.study.planning.cost import throughput_for
from megamlm.study.planning.load import load_study
from megamlm.study.planning.phase_arms import config_text
from megamlm.study.planning.plan import build_plan
from megamlm.study.planning.prefixes import run_schedule
from megamlm.study.planning.schema import StudyError
from megamlm.study.planning.table import plan_table
from megamlm.study.reporting.report import validation_section
from megamlm.study.running.commands import config_file_lines
from megamlm.training.lineage import History, Segment

TRUNK = {"model": {"model": "tiny", "seq_length": 64},
         "training": {"micro_batch_size": 16, "global_batch_size": 16, "lr_warmup_iters": 4,
                      "lr_decay_style": "wsd"},
         "phases": [{"steps": 12, "mask_ratio": 0.3}, {"lr_decay": True}]}
ARMS = [{"label": "decay-m30"}, {"label": "decay-m15", "phases": [{}, {"mask_ratio": 0.15}]},
        {"label": "decay-data", "phases": [{}, {"data_path": ["other_text_document"]}]},
        {"label": "decay-clm", "phases": [{}, {"objective": "clm"}]}]


def study_file(tmp_path, arms=ARMS, trunk=TRUNK, **more):
    (tmp_path / "trunk.yaml").write_text(yaml.safe_dump(trunk))
    return write_study(tmp_path, {"name": "wsd", "sizes": ["tiny"], "seeds": [1], "pretrain": {"config": "trunk.yaml"},
                                  "phase_arms": [{"budgets": [16], "arms": arms}], **more})


def test_the_wsd_ablation_trains_the_stable_phase_once_and_branches_every_decay_at_its_start(tmp_path):
    plan = build_plan(load_study(study_file(tmp_path)))
    runs = {run.label: run for run in plan.runs}
    trunk = runs["decay-m30"]
    assert trunk.parent is None and trunk.save_at == [12]
    for label in ("decay-m15", "decay-data", "decay-clm"):
        assert (runs[label].parent, runs[label].branch_step) == (trunk.name, 12), label
    assert sum(run.steps_trained for run in plan.runs) == 16 + 3 * 4  # the stable phase once, each decay once
    assert runs["decay-clm"].objective == "mlm_then_clm" and runs["decay-clm"].switch_steps == (12,)
    for run in plan.runs:  # every branch is one the trainer's history accepts
        if run.branch_step:
            parent = plan.run(run.parent)
            assert History([Segment.of_config(parent.config)]).first_difference(
                Segment.of_config(run.config), run.branch_step) is None


def test_the_plan_tables_schedule_names_what_each_phase_changes(tmp_path):
    """The arms differ only in their decay phase's settings: the schedule column shows which, not four equal rows."""
    plan = build_plan(load_study(study_file(tmp_path)))
    schedules = {run.label: run_schedule(run) for run in plan.runs}
    assert schedules == {"decay-m30": "mlm 1-12 -> mlm 13-16 (decay linear)",
                         "decay-m15": "mlm 1-12 -> mlm 13-16 (mask 0.15, decay linear)",
                         "decay-data": "mlm 1-12 -> mlm 13-16 (data other_text_document, decay linear)",
                         "decay-clm": "mlm 1-12 -> clm 13-16 (decay linear)"}
    table = plan_table(plan, throughput_for(plan.study))
    assert all(f"| {text} |" in table for text in schedules.values())


def test_arms_differing_in_a_later_phases_mask_rate_branch_at_that_phase_not_before_or_after(tmp_path):
    """Three phases; the arms differ in the third's mask rate only: they share steps 1-10 (the first two phases),
    not the whole run (the planner once compared objectives and learning rates only)."""
    trunk = {**TRUNK, "phases": [{"steps": 6}, {"steps": 4, "mask_ratio": 0.2}, {"lr_decay": True}]}
    arms = [{"label": "a"}, {"label": "b", "phases": [{}, {}, {"mask_ratio": 0.1}]}]
    plan = build_plan(load_study(study_file(tmp_path, arms, trunk)))
    a, b = plan.runs
    assert (b.parent, b.branch_step) == (a.name, 10)


def test_the_config_file_is_the_run_pretrain_reads(tmp_path):
    plan = build_plan(load_study(study_file(tmp_path)))
    run = next(run for run in plan.runs if run.label == "decay-m15")
    flags = plan.flags(run)
    assert flags[:2] == ["--config", str(plan.config_file(run))] and "--load" in flags
    path = tmp_path / "run.yaml"
    path.write_text(config_text(run.settings, run.name))
    launched = parse_args(["--config", str(path), *flags[2:]])
    assert [p.mask_ratio for p in launched.recipe.phases] == [0.3, 0.15]
    assert Segment.of_config(launched) == Segment.of_config(run.config)
    lines = config_file_lines(plan, run)
    assert lines[1].startswith("cat > ") and lines[-1] == "MEGAMLM_CONFIG"


def test_scale_shrinks_the_phases_with_the_budgets(tmp_path):
    plan = build_plan(load_study(study_file(tmp_path), scale=0.5))
    assert {(run.label, run.train_iters, run.branch_step) for run in plan.runs} >= {("decay-m15", 8, 6)}


@pytest.mark.parametrize("change,message", [
    ({"grids": [{"budgets": [16], "clm_fractions": [0]}]}, "declare the arms under phase_arms"),
    ({"phase_arms": [{"budgets": [16], "arms": [{"label": "a"}, {"label": "a"}]}]}, "names two arms"),
    ({"phase_arms": [{"budgets": [16], "arms": [{"label": "a", "phases": [{}, {}, {}]}]}]},
     "lists 3 phases, but pretrain.config has 2"),
    ({"phase_arms": [{"budgets": [16], "arms": [{"label": "a b"}]}]}, "may only use letters"),
    ({"phase_arms": [{"budgets": [16], "arms": [{"label": "a", "phases": [{"masking": 0.1}]}]}]},
     "unknown key phase_arms[0].arms[0].phases[0].masking"),
    ({"phase_arms": [{"budgets": [16], "arms": [{"label": "a", "phases": [{}, {"mask_ratio": 1.5}]}]}]},
     "run tiny-a: phase 2.mask_ratio must be strictly between 0 and 1"),
])
def test_bad_phase_arms_are_one_line(tmp_path, capsys, change, message):
    expect_one_line(capsys, tool_main("plan_study")([str(study_file(tmp_path, **change))]), message)


def test_phase_arms_without_phases_to_change_are_refused(tmp_path):
    trunk = {key: value for key, value in TRUNK.items() if key != "phases"}
    with pytest.raises(StudyError, match="phase_arms change the phases of pretrain.config, but it has none"):
        load_study(study_file(tmp_path, trunk=trunk))


def test_the_validation_table_covers_each_phases_objectives(tmp_path):
    """A run whose phases train MLM then CLM shows both validation losses, and an arm whose decay trains MNTP
    adds the MNTP loss column (validation scores it only where a phase trains it)."""
    arms = [{"label": "decay-clm", "phases": [{}, {"objective": "clm"}]},
            {"label": "decay-mntp", "phases": [{}, {"objective": "mntp"}]}]
    plan = build_plan(load_study(study_file(tmp_path, arms, root=str(tmp_path / "runs"))))
    for run in plan.runs:
        folder = Path(plan.save_dir(run))
        folder.mkdir(parents=True)
        mntp = {"mntp_loss": 4.25} if "mntp" in run.phases else {}
        (folder / "metrics.jsonl").write_text(json.dumps({
            "kind": "validation", "step": 16, "mlm_loss": 5.5, "mlm_accuracy": 0.25, "clm_loss": 6.5, **mntp}) + "\n")
        make_checkpoint(folder, 16)
    text, _ = validation_section(plan)
    assert "| arm | phases | seeds | validation MLM loss | validation MLM accuracy | validation CLM loss | " \
           "validation MNTP loss |" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| tiny-")}
    assert rows["tiny-decay-clm"].startswith("| tiny-decay-clm | mlm -> clm | 1 | 5.500") and "6.500" in \
        rows["tiny-decay-clm"] and rows["tiny-decay-clm"].endswith("| – |")
    assert "| mlm -> mntp |" in rows["tiny-decay-mntp"] and "4.250" in rows["tiny-decay-mntp"]

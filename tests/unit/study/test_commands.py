"""Each run's commands are ones the tools accept: the planned pretrain.py flags parse to the run's config, and the
evaluation command parses with tools/evaluate.py's own parser to the study's protocol."""

import runpy
import subprocess
from pathlib import Path

from helpers import expect_one_line, tool_main

from megamlm.study.running.commands import evaluate_command, evaluated_models, export_command

REPO = Path(__file__).resolve().parents[3]
EVALUATION = {"tasks": ["brown-pos", "austen-qa"], "lrs": [1e-4, 5e-4], "seeds": [0, 1, 2], "checkpoint_steps": [50],
              "hyperparameters": {"batch_size": 16, "max_steps": 30, "warmup_ratio": 0.2},
              "task_settings": {"doc_stride": 32, "max_length": 120}, "max_train_examples": 64}


def test_evaluation_command_parses_with_the_tools_parser(small_plan):
    plan = small_plan({"evaluation": EVALUATION})
    run = plan.run("tiny-clm100-m40")
    command = evaluate_command(plan, run)
    assert command[:2] == ["python", "tools/evaluate.py"]
    args = runpy.run_path(str(REPO / "tools" / "evaluate.py"), run_name="evaluate")["build_parser"]().parse_args(
        command[2:])
    assert args.model == [f"tiny-clm100-m40-step50={plan.root}/hf/tiny-clm100-m40-step50,"
                          f"tiny-clm100-m40={plan.root}/hf/tiny-clm100-m40"]
    assert (args.tasks, str(args.output)) == ("brown-pos,austen-qa", f"{plan.root}/eval")
    assert (args.lrs, args.seeds) == ((1e-4, 5e-4), (0, 1, 2))
    assert (args.batch_size, args.max_steps, args.warmup_ratio) == (16, 30, 0.2)
    assert (args.doc_stride, args.max_length, args.max_train_examples) == (32, 120, 64)


def test_evaluated_checkpoints_are_the_runs_own_steps(small_plan):
    plan = small_plan({"evaluation": EVALUATION})
    assert [m.name for m in evaluated_models(plan, plan.run("tiny-clm100-m40"))] == ["tiny-clm100-m40-step50",
                                                                                     "tiny-clm100-m40"]
    # A branch from step 50 does not train step 50 itself: only its last checkpoint is its own.
    assert [m.step for m in evaluated_models(plan, plan.run("tiny-clm50-mlm50-m40"))] == [100]
    assert [m.step for m in evaluated_models(plan, plan.run("tiny-clm25-mlm75-m40"))] == [50, 100]
    export = export_command(plan, evaluated_models(plan, plan.run("tiny-clm100-m40"))[0])
    assert export[export.index("--input") + 1] == f"{plan.root}/tiny-clm100-m40/iter_0000050"


def test_emit_local_lists_the_pretraining_commands_in_order(small_study, tmp_path, monkeypatch):
    study_file = small_study().source
    monkeypatch.chdir(tmp_path)
    assert tool_main("plan_study")([str(study_file), "--emit", "local", str(tmp_path / "run.sh"), "--root",
                                    "runs/small"]) == 0
    script = (tmp_path / "run.sh").read_text()
    assert subprocess.run(["bash", "-n", str(tmp_path / "run.sh")]).returncode == 0
    saves = [line.split("--save ")[1].split()[0] for line in script.splitlines() if "pretrain.py" in line]
    assert saves[:2] == ["runs/small/tiny-clm100-m40", "runs/small/tiny-mlm100-m40"] and len(saves) == 9


def test_bad_command_lines_are_one_error(small_study, capsys):
    study_file = small_study().source
    for extra, message in ((["--emit", "slurm"], "--emit slurm DIR"), (["--scale", "3"], "--scale must be in")):
        expect_one_line(capsys, tool_main("plan_study")([str(study_file), *extra]), message)


def test_the_random_init_models_own_fine_tuning_seeds_reach_its_evaluation_and_the_report(small_plan):
    from megamlm.study.reporting.report import evaluation_keys
    from megamlm.study.running.commands import random_init_models

    plan = small_plan({"evaluation": {**EVALUATION, "seeds": [0], "random_init_seeds": [0, 1, 2]}})
    parser = runpy.run_path(str(REPO / "tools" / "evaluate.py"), run_name="evaluate")["build_parser"]()
    (carrier, name), = random_init_models(plan).items()
    args = parser.parse_args(evaluate_command(plan, plan.run(carrier))[2:])
    assert (args.random_init_baseline, args.random_init_seeds, args.seeds) == (name, (0, 1, 2), (0,))
    others = [plan.run(r.name) for r in plan.runs if r.name != carrier]
    assert all("--random-init-seeds" not in evaluate_command(plan, r) for r in others)
    seeds = {(k.model, k.seed) for k in evaluation_keys(plan)}
    assert {s for m, s in seeds if m == name} == {0, 1, 2} and {s for m, s in seeds if m != name} == {0}


def test_emit_local_to_stdout_is_the_script_alone(small_study, tmp_path, monkeypatch, capsys):
    """Issue 42: `--emit local > run.sh` printed the plan table before `#!/bin/bash`; the table goes to stderr."""
    study_file = small_study().source
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert tool_main("plan_study")([str(study_file), "--emit", "local", "--root", "runs/small"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("#!/bin/bash\n") and "GPU-hours" not in out and "GPU-hours" in err
    (tmp_path / "run.sh").write_text(out)
    assert subprocess.run(["bash", "-n", str(tmp_path / "run.sh")]).returncode == 0
    assert sum("pretrain.py" in line for line in out.splitlines()) == 9


def test_run_names_every_missing_package_and_data_file_before_the_first_step(small_study, tmp_path, monkeypatch,
                                                                              capsys):
    """Issue 42: after `pip install -e .` a study's --run trained every run, then every evaluation failed (no
    scikit-learn for the random-init baseline, then no ../shared/data). All of it is one line before any run."""
    from megamlm import extras

    real = extras.installed
    monkeypatch.setattr(extras, "installed", lambda name: name != "sklearn" and real(name))
    (tmp_path / "empty").mkdir()
    study_file = small_study({"evaluation": {**EVALUATION, "tasks": ["brown-pos", "rt-sentiment", "austen-qa",
                                                                      f"sequence_classification:{tmp_path}/mine"],
                                             "data_dir": str(tmp_path / "empty")}}).source
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    status = tool_main("plan_study")([str(study_file), "--run", "--root", "runs/small"])
    expect_one_line(capsys, status, "scikit-learn", 'pip install "megamlm[eval]"', "brown/brown_pos.jsonl",
                    "sentiment/rt_snippets.jsonl", f"{tmp_path}/mine", "nothing was run")
    assert not (tmp_path / "runs").exists()

"""The local runner, with a fake command runner that writes what the real commands would: it skips finished runs,
resumes an interrupted one, and stops the descendants of a failed one (and only those)."""

from pathlib import Path

from megamlm.checkpoint.catalog import iteration_dir
from megamlm.checkpoint.integrity import write_marker, write_rank_completion
from megamlm.study.running.local import LocalRunner

EVALUATION = {"tasks": ["brown-pos"], "lrs": [1e-3], "seeds": [0], "checkpoint_steps": [50]}


def make_checkpoint(save: str | Path, step: int) -> None:
    """A folder that passes the checkpoint catalog's quick check: its files and the completion marker."""
    folder = iteration_dir(save, step)
    folder.mkdir(parents=True)
    (folder / ".metadata").write_text("")
    (folder / "config.json").write_text("{}")
    write_rank_completion(folder, 0, [".metadata", "config.json"])
    write_marker(folder, step, 1, [], {})


class FakeCommands:
    """Stands in for pretrain.py, convert_to_hf.py and evaluate.py; records every command."""

    def __init__(self, fail_runs=()):
        self.calls: list[tuple[str, str]] = []
        self.fail_runs = set(fail_runs)

    def __call__(self, command: list[str], log_path: Path) -> int:
        script = Path(command[1]).name
        if script == "pretrain.py":
            save = command[command.index("--save") + 1]
            self.calls.append(("pretrain", Path(save).name))
            if Path(save).name in self.fail_runs:
                return 1
            pinned = command[command.index("--save-at") + 1].split(",") if "--save-at" in command else []
            for step in [*map(int, pinned), int(command[command.index("--train-iters") + 1])]:
                if not iteration_dir(save, step).exists():
                    make_checkpoint(save, step)
        elif script == "convert_to_hf.py":
            out = Path(command[command.index("--output") + 1])
            self.calls.append(("export", out.name))
            out.mkdir(parents=True)
            (out / "config.json").write_text("{}")
        else:
            self.calls.append(("evaluate", command[command.index("--model") + 1]))
        return 0


def names(calls, stage):
    return [name for kind, name in calls if kind == stage]


def test_runs_in_dependency_order_then_skips_what_finished(small_plan):
    plan = small_plan({"evaluation": EVALUATION})
    fake = FakeCommands()
    outcomes = LocalRunner(plan, fake, log=lambda *_: None).run()
    assert [o.state for o in outcomes] == ["trained"] * len(plan.runs)
    assert names(fake.calls, "pretrain") == [r.name for r in plan.runs]
    assert "tiny-clm100-m40-step50" in names(fake.calls, "export")  # the evaluated intermediate checkpoint
    evaluated = names(fake.calls, "evaluate")
    assert any(m.startswith("tiny-clm100-m40-step50=") for m in evaluated[0].split(","))

    again = FakeCommands()
    outcomes = LocalRunner(plan, again, log=lambda *_: None).run()
    assert [o.state for o in outcomes] == ["finished before"] * len(plan.runs)
    assert again.calls == []


def test_a_changed_evaluation_reruns_only_the_evaluation(small_plan):
    LocalRunner(small_plan({"evaluation": EVALUATION}), FakeCommands(), log=lambda *_: None).run()
    plan = small_plan({"evaluation": {**EVALUATION, "lrs": [1e-3, 1e-4]}})
    fake = FakeCommands()
    outcomes = LocalRunner(plan, fake, log=lambda *_: None).run()
    assert names(fake.calls, "pretrain") == [] and names(fake.calls, "export") == []
    assert len(names(fake.calls, "evaluate")) == len(plan.runs)
    assert {o.detail for o in outcomes} == {"pretraining finished before"}


def test_an_interrupted_run_is_relaunched_and_resumes(small_plan):
    plan = small_plan()
    make_checkpoint(plan.save_dir(plan.run("tiny-mlm100-m40")), 30)
    fake = FakeCommands()
    outcomes = {o.run: o for o in LocalRunner(plan, fake, log=lambda *_: None).run()}
    assert outcomes["tiny-mlm100-m40"].state == "resumed"
    assert outcomes["tiny-mlm100-m40"].detail == "from step 30"
    # The relaunch is the run's own command: pretrain.py resumes from the newest checkpoint in --save.
    assert names(fake.calls, "pretrain").count("tiny-mlm100-m40") == 1


def test_a_failed_run_stops_its_descendants_only(small_plan):
    plan = small_plan({"evaluation": EVALUATION})
    fake = FakeCommands(fail_runs={"tiny-clm100-m40"})
    outcomes = {o.run: o for o in LocalRunner(plan, fake, log=lambda *_: None).run()}
    assert outcomes["tiny-clm100-m40"].state == "failed"
    assert "pretrain.py exited 1" in outcomes["tiny-clm100-m40"].detail
    descendants = plan.descendants("tiny-clm100-m40")
    assert len(descendants) == 6
    for name in descendants:
        assert outcomes[name].state == "blocked" and outcomes[name].detail == "tiny-clm100-m40 failed"
    assert {outcomes["tiny-mlm100-m40"].state, outcomes["tiny-mlm60-m40"].state} == {"trained"}
    assert set(names(fake.calls, "pretrain")) == {"tiny-clm100-m40", "tiny-mlm100-m40", "tiny-mlm60-m40"}

    # Fixed, the next launch trains the failed run and its descendants, and skips the rest.
    fixed = FakeCommands()
    outcomes = {o.run: o for o in LocalRunner(plan, fixed, log=lambda *_: None).run()}
    assert set(names(fixed.calls, "pretrain")) == {"tiny-clm100-m40", *descendants}
    assert outcomes["tiny-mlm60-m40"].state == "finished before"


def test_a_run_that_exits_without_its_last_checkpoint_fails(small_plan):
    plan = small_plan({"continued_pretraining": [], "grids": [{"budgets": [100], "clm_fractions": [0]}]})
    outcomes = LocalRunner(plan, lambda command, log: 0, log=lambda *_: None).run()
    assert outcomes[0].state == "failed" and "without a checkpoint at step 100" in outcomes[0].detail

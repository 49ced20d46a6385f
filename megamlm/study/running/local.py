"""Execute a plan on one machine, in dependency order, idempotently.

For each run, in plan order (a parent always comes before its children): pretraining (skipped when the run's
last checkpoint is whole; relaunched with the same command when the run holds earlier checkpoints, which
pretrain.py resumes from), the export of each evaluated checkpoint (skipped when exported), the fine-tuning
(tools/evaluate.py skips the fine-tuning runs it has finished), then ``ROOT/status/RUN.json`` records the
commands that finished it (and the seconds each stage took), so a later launch with the same commands skips the
run entirely. A run whose pretraining fails stops its descendants (they are reported as blocked, and not started); a
failed export or evaluation is reported but does not stop the children, which need only the checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from megamlm.checkpoint.catalog import iteration_dir, list_checkpoints, problem
from megamlm.eval.results import write_json_atomic
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.runs import Run
from megamlm.study.running.commands import (
    REPO,
    evaluate_command,
    evaluated_models,
    export_command,
    log_file,
    pretrain_command,
    status_file,
    write_config_file,
)

Executor = Callable[[list[str], Path], int]
"""Runs one command (argument list) from the planning folder, its output going to the log file; returns its exit
status."""


def subprocess_executor(cwd: str | Path = ".", echo: bool = True) -> Executor:
    """Run commands as subprocesses, their output streamed into the log file (and to stdout with ``echo``)."""

    def execute(command: list[str], log_path: Path) -> int:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        print("$", " ".join(command), flush=True)
        with open(log_path, "a", buffering=1) as log:  # line-buffered: the log follows the run
            process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env={**os.environ, "PYTHONUNBUFFERED": "1"})  # the log shows progress
            for line in process.stdout:
                log.write(line)
                if echo:
                    sys.stdout.write(line)
            return process.wait()

    return execute


@dataclass
class Outcome:
    run: str
    state: str
    """finished before | trained | resumed | failed | blocked"""
    detail: str = ""


def finished_step(save_dir: str | Path, step: int) -> bool:
    """Whether the run folder holds a whole checkpoint of ``step``."""
    folder = iteration_dir(save_dir, step)
    return folder.is_dir() and problem(folder, deep=False) is None


def newest_step(save_dir: str | Path) -> int:
    for step, folder in list_checkpoints(save_dir):
        if problem(folder, deep=False) is None:
            return step
    return 0


class LocalRunner:
    def __init__(self, plan: Plan, execute: Executor, python: str = sys.executable, nproc_per_node: int = 1,
                 eval_workers: int = 1, eval_devices: str | None = None, log=print):
        self.plan, self.execute, self.log = plan, execute, log
        self.python, self.nproc_per_node = python, nproc_per_node
        self.eval_workers, self.eval_devices = eval_workers, eval_devices

    def commands(self, run: Run) -> dict:
        repo = str(REPO)
        commands = {"pretrain": pretrain_command(self.plan, run, self.python, self.nproc_per_node, repo)}
        if self.plan.study.evaluation is not None:
            commands["export"] = [export_command(self.plan, m, self.python, repo)
                                  for m in evaluated_models(self.plan, run)]
            commands["evaluate"] = evaluate_command(self.plan, run, self.python, self.eval_workers, self.eval_devices,
                                                    repo)
        return commands

    def run(self) -> list[Outcome]:
        outcomes: dict[str, Outcome] = {}
        stopped: dict[str, str] = {}  # run -> the failed ancestor that stops it
        for run in self.plan.runs:
            if run.name in stopped:
                outcome = Outcome(run.name, "blocked", f"{stopped[run.name]} failed")
            else:
                outcome = self.run_one(run)
            outcomes[run.name] = outcome
            self.log(f"[study] {run.name}: {outcome.state}" + (f" ({outcome.detail})" if outcome.detail else ""))
            if outcome.state in ("blocked", "failed") and not outcome.detail.startswith("evaluation"):
                for descendant in self.plan.descendants(run.name):
                    stopped.setdefault(descendant, stopped.get(run.name, run.name))
        return list(outcomes.values())

    def run_one(self, run: Run) -> Outcome:
        commands = self.commands(run)
        status = status_file(self.plan, run)
        if status.is_file() and json.loads(status.read_text()).get("commands") == commands:
            return Outcome(run.name, "finished before")
        save = self.plan.save_dir(run)
        state, note, seconds = "trained", "", {}
        if not finished_step(save, run.train_iters):
            resumed_from = newest_step(save)
            if resumed_from:
                state, note = "resumed", f"from step {resumed_from}"
                self.log(f"[study] {run.name}: resuming from step {resumed_from}")
            write_config_file(self.plan, run)
            code = self._timed("pretrain", seconds, commands["pretrain"], run)
            if code != 0:
                return Outcome(run.name, "failed", f"pretrain.py exited {code}; log "
                                                   f"{log_file(self.plan, run, 'pretrain')}")
            if not finished_step(save, run.train_iters):
                return Outcome(run.name, "failed", f"pretrain.py exited 0 without a checkpoint at step "
                                                   f"{run.train_iters} in {save}")
        else:
            note = "pretraining finished before"
        for model, command in zip(evaluated_models(self.plan, run), commands.get("export", [])):
            if (Path(model.hf_path) / "config.json").is_file():
                continue
            code = self._timed("export", seconds, command, run)
            if code != 0:
                return Outcome(run.name, "failed", f"evaluation: export of {model.name} exited {code}; log "
                                                   f"{log_file(self.plan, run, 'export')}")
        if "evaluate" in commands:
            code = self._timed("evaluate", seconds, commands["evaluate"], run)
            if code != 0:
                return Outcome(run.name, "failed", f"evaluation: tools/evaluate.py exited {code}; log "
                                                   f"{log_file(self.plan, run, 'evaluate')}")
        write_json_atomic(status, {"commands": commands, "seconds": seconds})
        return Outcome(run.name, state, note)

    def _timed(self, stage: str, seconds: dict, command: list[str], run: Run) -> int:
        start = time.perf_counter()
        code = self.execute(command, log_file(self.plan, run, stage))
        seconds[stage] = seconds.get(stage, 0.0) + time.perf_counter() - start
        return code


def outcome_table(outcomes: list[Outcome]) -> str:
    lines = ["| run | state | detail |", "|---|---|---|"]
    lines += [f"| {o.run} | {o.state} | {o.detail} |" for o in outcomes]
    return "\n".join(lines) + "\n"

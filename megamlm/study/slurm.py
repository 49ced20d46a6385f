"""A plan as SLURM jobs: one sbatch script per run (through examples/slurm/pretrain_nvidia.sbatch, which requeues
a pre-empted run and resumes it from its newest checkpoint), one evaluation script per evaluated run, and
``submit.sh``, which submits them chained with ``--dependency=afterok:``.

A run whose checkpoints start other runs is submitted as several jobs of the same script, one per *segment*:
the job of segment k stops at its branch step (``TARGET_STEP``: ``--exit-interval`` at that step, with the
checkpoint pinned by ``--save-at``), the next segment resumes from it, and each child depends on the job that ends
at its branch step, so branches start as soon as their checkpoint exists rather than when the parent finishes. A
continuation depends on its parent's last segment, an evaluation on its run's last segment.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from megamlm.study.checks import check_script_path, check_slurm_values
from megamlm.study.commands import REPO, evaluate_command, evaluated_models, export_command
from megamlm.study.plan import Plan, Run
from megamlm.study.schema import StudyError


_REPO = "__REPO__"  # placeholder replaced by "$REPO" in the scripts


def segments(plan: Plan, run: Run) -> list[int]:
    """The steps at which the jobs of ``run`` end: its children's branch steps, then its last step."""
    branch_steps = {plan.run(child).branch_step for child in run.children}
    return sorted(s for s in branch_steps if run.branch_step < s < run.train_iters) + [run.train_iters]


def job_variable(run_name: str, segment: int | None = None) -> str:
    name = "job_" + re.sub(r"[^A-Za-z0-9]", "_", run_name)
    return name if segment is None else f"{name}_{segment}"


def _shell(command: list[str]) -> list[str]:
    """Each argument quoted for bash; the repository placeholder becomes "$REPO"."""
    return [shlex.quote(part).replace(_REPO, '"$REPO"') for part in command]


def _wrap(tokens: list[str], width: int = 116) -> str:
    """Shell-ready tokens as one command split over lines with backslashes, before flags."""
    lines, line = [], ""
    for token in tokens:
        if line and len(line) + len(token) + 1 > width and token.startswith("--"):
            lines.append(line + " \\")
            line = "    " + token
        else:
            line = f"{line} {token}" if line else token
    return "\n".join(lines + [line])


def _header(plan: Plan, job_name: str, nodes: int, gpus: int, time: str, logs: Path, requeue: bool) -> list[str]:
    s = plan.study.slurm
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={gpus}", f"#SBATCH --cpus-per-task={s.cpus_per_task}",
             f"#SBATCH --time={time}", f"#SBATCH --output={logs}/%x-%j.out", "#SBATCH --open-mode=append"]
    if requeue:
        lines += ["#SBATCH --signal=TERM@300", "#SBATCH --requeue"]
    if s.partition:
        lines.append(f"#SBATCH --partition={s.partition}")
    if s.account:
        lines.append(f"#SBATCH --account={s.account}")
    lines += [f"#SBATCH {option}" for option in s.extra]
    return lines


def _reached_check(save: str, run_name: str) -> list[str]:
    """Exit at once when the run's checkpoint is at TARGET_STEP already. The step file's contents are checked to be
    digits before they are compared (bash arithmetic would evaluate an expression in it, and run what it names)."""
    latest = shlex.quote(f"{save}/latest_checkpointed_iteration.txt")
    return [
        'if [[ -n "${TARGET_STEP:-}" ]]; then',
        '    [[ "$TARGET_STEP" =~ ^[0-9]+$ ]] || { echo "TARGET_STEP must be a step number, got $TARGET_STEP" >&2; '
        'exit 2; }',
        f"    reached=$(cat {latest} 2>/dev/null || true)",
        '    if [[ "$reached" =~ ^[0-9]+$ ]] && (( 10#$reached >= 10#$TARGET_STEP )); then',
        f'        echo {shlex.quote(run_name + ": step")} "$TARGET_STEP" "reached before"; exit 0',
        "    fi",
        "fi"]


def pretrain_script(plan: Plan, run: Run, workdir: Path, logs: Path) -> str:
    s = plan.study.slurm
    if run.parent is None:
        origin = "from scratch"
    elif run.branch_step:
        origin = f"from {run.parent} at step {run.branch_step:,} (--load)"
    else:
        origin = f"continuing the finished {run.parent} (--continue-from)"
    save = plan.save_dir(run)
    return "\n".join(_header(plan, f"{plan.study.name}-{run.name}", s.nodes, s.gpus_per_node, s.time, logs, True) + [
        f"# Study {plan.study.name}, run {run.name}: {run.schedule()}, {origin}.",
        "# Submitted by submit.sh once per segment: with TARGET_STEP=N the job stops at step N with a checkpoint",
        "# (--exit-interval N), the branch point its children start from; the next segment resumes from it.",
        "set -euo pipefail",
        f"cd {shlex.quote(str(workdir))}",
        f"export REPO={shlex.quote(str(REPO))}",
        *_reached_check(save, run.name),
        _wrap(["bash", '"$REPO/examples/slurm/pretrain_nvidia.sbatch"', *_shell(plan.flags(run)),
               '${TARGET_STEP:+--exit-interval "$TARGET_STEP"}']), ""])


def evaluation_script(plan: Plan, run: Run, workdir: Path, logs: Path) -> str:
    s = plan.study.slurm
    exports = []
    for model in evaluated_models(plan, run):
        exports.append(f"[[ -f {shlex.quote(model.hf_path)}/config.json ]] || "
                       + " ".join(_shell(export_command(plan, model, repo=_REPO))))
    evaluate = _shell(evaluate_command(plan, run, num_workers=s.eval_gpus, repo=_REPO))
    return "\n".join(_header(plan, f"{plan.study.name}-eval-{run.name}", 1, s.eval_gpus, s.eval_time, logs, True) + [
        f"# Study {plan.study.name}: export and fine-tune {run.name} "
        f"({', '.join(m.name for m in evaluated_models(plan, run))}); finished fine-tuning runs are skipped.",
        "set -euo pipefail",
        f"cd {shlex.quote(str(workdir))}",
        f"export REPO={shlex.quote(str(REPO))}",
        "export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}",
        *exports,
        _wrap(evaluate), ""])


def submit_script(plan: Plan, logs: Path) -> str:
    lines = ["#!/bin/bash", f"# Submit study {plan.study.name}: every run of its plan, chained with afterok "
             "dependencies (python tools/plan_study.py --emit slurm wrote this folder).", "set -euo pipefail",
             'cd "$(dirname "$0")"', f"mkdir -p {shlex.quote(str(logs))}",
             "submit() { local id; id=$(sbatch --parsable \"$@\"); echo \"${id%%;*}\"; }"]
    last_job: dict[str, str] = {}
    job_at: dict[tuple[str, int], str] = {}
    for run in plan.runs:
        if run.parent is None:
            dependency = None
        elif run.branch_step:
            dependency = job_at[(run.parent, run.branch_step)]
        else:
            dependency = last_job[run.parent]
        ends = segments(plan, run)
        for k, end in enumerate(ends, start=1):
            variable = job_variable(run.name, k)
            target = "" if end == run.train_iters else str(end)
            options = [f"--export=ALL,TARGET_STEP={target}"]
            if dependency:
                options.insert(0, f"--dependency=afterok:${dependency}")
            lines.append(f"{variable}=$(submit {' '.join(options)} {shlex.quote(run.name + '.sbatch')})"
                         f"  # to step {end:,}")
            job_at[(run.name, end)] = variable
            dependency = variable
        last_job[run.name] = dependency
    if plan.study.evaluation is not None:
        for run in plan.runs:
            lines.append(f"{job_variable(run.name)}_eval=$(submit --dependency=afterok:${last_job[run.name]} "
                         f"{shlex.quote(run.name + '.eval.sbatch')})")
    jobs = sum(len(segments(plan, r)) for r in plan.runs)
    evals = len(plan.runs) if plan.study.evaluation is not None else 0
    lines += [f"echo \"submitted {jobs} pretraining jobs for {len(plan.runs)} runs and {evals} evaluation jobs\"", ""]
    return "\n".join(lines)


def emit_slurm(plan: Plan, out_dir: str | Path, workdir: str | Path | None = None, force: bool = False) -> list[Path]:
    """Write the scripts into ``out_dir``; commands run from ``workdir`` (default: the current folder). Scripts
    already there are refused unless ``force``; each file is written to a temporary name, then renamed."""
    out_dir = Path(out_dir)
    workdir = Path(workdir or os.getcwd()).resolve()
    logs = (workdir / plan.root / "logs").resolve()
    check_slurm_values(plan.study.slurm)  # load_study checked them; a plan made in code is checked here
    check_script_path(logs, "the logs folder (--root, or the folder the scripts run from)")
    files = {f"{run.name}.sbatch": pretrain_script(plan, run, workdir, logs) for run in plan.runs}
    if plan.study.evaluation is not None:
        files.update({f"{run.name}.eval.sbatch": evaluation_script(plan, run, workdir, logs) for run in plan.runs})
    files["submit.sh"] = submit_script(plan, logs)
    if out_dir.exists() and not out_dir.is_dir():
        raise StudyError(f"--emit slurm {out_dir}: that is a file, not a folder; choose a folder for the scripts")
    existing = [out_dir / name for name in files if (out_dir / name).exists()]
    if existing and not force:
        raise StudyError(f"{existing[0]} already exists ({len(existing)} of the {len(files)} scripts do); pass "
                         "--force to replace them, or choose another --emit folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    temporary = {out_dir / name: out_dir / f".{name}.tmp" for name in files}
    try:
        for (path, tmp), text in zip(temporary.items(), files.values()):
            tmp.write_text(text)
            tmp.chmod(0o755)
    except OSError:
        for tmp in temporary.values():
            tmp.unlink(missing_ok=True)
        raise
    for path, tmp in temporary.items():
        os.replace(tmp, path)
    return list(temporary)


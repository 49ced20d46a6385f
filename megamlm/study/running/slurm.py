"""A plan as SLURM jobs: one sbatch script per run (through examples/slurm/pretrain_nvidia.sbatch, which requeues
a pre-empted run and resumes it from its newest checkpoint), one evaluation script per evaluated run, and
``submit.sh``, which submits them chained with ``--dependency=afterok:`` and ends the chain with ``report.sbatch``
(after every evaluation, ``afterany``: one failed evaluation does not hide the others' results), which writes the
study report. A refused submission stops ``submit.sh`` with sbatch's message and a non-zero exit; nothing after it
is submitted.

The scripts name no folder of the machine they were written on: ``submit.sh`` finds the folder the commands run
from (``WORKDIR``) relative to its own, exports it with ``REPO`` (the megamlm clone) and ``MEGAMLM_ENV`` (``env.sh``
beside the scripts: where to activate an environment, sourced on the login node and by every job) to the jobs, and
creates the logs folder before any job is submitted.

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
import sys
from pathlib import Path

from megamlm.eval.paper_datasets import PAPER_DATASETS
from megamlm.study.planning.checks import check_script_path, check_slurm_values
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.prefixes import run_schedule
from megamlm.study.planning.runs import Run
from megamlm.study.planning.schema import StudyError
from megamlm.study.running.commands import REPO, config_file_lines, evaluate_command, evaluated_models, export_command
from megamlm.study.running.job_inputs import WARNING_S, check_time_limits, missing_inputs

ENV_FILE = "env.sh"
ENV_TEXT = """# Sourced by submit.sh on the login node and by every job of this study before its commands: activate the
# study's environment here, e.g.
#   module load cuda/12.4
#   source /path/to/venv/bin/activate
# Written once by tools/plan_study.py --emit slurm and never replaced, so your edits stay.
"""


_REPO = "__REPO__"  # placeholder replaced by "$REPO" in the scripts

def job_names(plan: Plan) -> list[str]:
    """The names of the study's jobs (squeue's %j): its runs', their evaluations' and the report's."""
    names = [f"{plan.study.name}-{run.name}" for run in plan.runs]
    if plan.study.evaluation is not None:
        names += [f"{plan.study.name}-eval-{run.name}" for run in plan.runs]
    return names + [f"{plan.study.name}-report"]


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


def _header(plan: Plan, job_name: str, nodes: int, gpus: int, time: str, requeue: bool) -> list[str]:
    """#SBATCH lines; no --output: submit.sh passes the logs folder, which it creates first (sbatch opens the log
    before the job's first line runs, so a folder made by the job itself would come too late)."""
    s = plan.study.slurm
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1"]
    if gpus:  # a CPU partition (gpus_per_node: 0) has no gpu GRES to ask for
        lines.append(f"#SBATCH --gpus-per-node={gpus}")
    lines += [f"#SBATCH --cpus-per-task={s.cpus_per_task}", f"#SBATCH --time={time}", "#SBATCH --open-mode=append"]
    if requeue:
        lines += [f"#SBATCH --signal=TERM@{WARNING_S}", "#SBATCH --requeue"]
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


def _preamble(repo: str) -> list[str]:
    """Where the commands run and with which environment: set by submit.sh (WORKDIR, REPO, MEGAMLM_ENV), else the
    folder sbatch was called from and ``repo``."""
    return ["set -euo pipefail",
            "# WORKDIR: the folder the study's commands run from (its relative paths are relative to it); REPO: the",
            "# megamlm clone; MEGAMLM_ENV: the file that activates the environment (env.sh beside submit.sh).",
            'WORKDIR=${WORKDIR:-${SLURM_SUBMIT_DIR:-$PWD}}',
            'cd "$WORKDIR"',
            f"export REPO=${{REPO:-{repo}}}",
            '[[ -f "$REPO/pretrain.py" ]] || { echo "megamlm not found in REPO=$REPO; submit with submit.sh, or set '
            'WORKDIR (the folder the study was planned in) or REPO" >&2; exit 2; }',
            'if [[ -n "${MEGAMLM_ENV:-}" ]]; then source "$MEGAMLM_ENV"; fi']


def _repo_from(workdir: Path) -> str:
    """The megamlm clone as the scripts name it: relative to WORKDIR when it lies inside (the usual case: the study
    is planned from the repository root), so the scripts work wherever the clone is copied."""
    try:
        relative = REPO.relative_to(workdir)
    except ValueError:
        return shlex.quote(str(REPO))
    return '"$WORKDIR"' if str(relative) == "." else '"$WORKDIR"/' + shlex.quote(str(relative))


def pretrain_script(plan: Plan, run: Run, workdir: Path) -> str:
    s = plan.study.slurm
    origin = run.origin("from scratch", "from {parent} at step {step:,} (--load)",
                        "continuing the finished {parent} (--continue-from)")
    save = plan.save_dir(run)
    layout = [] if s.gpus_per_node else [
        "# A CPU partition: ranks from the allocation's CPUs (pretrain_nvidia.sbatch, CPUS_PER_RANK), --device cpu.",
        "export GPUS_PER_NODE=0"]
    return "\n".join(_header(plan, f"{plan.study.name}-{run.name}", s.nodes, s.gpus_per_node, s.time, True) + [
        f"# Study {plan.study.name}, run {run.name}: {run_schedule(run)}, {origin}.",
        "# Submitted by submit.sh once per segment: with TARGET_STEP=N the job stops at step N with a checkpoint",
        "# (--exit-interval N), the branch point its children start from; the next segment resumes from it.",
        *_preamble(_repo_from(workdir)), *layout,
        *_reached_check(save, run.name), *config_file_lines(plan, run),
        _wrap(["bash", '"$REPO/examples/slurm/pretrain_nvidia.sbatch"', *_shell(plan.flags(run)),
               '${TARGET_STEP:+--exit-interval "$TARGET_STEP"}']), ""])


def evaluation_tables(plan: Plan, run: Run) -> str:
    """Where the evaluation job of ``run`` writes its own tables (results.md of its models only); the results of
    every fine-tuning run go to ROOT/eval, which the study report reads."""
    return str(Path(plan.root) / "eval_jobs" / run.name)


def evaluation_script(plan: Plan, run: Run, workdir: Path) -> str:
    s = plan.study.slurm
    exports = []
    for model in evaluated_models(plan, run):
        exports.append(f"[[ -f {shlex.quote(model.hf_path)}/config.json ]] || "
                       + " ".join(_shell(export_command(plan, model, repo=_REPO))))
    evaluate = _shell(evaluate_command(plan, run, num_workers=max(1, s.eval_gpus), repo=_REPO)
                      + ["--tables", evaluation_tables(plan, run)])
    return "\n".join(_header(plan, f"{plan.study.name}-eval-{run.name}", 1, s.eval_gpus, s.eval_time, True) + [
        f"# Study {plan.study.name}: export and fine-tune {run.name} "
        f"({', '.join(m.name for m in evaluated_models(plan, run))}); finished fine-tuning runs are skipped.",
        *_preamble(_repo_from(workdir)),
        "# Offline: submit.sh fetches the Hub's evaluation sets on the login node (tools/fetch_eval_datasets.py).",
        "export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}",
        *exports,
        _wrap(evaluate), ""])


def report_script(plan: Plan, workdir: Path, report_args: list[str]) -> str:
    """The chain's last job: the study report from every run and evaluation that finished."""
    s = plan.study.slurm
    study = plan.study.source
    try:
        study = study.relative_to(workdir)
    except ValueError:
        pass
    command = ["python", _REPO + "/tools/study_report.py", str(study), "--root", str(plan.root), *report_args]
    return "\n".join(_header(plan, f"{plan.study.name}-report", 1, 0, s.eval_time, False) + [
        f"# Study {plan.study.name}: the report, after every other job of the chain (afterany: it reports what "
        "finished).", *_preamble(_repo_from(workdir)), _wrap(_shell(command)), ""])


def _hub_datasets(plan: Plan) -> list[str]:
    """The evaluation's tasks read from the Hugging Face Hub (the paper's datasets), which the offline jobs need
    fetched first."""
    e = plan.study.evaluation
    return [] if e is None else [t for t in e.tasks if t in PAPER_DATASETS]


def submit_script(plan: Plan, workdir: Path, out_dir: Path) -> str:
    try:
        to_workdir = os.path.relpath(workdir, out_dir.resolve())
    except ValueError:  # another drive (Windows): no relative path
        to_workdir = str(workdir)
    logs = str(Path(plan.root) / "logs")
    lines = ["#!/bin/bash", f"# Submit study {plan.study.name}: every run of its plan, chained with afterok "
             "dependencies, then its report (python tools/plan_study.py --emit slurm wrote this folder).",
             "# Copy the folder with the repository: WORKDIR (the folder the commands run from, where the study was",
             "# planned) is found relative to this script; set WORKDIR, REPO or MEGAMLM_ENV to override.",
             "set -euo pipefail",
             'SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
             f'export WORKDIR=${{WORKDIR:-$(cd "$SCRIPTS"/{shlex.quote(to_workdir)} && pwd)}}',
             f"export REPO=${{REPO:-{_repo_from(workdir)}}}",
             f'export MEGAMLM_ENV=${{MEGAMLM_ENV:-$SCRIPTS/{ENV_FILE}}}',
             'source "$MEGAMLM_ENV"',
             "# Jobs start in WORKDIR (sbatch's submission folder); their logs go to a folder that exists before the",
             "# first job does (sbatch opens a job's log before its first line runs).",
             'cd "$WORKDIR"', f"LOGS={shlex.quote(logs)}", 'mkdir -p "$LOGS"']
    hub = _hub_datasets(plan)
    if hub:
        e = plan.study.evaluation
        fetch = ["python", _REPO + "/tools/fetch_eval_datasets.py", ",".join(hub)]
        if e.hf_datasets_dir:
            fetch += ["--save-to", str(plan.study.resolve(e.hf_datasets_dir))]
        lines += ["# The evaluation jobs run offline (HF_HUB_OFFLINE=1): fetch their datasets here, where the "
                  "network is",
                  "# (FETCH_EVAL_DATASETS=0 skips it when they are in the Hugging Face cache already).",
                  'if [[ "${FETCH_EVAL_DATASETS:-1}" != 0 ]]; then', "    " + " ".join(_shell(fetch)), "fi"]
    lines += ["# Submitted once: a study whose jobs are queued or running already would run them twice (or fail on",
              "# its own save folders' locks). Once they have ended, submitting again resumes what did not finish.",
              "JOB_NAMES=(", *[f"    {shlex.quote(name)}" for name in job_names(plan)], ")",
              'ours() { local n; for n in "${JOB_NAMES[@]}"; do [[ "$n" == "$1" ]] && return 0; done; return 1; }',
              'if ! queue=$(squeue -h -u "$(id -un)" -o "%j %i"); then',
              '    echo "submit.sh: squeue failed (its message above); nothing was submitted" >&2',
              "    exit 1",
              "fi",
              'queued=""',
              'while read -r name id; do',
              '    if [[ -n "$name" ]] && ours "$name"; then queued+=" $id"; fi',
              'done <<< "$queue"',
              'if [[ -n "$queued" ]]; then',
              f'    echo "submit.sh: study {plan.study.name} has jobs queued or running already (${{queued# }}); wait '
              'for them to end, or scancel$queued, then submit again" >&2',
              "    exit 2",
              "fi",
              "# sbatch's refusal (its message on stderr) stops this script: no job is submitted after it.",
              "# A job that depends on another dies with it (--kill-on-invalid-dep=yes): a failed or cancelled job",
              "# cancels what waits on it instead of leaving it pending forever, and the report job still runs.",
              "submit() {",
              "    local id",
              '    if ! id=$(sbatch --parsable --output="$LOGS/%x-%j.out" "$@"); then',
              '        echo "submit.sh: sbatch refused ${*: -1}; stopping, nothing after it was submitted" >&2',
              "        exit 1",
              "    fi",
              '    id=${id%%;*}',
              '    if [[ ! "$id" =~ ^[0-9]+$ ]]; then',
              '        echo "submit.sh: sbatch answered ${id@Q} for ${*: -1}, not a job id; stopping" >&2',
              "        exit 1",
              "    fi",
              '    echo "$id"',
              "}"]
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
                options[:0] = [f"--dependency=afterok:${dependency}", "--kill-on-invalid-dep=yes"]
            lines.append(f"{variable}=$(submit {' '.join(options)} \"$SCRIPTS\"/{shlex.quote(run.name + '.sbatch')})"
                         f"  # to step {end:,}")
            job_at[(run.name, end)] = variable
            dependency = variable
        last_job[run.name] = dependency
    finals = list(last_job.values())
    if plan.study.evaluation is not None:
        finals = []
        for run in plan.runs:
            variable = f"{job_variable(run.name)}_eval"
            lines.append(f"{variable}=$(submit --dependency=afterok:${last_job[run.name]} --kill-on-invalid-dep=yes "
                         f"\"$SCRIPTS\"/{shlex.quote(run.name + '.eval.sbatch')})")
            finals.append(variable)
    lines.append(f"report=$(submit --dependency=afterany:{':'.join('$' + v for v in finals)} "
                 "\"$SCRIPTS\"/report.sbatch)")
    jobs = sum(len(segments(plan, r)) for r in plan.runs)
    evals = len(plan.runs) if plan.study.evaluation is not None else 0
    lines += [f"echo \"submitted {jobs} pretraining jobs for {len(plan.runs)} runs, {evals} evaluation jobs and the "
              "report job ($report); logs in $WORKDIR/$LOGS\"", ""]
    return "\n".join(lines)


def emit_slurm(plan: Plan, out_dir: str | Path, workdir: str | Path | None = None, force: bool = False,
               report_args: list[str] = ()) -> list[Path]:
    """Write the scripts into ``out_dir``; commands run from ``workdir`` (default: the current folder), which the
    scripts find relative to their own folder. Scripts already there are refused unless ``force``; each file is
    written to a temporary name, then renamed. ``report_args``: the --set/--scale the plan was made with, for the
    report job. env.sh is written only where none exists (it holds the user's environment)."""
    out_dir = Path(out_dir)
    workdir = Path(workdir or os.getcwd()).resolve()
    check_slurm_values(plan.study.slurm)  # load_study checked them; a plan made in code is checked here
    check_time_limits(plan)
    check_script_path(workdir / plan.root / "logs", "the logs folder (--root, or the folder the scripts run from)")
    files = {f"{run.name}.sbatch": pretrain_script(plan, run, workdir) for run in plan.runs}
    if plan.study.evaluation is not None:
        files.update({f"{run.name}.eval.sbatch": evaluation_script(plan, run, workdir) for run in plan.runs})
    files["report.sbatch"] = report_script(plan, workdir, list(report_args))
    files["submit.sh"] = submit_script(plan, workdir, out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise StudyError(f"--emit slurm {out_dir}: that is a file, not a folder; choose a folder for the scripts")
    existing = [out_dir / name for name in files if (out_dir / name).exists()]
    if existing and not force:
        raise StudyError(f"{existing[0]} already exists ({len(existing)} of the {len(files)} scripts do); pass "
                         "--force to replace them, or choose another --emit folder")
    if not (out_dir / ENV_FILE).exists():
        files[ENV_FILE] = ENV_TEXT
    for missing in missing_inputs(plan, workdir):
        print(f"warning: the study's {missing} does not exist here ({workdir}); the jobs will need it on the "
              "cluster", file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    temporary = {out_dir / name: out_dir / f".{name}.tmp" for name in files}
    try:
        for (_path, tmp), text in zip(temporary.items(), files.values()):
            tmp.write_text(text)
            tmp.chmod(0o755)
    except OSError:
        for tmp in temporary.values():
            tmp.unlink(missing_ok=True)
        raise
    for path, tmp in temporary.items():
        os.replace(tmp, path)
    return list(temporary)

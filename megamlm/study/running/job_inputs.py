"""What a study's SLURM jobs need, checked when the scripts are emitted: time limits longer than the jobs' stop
warning, and the data, tokenizer and evaluation folders the jobs will read (missing ones are warned about: they may
exist only on the cluster)."""

from __future__ import annotations

from pathlib import Path

from megamlm.eval.local_data import default_data_dir
from megamlm.eval.paper_datasets import PAPER_DATASETS
from megamlm.eval.registry import AUSTEN_TASKS, LOCAL_TASKS
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.schema import StudyError

WARNING_S = 300
"""Seconds before a job's time limit at which its ranks get SIGTERM (``--signal=TERM@300``), save and requeue."""


def time_limit_seconds(limit: str) -> int | None:
    """A SLURM time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds; None for no limit."""
    if limit.lower() in ("unlimited", "infinite"):
        return None
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 3:  # H:M:S
        hours, minutes, seconds = parts
    else:  # M, M:SS
        hours, minutes, seconds = 0, parts[0], (parts + [0])[1]
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def check_time_limits(plan: Plan) -> None:
    """A requeued job's time limit must exceed its SIGTERM warning: a shorter one would be told to stop as it
    starts, save, requeue and start again, a loop of seconds of training per job."""
    s = plan.study.slurm
    for key in ("time", "eval_time"):
        seconds = time_limit_seconds(getattr(s, key))
        if seconds is not None and seconds <= WARNING_S:
            raise StudyError(f"slurm.{key} is {getattr(s, key)!r} ({seconds} s), not longer than the jobs' stop "
                             f"warning {WARNING_S} s before their limit (--signal=TERM@{WARNING_S}): every job would "
                             "stop and requeue as it starts; give it more than "
                             f"{WARNING_S // 60} minutes (e.g. \"1:00:00\")")


def missing_inputs(plan: Plan, workdir: Path) -> list[str]:
    """The data and tokenizer paths of the study that do not exist from ``workdir``: placeholders of a study file,
    or files that exist only on the cluster (a warning, not an error)."""
    missing = []
    for run in plan.runs:
        d = run.config.data
        for path in [*d.data_path, *d.valid_data_path]:
            try:
                float(path)  # a blend weight
                continue
            except ValueError:
                pass
            p = workdir / path
            if not any(Path(f"{p}{suffix}").exists() for suffix in ("", ".bin", ".idx")):
                missing.append(f"data {path}")
        if d.tokenizer_model and not (workdir / d.tokenizer_model).exists():
            missing.append(f"tokenizer {d.tokenizer_model}")
    return list(dict.fromkeys(missing + missing_evaluation_data(plan, workdir)))


def missing_evaluation_data(plan: Plan, workdir: Path) -> list[str]:
    """The folders the evaluation's tasks read that do not exist from ``workdir``: the local tasks' data folder
    (``evaluation.data_dir``, default ../shared/data beside the repository), the paper's saved datasets
    (``hf_datasets_dir``) and TYPE:PATH task folders. The Austen tasks read the package's own corpus."""
    e = plan.study.evaluation
    if e is None:
        return []
    needed = []
    if any(t in LOCAL_TASKS and t not in AUSTEN_TASKS for t in e.tasks):
        where = plan.study.resolve(e.data_dir) if e.data_dir else default_data_dir()
        needed.append(("evaluation data folder", where))
    if e.hf_datasets_dir and any(t in PAPER_DATASETS for t in e.tasks):
        needed.append(("evaluation datasets folder", plan.study.resolve(e.hf_datasets_dir)))
    for task in e.tasks:
        kind, sep, path = task.partition(":")
        if sep and task not in LOCAL_TASKS and task not in PAPER_DATASETS:
            needed.append((f"task folder of {kind}", path))
    return [f"{what} {path}" for what, path in needed if not (workdir / path).is_dir()]

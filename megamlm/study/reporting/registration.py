"""The report's statement of what was fixed before the run (issue 56): the commit the study file and its claims table
were last changed in, whether the working copy still matches that commit, the code's commit when the report was
written, the pretraining seeds and the tie rule. A confirmatory run commits its study file, tasks, rules and tie
rule before it starts; this section lets a reader check that the report's study file is that commit's."""

from __future__ import annotations

import subprocess
from pathlib import Path

from megamlm.study.planning.plan import Plan


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def file_commit(path: Path) -> str:
    """"commit HASH (DATE)" of the last commit that changed ``path``, with "uncommitted changes" where the working
    copy differs from it; "not committed" or "not in a git checkout" otherwise."""
    path = Path(path).resolve()
    found = _git(path.parent, "log", "-1", "--format=%H %cI", "--", path.name)
    if found is None:
        return "not in a git checkout"
    if not found:
        return "not committed"
    commit, date = found.split(" ", 1)
    changed = _git(path.parent, "status", "--porcelain", "--", path.name)
    return f"commit {commit} ({date})" + (", with uncommitted changes since" if changed else "")


def registration_section(plan: Plan) -> str:
    study = plan.study
    source = Path(study.source)
    lines = [f"- Study file `{source.name}`: {file_commit(source)}."]
    if study.claims:
        lines.append(f"- Claims table `{Path(study.claims).name}`: {file_commit(study.resolve(study.claims))}.")
    head = _git(source.resolve().parent, "rev-parse", "HEAD")
    if head:
        lines.append(f"- The code when this report was written: commit {head}.")
    seeds = sorted({run.seed for run in plan.runs})
    e = study.evaluation
    lines.append(f"- Pretraining seeds: {', '.join(map(str, seeds))}."
                 + (f" Fine-tuning LRs tied on validation: `{e.tie_rule}` (fixed in the study file; every claim is "
                    "also decided under the other rules, below)." if e else ""))
    return "\n".join(lines) + "\n"

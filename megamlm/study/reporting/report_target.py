"""Where a study report is written, and which files it may replace: the study's own report, a rehearsal's
elsewhere, never a file that is not a report."""

from __future__ import annotations

from pathlib import Path

from megamlm.errors import UserError
from megamlm.study.planning.plan import Plan
from megamlm.study.running.commands import REPO


def own_report_path(plan: Plan) -> Path:
    """Where the study's report goes: the study file's ``report`` (before any --set), else ROOT/report/REPORT.md
    under the study's default root."""
    study = plan.study
    return study.resolve(study.own_report) if study.own_report else Path(study.default_root) / "report" / "REPORT.md"


def _same_folder(a: Path, b: Path) -> bool:
    return a.parent.resolve() == b.parent.resolve()


def report_path(plan: Plan) -> Path:
    """The study's report path (the ``report`` key, else ROOT/report/REPORT.md); for a rehearsal (--scale < 1) a
    ``report`` given with --set away from the study's own report, else ROOT/rehearsal/REPORT.md."""
    study = plan.study
    if study.is_rehearsal:
        if study.report and not _same_folder(study.resolve(study.report), own_report_path(plan)):
            return study.resolve(study.report)
        return Path(plan.root) / "rehearsal" / "REPORT.md"
    return study.resolve(study.report) if study.report else Path(plan.root) / "report" / "REPORT.md"


def shown_path(path: Path) -> str:
    """A path as a command from the repository root would write it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


REPORT_TITLE = "# Study `"
"""How every report this module writes begins: a file at the report's path that does not is someone else's."""


def check_report_target(path: Path, force: bool = False) -> None:
    """The report replaces an earlier report (it is rewritten from the runs at any time), never another file."""
    if path.is_dir():
        raise UserError(f"report path {path} is a folder; pass a file name (e.g. {path / 'REPORT.md'})")
    if path.exists() and not force:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                head = f.read(len(REPORT_TITLE))
        except OSError:
            head = ""
        if head != REPORT_TITLE:
            raise UserError(f"{path} exists and is not a study report; pass --force to replace it, or choose "
                            "another --output")


def check_rehearsal_target(plan: Plan, path: Path) -> None:
    """A rehearsal never writes into the folder of the study's own report (its figures would replace the study's)."""
    if plan.study.is_rehearsal and _same_folder(path, own_report_path(plan)):
        raise UserError(f"a rehearsal (--scale {plan.study.scale:g}) does not write its report to {path}: that is "
                        f"the folder of the study's own report ({own_report_path(plan)}) and its figures; write it "
                        f"elsewhere (the default is {Path(plan.root) / 'rehearsal' / 'REPORT.md'})")

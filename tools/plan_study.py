"""Plan a study (a grid of encoders written once in a YAML file) as runs that share their common prefixes, price it,
and launch it.

    python tools/plan_study.py examples/studies/paper_610m.yaml                        # the plan and its cost
    python tools/plan_study.py examples/studies/paper_610m.yaml --tokens-per-second 90000
    python tools/plan_study.py examples/studies/paper_610m.yaml --emit slurm slurm/paper_610m   # sbatch scripts
    python tools/plan_study.py examples/studies/cpu_miniature.yaml --run               # run it on this machine

Each run's row: where it starts (scratch, a parent's checkpoint at a branch step, or a finished parent it
continues), its objective schedule, the steps it trains itself, their tokens and GPU-hours; then the total
against training every model from scratch. ``--run`` trains, exports and fine-tunes every run in dependency
order (a second launch skips finished runs and resumes interrupted ones; a failed run stops its descendants),
then writes the results table and the study report under the study's root. Commands are launched from the
current folder (run this from the repository root). See examples/studies/README.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.errors import UserError, exit_line  # noqa: E402
from megamlm.study.planning.checks import check_run_needs  # noqa: E402
from megamlm.study.planning.cost import throughput_for  # noqa: E402
from megamlm.study.planning.load import load_study  # noqa: E402
from megamlm.study.planning.plan import build_plan  # noqa: E402
from megamlm.study.planning.schema import StudyError  # noqa: E402
from megamlm.study.planning.table import plan_table  # noqa: E402
from megamlm.study.reporting.report import write_report  # noqa: E402
from megamlm.study.running.commands import REPO, config_file_lines, pretrain_command  # noqa: E402
from megamlm.study.running.local import LocalRunner, outcome_table, subprocess_executor  # noqa: E402
from megamlm.study.running.slurm import emit_slurm  # noqa: E402

EMIT_KINDS = ("slurm", "local")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("study", help="study YAML file (see examples/studies/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="replace a study key before planning (dotted key, YAML value), e.g. --set seeds=[1]")
    p.add_argument("--scale", type=float,
                   help="multiply every step count by this factor in (0, 1] (a smaller copy: below 1 a "
                        "rehearsal, whose report tests nothing and goes to ROOT/rehearsal/REPORT.md)")
    p.add_argument("--root", help="folder of the runs, exports and evaluations (default: the study's root, "
                                  "else runs/NAME)")
    p.add_argument("--tokens-per-second", action="append", default=[], metavar="[SIZE=]N",
                   help="training tokens/s of one GPU, for every size or for SIZE (wins over the study's cost)")
    p.add_argument("--benchmark", action="append", default=[], metavar="FILE",
                   help="a benchmarks/train_step.py --json result priced for its preset and objective")
    p.add_argument("--emit", nargs="+", metavar=("KIND", "DIR"),
                   help="slurm DIR: one sbatch script per run and submit.sh, chained with afterok; "
                        "local [FILE]: the commands in dependency order as one shell script (stdout without FILE)")
    p.add_argument("--force", action="store_true", help="--emit: replace scripts that already exist")
    p.add_argument("--run", action="store_true", help="execute the plan here, then write the results and report")
    p.add_argument("--nproc-per-node", type=int, default=1, help="--run: processes per pretraining run (torchrun)")
    p.add_argument("--eval-workers", type=int, default=1, help="--run: fine-tuning processes in parallel")
    p.add_argument("--eval-devices", help="--run: comma-separated devices of the fine-tuning workers")
    p.add_argument("--quiet", action="store_true", help="--run: keep the commands' output in the logs only")
    return p


def local_script(plan, study_path: str) -> str:
    lines = ["#!/bin/bash", f"# Study {plan.study.name}: its pretraining runs in dependency order (each resumes when "
             "relaunched).", f"# Exports, fine-tuning, skip-finished and failure handling: "
             f"python tools/plan_study.py {study_path} --run", "set -euo pipefail", f"cd {shlex.quote(os.getcwd())}"]
    for run in plan.runs:
        lines += config_file_lines(plan, run)
        lines.append(" ".join(shlex.quote(part) for part in pretrain_command(plan, run, repo=str(REPO))))
    return "\n".join(lines) + "\n"


def write_script(path: Path, text: str, force: bool) -> None:
    """``--emit local FILE``: refused where FILE exists unless --force; written to a temporary name, then renamed."""
    if path.is_dir():
        raise StudyError(f"--emit local {path}: that is a folder; pass a file name for the script")
    if path.exists() and not force:
        raise StudyError(f"{path} already exists; pass --force to replace it, or choose another --emit local file")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.chmod(0o755)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.emit and (args.emit[0] not in EMIT_KINDS or len(args.emit) > 2
                          or (args.emit[0] == "slurm" and len(args.emit) != 2)):
            raise StudyError(f"--emit {' '.join(args.emit)}: write --emit slurm DIR or --emit local [FILE]")
        if args.nproc_per_node < 1 or args.eval_workers < 1:
            raise StudyError("--nproc-per-node and --eval-workers must be at least 1")
        study = load_study(args.study, args.overrides, args.scale)
        plan = build_plan(study, args.root)
        if args.run:  # before anything is trained: the evaluations' packages and data
            check_run_needs(study)
        # `--emit local` without FILE writes the script to standard output: the table goes to standard error, so
        # that `> run.sh` is the script alone
        script_to_stdout = bool(args.emit) and args.emit[0] == "local" and len(args.emit) == 1
        print(plan_table(plan, throughput_for(study, args.tokens_per_second, args.benchmark)),
              file=sys.stderr if script_to_stdout else sys.stdout)
        if args.emit and args.emit[0] == "slurm":
            # The report job is planned as this command was: the same --set and --scale.
            report_args = [word for override in args.overrides for word in ("--set", override)]
            report_args += ["--scale", str(args.scale)] if args.scale is not None else []
            written = emit_slurm(plan, args.emit[1], force=args.force, report_args=report_args)
            print(f"wrote {len(written)} scripts to {args.emit[1]}; submit with: bash {args.emit[1]}/submit.sh")
        elif args.emit:
            text = local_script(plan, args.study)
            if len(args.emit) == 2:
                write_script(Path(args.emit[1]), text, args.force)
                print(f"wrote {args.emit[1]}")
            else:
                print(text, end="")
        if args.run:
            return run_plan(plan, args)
    except (UserError, OSError) as error:
        return exit_line(error)
    return 0


def run_plan(plan, args) -> int:
    runner = LocalRunner(plan, subprocess_executor(echo=not args.quiet), nproc_per_node=args.nproc_per_node,
                         eval_workers=args.eval_workers, eval_devices=args.eval_devices)
    outcomes = runner.run()
    print(outcome_table(outcomes))
    report = write_report(plan)
    print(f"report: {report}")
    failed = [o for o in outcomes if o.state in ("failed", "blocked")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

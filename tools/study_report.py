"""Write a study's report from the runs and evaluations that exist under its root (any time, partial or whole).

    python tools/study_report.py examples/studies/cpu_miniature.yaml
    python tools/study_report.py examples/studies/paper_610m.yaml --root /ckpt/paper_610m --output report/610m.md

The report (Markdown, figures in figures/ beside it; figures need matplotlib) holds the plan, the validation MLM
loss, MLM accuracy and CLM loss of every arm against steps, the final validation scores with their mean and 95%
interval over seeds and which arm differences exceed the seed spread, then, from the fine-tuning results, a table
per task family, the arms' scores over pretraining seeds, score against the CLM fraction per budget, and score
against pretraining steps (evaluated intermediate checkpoints). Pass the same --set/--scale/--root as the run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.errors import UserError  # noqa: E402
from megamlm.study.plan import build_plan  # noqa: E402
from megamlm.study.report import has_results, report_path, write_report  # noqa: E402
from megamlm.study.schema import StudyError, load_study  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", help="study YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="the study keys the runs were planned with (as tools/plan_study.py --set)")
    p.add_argument("--scale", type=float, help="the --scale the runs were planned with")
    p.add_argument("--root", help="folder of the runs (default: the study's root, else runs/NAME)")
    p.add_argument("--output", help="report file (default: the study's report, else ROOT/report/REPORT.md)")
    p.add_argument("--no-figures", action="store_true", help="tables only")
    args = p.parse_args(argv)
    try:
        plan = build_plan(load_study(args.study, args.overrides, args.scale), args.root)
        output = Path(args.output) if args.output else report_path(plan)
        if output.exists() and not has_results(plan):
            # e.g. the committed report of a study, asked for in a fresh clone where none of its runs exist
            raise StudyError(f"no run of study {plan.study.name!r} has results under {plan.root}, and {output} "
                             "already holds a report: not replacing it with an empty one. Pass --root where the "
                             "runs are (and the --set/--scale they were planned with), or --output elsewhere")
        print(write_report(plan, output, figures=not args.no_figures))
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

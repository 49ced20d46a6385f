"""Write a study's report from the runs and evaluations that exist under its root (any time, partial or whole).

    python tools/study_report.py examples/studies/cpu_miniature.yaml
    python tools/study_report.py examples/studies/paper_610m.yaml --root /ckpt/paper_610m --output report/610m.md

The report (Markdown, figures in figures/ beside it; figures need matplotlib) holds the plan, the validation MLM
loss, MLM accuracy and CLM loss of every arm against steps, the final validation scores with their mean and 95%
interval over seeds and the differences between arms (descriptive: unadjusted 95% Welch interval and p-value,
nothing called significant), then, from the fine-tuning results, a table per task family, the
arms' scores over pretraining seeds, score against the CLM fraction per budget, score against pretraining
steps (evaluated intermediate checkpoints), score against the fine-tuning LR and the stability loss per arm
(with 2 or more LRs), the continued-pretraining gain against continued steps (with continuations), and the
paper's claims (a)-(e) answered by one pre-registered permutation test each, Holm over the claims. Pass the same
--set/--scale/--root as the run. With --scale < 1 the report is a rehearsal's: headed as one, without tests,
written to ROOT/rehearsal/REPORT.md by default and never into the folder of the study's own report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.errors import UserError, exit_line  # noqa: E402
from megamlm.study.planning.load import load_study  # noqa: E402
from megamlm.study.planning.plan import build_plan  # noqa: E402
from megamlm.study.planning.schema import StudyError  # noqa: E402
from megamlm.study.reporting.report import has_results, write_report  # noqa: E402
from megamlm.study.reporting.report_target import check_report_target, report_path  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("study", help="study YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="the study keys the runs were planned with (as tools/plan_study.py --set)")
    p.add_argument("--scale", type=float, help="the --scale the runs were planned with")
    p.add_argument("--root", help="folder of the runs (default: the study's root, else runs/NAME)")
    p.add_argument("--output", help="report file (default: the study's report, else ROOT/report/REPORT.md)")
    p.add_argument("--no-figures", action="store_true", help="tables only")
    p.add_argument("--force", action="store_true", help="replace an --output file that is not a study report")
    args = p.parse_args(argv)
    try:
        plan = build_plan(load_study(args.study, args.overrides, args.scale), args.root)
        output = Path(args.output) if args.output else report_path(plan)
        check_report_target(output, args.force)  # a file that is not a report is never replaced without --force
        if output.exists() and not has_results(plan):
            # e.g. the committed report of a study, asked for in a fresh clone where none of its runs exist
            raise StudyError(f"no run of study {plan.study.name!r} has results under {plan.root}, and {output} "
                             "already holds a report: not replacing it with an empty one. Pass --root where the "
                             "runs are (and the --set/--scale they were planned with), or --output elsewhere")
        print(write_report(plan, output, figures=not args.no_figures, force=args.force))
    except (UserError, OSError) as error:
        return exit_line(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())

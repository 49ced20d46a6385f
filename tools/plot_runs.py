"""Overlay runs of a study from their metrics.jsonl files (needs matplotlib).

    python tools/plot_runs.py ckpt/610m/clm_then_mlm_12k ckpt/610m/mlm_12k --output figures/

writes validation_vs_steps.png and validation_vs_tokens.png (validation MLM and CLM loss of every run) and
training_loss.png (training loss; each phase boundary of a run, or its objective switch, dashed and labelled with
what changes there: objective, length, data, mask, ...) into --output (default: run_plots/).
RUN_DIR is a run's --save folder; a branch or continuation of another plotted run is drawn from where it leaves
that run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.errors import UserError, exit_line  # noqa: E402
from megamlm.training.run_curves import DEFAULT_OUTPUT, plot_runs  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="--save folders of the runs to overlay")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="folder for the PNG files (default: "
                                                                 f"{DEFAULT_OUTPUT}/)")
    args = parser.parse_args(argv)
    try:
        written = plot_runs(args.runs, args.output)
        for path in written:
            print(path)
        print(f"wrote {len(written)} figures to {Path(args.output)}/")
    except (UserError, OSError) as error:
        return exit_line(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())

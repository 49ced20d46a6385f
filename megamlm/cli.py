"""The pretrain command line: parse, validate, train.

Exit codes: 0 done (or stopped cleanly by a signal / --exit-interval, with a checkpoint); 2 a user error
(one line naming the fix, nothing damaged); 3 the run stopped on persistent non-finite losses/gradients.
"""

from __future__ import annotations

import sys

from megamlm.config import parse_args
from megamlm.errors import UserError
from megamlm.hf.init_from import adopt_hf_shape
from megamlm.parallel.dims import dims_from_config
from megamlm.parallel.dry_run import dry_run_report
from megamlm.parallel.runtime import stop_parallel
from megamlm.training.guards import NonFiniteError
from megamlm.training.trainer import pretrain


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(argv)
        if cfg.parallel.dry_run:  # a Hugging Face --init-from model lends its shape (config and tokenizer only)
            adopt_hf_shape(cfg)
        dims_from_config(cfg)  # the layout against the world size, before any work
        if cfg.parallel.dry_run:  # layout check and memory estimate only: no process group, no data, no GPU
            print(dry_run_report(cfg))
            return 0
        pretrain(cfg)
        stop_parallel()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except NonFiniteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    return 0

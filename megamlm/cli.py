"""The pretrain command line: parse, validate, train.

Exit codes: 0 done (or stopped cleanly by a signal / --exit-interval, with a checkpoint); 2 a user error
(one line naming the fix, nothing damaged); 3 the run stopped on persistent non-finite losses/gradients.
"""

from __future__ import annotations

import signal
import sys

from megamlm.config import Config, parse_args
from megamlm.env_args import command_line
from megamlm.errors import UserError, exit_line
from megamlm.hf.init_from import adopt_init_from
from megamlm.log import log
from megamlm.parallel.dry_run import dry_run_report
from megamlm.parallel.runtime import stop_parallel
from megamlm.training.nonfinite import NonFiniteError
from megamlm.training.startup import dims_from_config
from megamlm.training.trainer import pretrain


def main(argv: list[str] | None = None) -> int:
    restore_stop_signals()
    try:
        cfg = load_config(command_line("pretrain", argv, say=log))
        if cfg.parallel.dry_run:  # layout check and memory estimate only: no process group, no data, no GPU
            print(dry_run_report(cfg, dims_from_config(cfg)))
            return 0
        pretrain(cfg)
        stop_parallel()
    except (UserError, OSError) as err:
        return exit_line(err)
    except NonFiniteError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:  # Ctrl-C before training started (during it, the trainer saves and returns)
        print("interrupted before training started; nothing was written to --save", file=sys.stderr)
        return 130
    return 0


def load_config(argv: list[str] | None = None) -> Config:
    """pretrain.py's flags -> the resolved, validated, frozen Config; a Hugging Face --init-from model lends its
    shape and tokenizer first (megamlm/config/resolve.py)."""
    return parse_args(argv, adopt=adopt_init_from)


def restore_stop_signals() -> None:
    """Give SIGINT/SIGTERM/SIGUSR1 their default action where this process inherited them ignored (the launch
    scripts start torchrun so; see examples/torchrun_forward_signals.sh): a stop request before training starts
    then stops the process at once, and the trainer installs its saving handlers when training starts."""
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
                signal.SIGUSR1: signal.SIG_DFL}
    for signum, default in defaults.items():
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, default)

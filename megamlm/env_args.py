"""Extra flags from the environment: ``MEGAMLM_<PROGRAM>_ARGS`` is appended to a program's command line.

``MEGAMLM_PRETRAIN_ARGS="--train-iters 20"`` adds those flags to every ``pretrain.py`` launch, after the
command's own flags, so they win (also in processes started by torchrun, srun or a script); likewise
``MEGAMLM_EVALUATE_ARGS`` for ``tools/evaluate.py``. The documentation test runs the documented commands scaled down
this way, without editing them; a job script can set site-wide flags the same way. A program that takes flags from
the environment says so.
"""

from __future__ import annotations

import os
import shlex
import sys

from megamlm.errors import UserError


def variable(program: str) -> str:
    return f"MEGAMLM_{program.upper()}_ARGS"


def command_line(program: str, argv: list[str] | None = None, say=None) -> list[str]:
    """``argv`` (default: this process's arguments) followed by the flags in ``MEGAMLM_<PROGRAM>_ARGS``.

    Only a real command line (``argv`` None) takes them: code calling a program's ``main(argv)`` gets exactly
    ``argv``.
    """
    if argv is not None:
        return list(argv)
    try:
        extra = shlex.split(os.environ.get(variable(program), ""))
    except ValueError as err:  # an unbalanced quote or a trailing backslash
        raise UserError(f"{variable(program)} does not parse as shell words ({err}); balance its quotes, e.g. "
                        f"{variable(program)}=\"--train-iters 20\"") from None
    if extra:
        (say or (lambda line: print(line, file=sys.stderr, flush=True)))(
            f"{variable(program)} adds: {shlex.join(extra)}")
    return sys.argv[1:] + extra

"""Which megamlm modules a launch passes through before its first step, and how often it returns to one it left.

    python benchmarks/start_path.py             # a fresh start, a resume and a branch of a tiny run

From ``cli.main`` to ``Trainer.train``: the modules of the megamlm functions as each is first called (a function
called again, in a loop or later, adds nothing), consecutive calls within one module counted once. A *return* is a
call into a module the launch had already left: the back-and-forth a newcomer follows when reading how a run starts.
The resume and the branch start from a checkpoint the script trains first (2 of 4 steps), in a temporary folder.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from collections import Counter
from pathlib import Path

from megamlm import cli

ROOT = str(Path(cli.__file__).resolve().parent)
FLAGS = ["--num-layers", "1", "--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads", "2",
         "--num-query-groups", "2", "--seq-length", "64", "--global-batch-size", "8", "--micro-batch-size", "8",
         "--train-iters", "4"]


class _Started(Exception):
    """Raised at ``Trainer.train``'s first line: the start is over."""


def start_path(argv: list[str]) -> list[str]:
    """The megamlm modules of ``pretrain.py argv``'s functions in the order each is first called, up to
    ``Trainer.train`` (consecutive repeats collapsed)."""
    seen_code, path = set(), []

    def profile(frame, event, arg):
        if event != "call" or frame.f_code in seen_code:
            return
        seen_code.add(frame.f_code)
        filename = frame.f_code.co_filename
        if not filename.startswith(ROOT):
            return
        module = "megamlm" + filename[len(ROOT):].removesuffix(".py").replace("/", ".")
        if module == "megamlm.training.trainer" and frame.f_code.co_name == "train":
            raise _Started
        if not path or path[-1] != module:
            path.append(module)

    sys.setprofile(profile)
    try:
        status = cli.main(argv)
    except _Started:
        status = 0
    finally:
        sys.setprofile(None)
    if status:
        raise SystemExit(f"pretrain.py {' '.join(argv)} exited {status} (its error is on standard error)")
    return path


def returns(path: list[str]) -> Counter:
    """How often the path comes back to each module it had left."""
    seen, back = set(), Counter()
    for module in path:
        if module in seen:
            back[module] += 1
        seen.add(module)
    return back


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False).parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()) as runs_log:
        parent = Path(tmp) / "parent"
        if cli.main([*FLAGS, "--save", str(parent), "--exit-interval", "2"]):
            raise SystemExit(f"the parent run failed:\n{runs_log.getvalue()}")
        launches = {"fresh": [*FLAGS, "--save", str(Path(tmp) / "fresh")],
                    "resume": [*FLAGS, "--save", str(parent)],
                    "branch": [*FLAGS, "--objective", "mlm_then_clm", "--switch-step", "2", "--load", str(parent),
                               "--save", str(Path(tmp) / "branch")]}
        rows = []
        for name, argv in launches.items():
            path = start_path(argv)
            back = returns(path)
            top = ", ".join(f"{module.removeprefix('megamlm.')} {n}" for module, n in back.most_common(5))
            rows.append(f"{name:7s} {len(set(path)):3d} modules, {sum(back.values()):3d} returns ({top})")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

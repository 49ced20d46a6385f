"""Which megamlm files one optimizer step crosses, batch to update (one process, no pipeline), as it runs.

    python benchmarks/step_path.py            # the trainer's default (CPU: the host reads every step)
    python benchmarks/step_path.py --defer    # the host reads the step numbers only at log lines (the GPU path)

A tiny run traces its second step (the first one warms up) from ``Trainer.run_step`` until ``train_step`` returns
(what follows, the progress counter and the accounting, comes after the update). It prints every megamlm file whose
Python code ran, and the *stops*: the files that the step's sequence itself (``run_step`` and training/step.py)
calls into, each decided by the nearest megamlm caller of the call. An autograd Function's ``backward`` is marked:
the engine runs it inside ``loss.backward()``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

from megamlm.config import parse_args
from megamlm.training import trainer

ROOT = str(Path(trainer.__file__).resolve().parents[1])
SEQUENCE = {"training/trainer.py": {"run_step", "<listcomp>", "<genexpr>"}, "training/step.py": None}
"""The files holding the step's sequence, with the functions of it (None: all of them)."""
FLAGS = ["--num-layers", "1", "--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads", "2",
         "--num-query-groups", "2", "--seq-length", "64", "--global-batch-size", "8", "--micro-batch-size", "4",
         "--lr-warmup-iters", "1", "--lr-wsd-decay-iters", "1", "--train-iters", "3"]


def trace_second_step(defer: bool, data_cache: str | None = None) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """({file: functions that ran}, {stop file: functions the sequence called there}), paths relative to ROOT.

    ``data_cache``: where the bundled corpus is tokenized (kept; None: a temporary folder, tokenized afresh)."""
    ran: dict[str, set[str]] = {}
    stops: dict[str, set[str]] = {}
    updated = [False]

    def profile(frame, event, arg):
        if event == "return" and frame.f_code.co_name == "train_step":
            updated[0] = True
        if updated[0] or event != "call" or not frame.f_code.co_filename.startswith(ROOT):
            return
        name = os.path.relpath(frame.f_code.co_filename, ROOT)
        ran.setdefault(name, set()).add(frame.f_code.co_name)
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(ROOT):
            caller = caller.f_back
        if caller is None:
            return
        caller_file = os.path.relpath(caller.f_code.co_filename, ROOT)
        functions = SEQUENCE.get(caller_file, ())
        if caller_file != name and (functions is None or caller.f_code.co_name in functions):
            what = frame.f_code.co_name
            stops.setdefault(name, set()).add(what + (" (autograd)" if what == "backward" else ""))

    real = trainer.Trainer.run_step

    def traced(self, loaded):
        if self.progress.step != 1:
            return real(self, loaded)
        sys.setprofile(profile)
        try:
            return real(self, loaded)
        finally:
            sys.setprofile(None)

    trainer.Trainer.run_step = traced
    try:
        with tempfile.TemporaryDirectory() as scratch:
            cfg = parse_args(FLAGS + ["--data-cache-path", data_cache or scratch])
            trainer.pretrain(cfg, read_on_device=defer or None)
    finally:
        trainer.Trainer.run_step = real
    return ran, stops


def crossed_files(ran: dict[str, set[str]], stops: dict[str, set[str]]) -> list[str]:
    """The step's sequence and its stops: the files a reader of one step opens (at most 6, tests/unit/training/
    test_step_path.py)."""
    return sorted(set(stops) | {name for name in SEQUENCE if name in ran})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--defer", action="store_true", help="read the step numbers only at log lines")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ran, stops = trace_second_step(args.defer)
    print(f"files whose code ran: {len(ran)}")
    for name in sorted(ran):
        print(f"  {name}: {', '.join(sorted(ran[name]))}")
    crossed = crossed_files(ran, stops)
    print(f"the step's sequence and its stops: {len(crossed)}")
    for name in crossed:
        print(f"  {name}: {', '.join(sorted(stops.get(name, ()))) or '(the sequence)'}")


if __name__ == "__main__":
    main()

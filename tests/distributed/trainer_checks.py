"""Worker side of test_trainer_layouts.py: the real trainer (``pretrain``) on each spawned rank."""

from __future__ import annotations

import json
from pathlib import Path

# The tiny preset shrunk further so that a few steps take seconds on 2 CPU cores.
FLAGS = ["--model", "tiny", "--hidden-size", "64", "--ffn-hidden-size", "128", "--seq-length", "32",
         "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "4", "--objective", "clm_then_mlm",
         "--switch", "0.5", "--lr-warmup-iters", "1", "--lr-wsd-decay-iters", "1", "--log-interval", "1"]


def run_pretrain(argv: list[str]) -> dict:
    from megamlm.config import parse_args
    from megamlm.training.recorder import StepRecorder
    from megamlm.training.trainer import pretrain

    recorder = StepRecorder()
    result = pretrain(parse_args([str(a) for a in argv]), on_step=recorder)
    return {"losses": recorder.losses, "objectives": recorder.objectives, "sample_ids": recorder.sample_ids,
            "switch_step": result.switch_step, "start_step": result.start_step}


def pretrain_on_rank(rank: int, world: int, argv: list[str], out_dir: str) -> None:
    record = run_pretrain(argv)
    path = Path(out_dir) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.rename(path)


def read_ranks(out_dir, world: int) -> list[dict]:
    records = []
    for r in range(world):
        raw = json.loads((Path(out_dir) / f"rank{r}.json").read_text())
        records.append({key: ({int(k): v for k, v in value.items()} if isinstance(value, dict) else value)
                        for key, value in raw.items()})
    return records

"""Worker side of test_trainer_layouts.py: the real trainer (``pretrain``) on each spawned rank."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import SPLITTABLE_SHAPE

# The tiny preset shrunk further so that a few steps take seconds on 2 CPU cores.
FLAGS = [*SPLITTABLE_SHAPE, "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "4",
         "--objective", "clm_then_mlm", "--switch", "0.5", "--lr-warmup-iters", "1", "--lr-wsd-decay-iters", "1",
         "--log-interval", "1"]


def run_pretrain(argv: list[str]) -> dict:
    from step_recorder import StepRecorder

    from megamlm.config import parse_args
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


def pretrain_poisoned_on_rank(rank: int, world: int, argv: list[str], out_dir: str, poison: str, poison_step: int,
                              poison_rank: int, read_on_device: bool) -> None:
    """The real trainer with one rank's numbers broken at ``poison_step`` while the other ranks' stay finite:
    ``nan``, a NaN forward; ``huge``, 1e20 added to one of this rank's local gradient shards just before the global
    norm (finite, but its square overflows). Records how many steps the run skipped and whether the device-side
    skip was used."""
    from megamlm.config import parse_args
    from megamlm.training import step as step_module
    from megamlm.training import trainer

    cfg = parse_args([str(a) for a in argv])
    real_step, real_streak, real_norm = trainer.train_step, trainer.skip_streak, step_module.global_grad_norm
    current, streaks = [0], []

    def poisoned_step(setup, optimizer, micro_batches, *args, **kwargs):
        current[0] = micro_batches[0].sample_ids[0] // cfg.training.global_batch_size + 1
        handle = None
        if poison == "nan" and current[0] == poison_step and rank == poison_rank:
            handle = setup.pm.model.register_forward_hook(lambda module, inputs, out: out * float("nan"))
        try:
            return real_step(setup, optimizer, micro_batches, *args, **kwargs)
        finally:
            if handle is not None:
                handle.remove()

    def poisoned_norm(setup):
        if poison == "huge" and current[0] == poison_step and rank == poison_rank:
            grad = next(p.grad for p in setup.parameters if p.grad is not None)
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            local.view(-1)[0] += 1e20
        return real_norm(setup)

    def recorded_streak(*args, **kwargs):
        streaks.append(real_streak(*args, **kwargs))
        return streaks[-1]

    trainer.train_step, trainer.skip_streak = poisoned_step, recorded_streak
    step_module.global_grad_norm = poisoned_norm
    try:
        result = trainer.pretrain(cfg, read_on_device=read_on_device)
    finally:
        trainer.train_step, trainer.skip_streak = real_step, real_streak
        step_module.global_grad_norm = real_norm
    record = {"total_skipped": result.total_skipped, "skip_on_device": streaks[-1] is not None}
    path = Path(out_dir) / f"rank{rank}.json"
    path.with_suffix(".tmp").write_text(json.dumps(record))
    path.with_suffix(".tmp").rename(path)

"""The training loop: plan -> (resume check) -> build -> (restore) -> steps -> checkpoints.

Read top to bottom: ``_pretrain`` resolves the run and checks any checkpoint it continues (all user errors
surface here, before any work), builds this rank's share of the model in the run's layout (one process is
the trivial layout), restores the checkpoint's state, then ``_train`` runs one optimizer step per global
batch, switching objective where the ObjectiveSchedule says so. The loop keeps no per-step history: tests
and tools observe steps through the ``on_step`` callback.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from megamlm.checkpoint import load_model_weights, resolve_checkpoint
from megamlm.checkpoint.lock import lock_save_folder
from megamlm.checkpoint.manager import CheckpointManager
from megamlm.config import Config
from megamlm.data import GlobalBatchSampler, MicroBatchLoader, build_train_dataset
from megamlm.hf.init_from import adopt_hf_init_from, warn_if_context_shorter
from megamlm.log import log, rank
from megamlm.model.attention_backends import detect_optional_extras
from megamlm.model.transformer import Transformer, count_parameters
from megamlm.objectives import ObjectiveSchedule
from megamlm.parallel.parallelize import ParallelModel, parallelize
from megamlm.parallel.runtime import start_parallel
from megamlm.training.guards import NonFiniteGuard
from megamlm.training.metrics import IntervalMeter, TensorBoardWriter, format_duration
from megamlm.training.optimizer import build_optimizer, set_hyperparameters
from megamlm.training.progress import TrainProgress
from megamlm.training.resume import plan_resume
from megamlm.training.run_record import build_run_record, write_run_record
from megamlm.training.setup import RunPlan, plan_run
from megamlm.training.signals import ExitSignalHandler
from megamlm.training.startup_notes import first_step_note, memory_note
from megamlm.training.step import train_step
from megamlm.training.stopping import StopPolicy


@dataclass
class StepReport:
    """One finished step, as the ``on_step`` callback sees it."""

    step: int
    objective: str
    loss: float
    grad_norm: float
    lr: float
    applied: bool
    sample_ids: list[int]
    """The global sample ids this rank trained on."""


@dataclass
class RunResult:
    """What a launch did, in summary."""

    start_step: int
    last_step: int
    switch_step: int | None
    resumed_from: Path | None = None
    stop_reason: str | None = None
    """Why the run stopped before --train-iters (signal, --exit-interval, --exit-duration-in-mins)."""
    last_checkpoint: Path | None = None
    total_skipped: int = 0


def pretrain(cfg: Config, on_step: Callable[[StepReport], None] | None = None) -> RunResult:
    """Train; SIGTERM/SIGUSR1/SIGINT during the run save a checkpoint and return early (training/signals.py), and
    the --save folder is locked for the run (checkpoint/lock.py)."""
    with ExitSignalHandler() as signals, ExitStack() as held:
        return _pretrain(cfg, signals, held, on_step)


def _pretrain(cfg: Config, signals: ExitSignalHandler, held: ExitStack, on_step) -> RunResult:
    t, c = cfg.training, cfg.checkpoint
    if c.init_from:  # a Hugging Face model is imported once and lends the run its shape and tokenizer
        adopt_hf_init_from(cfg)
    plan = plan_run(cfg)
    mesh, device = start_parallel(plan.dims, plan.device)
    record = build_run_record(cfg, plan, plan.dims.world_size)
    held.enter_context(lock_save_folder(c.save))  # one run per --save folder, before its checkpoints are read
    resume = plan_resume(cfg, record)  # every difference from the checkpoint is honoured or refused here
    if c.init_from and resume is None:
        resolve_checkpoint(c.init_from)  # fail on a bad path before any work
    for note in resume.notes if resume else []:
        log(note)

    progress = TrainProgress()
    if resume is not None:
        progress.load_state_dict(resume.train_state["state"]["progress"])
    # The run's samples end here; the sample stream itself does not depend on it.
    end_sample = progress.consumed_samples + max(t.train_iters - progress.step, 0) * t.global_batch_size
    dataset = build_train_dataset(plan.data_path, seq_length=plan.model_args.max_seq_length, num_samples=end_sample,
                                  seed=t.seed, cache_dir=cfg.data.data_cache_path,
                                  vocab_size=plan.model_args.vocab_size,
                                  group=dist.group.WORLD if plan.dims.is_parallel else None)
    pm = build_parallel_model(cfg, plan, mesh, device)
    optimizer = build_optimizer(pm.model, t.lr, t.weight_decay, (t.adam_beta1, t.adam_beta2), t.adam_eps,
                                impl=cfg.performance.optimizer_impl)
    sampler = GlobalBatchSampler(total_samples=end_sample, global_batch_size=t.global_batch_size,
                                 micro_batch_size=t.micro_batch_size, dp_rank=pm.dp_rank, dp_size=pm.dp_size,
                                 consumed_samples=progress.consumed_samples)
    guard = NonFiniteGuard(t.max_skipped_steps)
    schedule, lr_schedule = plan.objective_schedule, plan.lr_schedule
    pinned = {schedule.switch_step: "objective switch"} if schedule.switch_step else {}
    manager = CheckpointManager(c.save, pm.model, optimizer,
                                {"progress": progress, "sampler": sampler, "guard": guard,
                                 "objective_schedule": schedule, "lr_schedule": lr_schedule}, record,
                                last_step=t.train_iters, interval=c.save_interval, keep_last=c.keep_last,
                                pinned=pinned)
    if resume is not None:
        manager.restore(resume.path, resume.train_state,
                        skip=("objective_schedule", "lr_schedule") if resume.override_schedule else ())
        set_hyperparameters(optimizer, t.weight_decay, (t.adam_beta1, t.adam_beta2), t.adam_eps)
        log(f"resumed from {resume.path} at step {progress.step} ({progress.consumed_samples} samples consumed)")
    elif c.init_from:
        source = load_model_weights(c.init_from, pm.model)
        log(f"initialised weights from {source} (fresh optimizer, schedule and data position)")
        warn_if_context_shorter(source, plan.model_args.max_seq_length)
    if c.save and rank() == 0:
        write_run_record(c.save, record)

    log(f"model: {count_parameters(pm.model, include_lm_head=False) / 1e6:.1f}M parameters on this rank "
        f"without the LM head ({plan.model_args.num_layers} layers, hidden {plan.model_args.hidden_size}, "
        f"vocab {plan.model_args.vocab_size}, seq {plan.model_args.max_seq_length})")
    log(schedule.describe())
    log(f"data: {', '.join(plan.data_path)} | samples {progress.consumed_samples}-{end_sample - 1} of the stream "
        f"| tokenizer {plan.tokenizer_path} | device {device}")
    log(describe_performance(cfg))
    log(memory_note(cfg, plan.dims, plan.model_args, device))
    result = RunResult(start_step=progress.step, last_step=progress.step, switch_step=schedule.switch_step,
                       resumed_from=resume.path if resume else None)
    loader = MicroBatchLoader(dataset, sampler, num_workers=cfg.data.num_workers, pin_memory=device.type == "cuda")
    _train(cfg, pm, optimizer, loader, progress, schedule, lr_schedule, guard, manager,
           StopPolicy(signals, t.exit_interval, t.exit_duration_in_mins), on_step, device, result)
    return result


def build_parallel_model(cfg: Config, plan: RunPlan, mesh, device: torch.device) -> ParallelModel:
    """The full model from the run's seed (the same weights on every rank), then this rank's share of it."""
    torch.manual_seed(cfg.training.seed)
    model = Transformer(plan.model_args, plan.backends).to(device)
    return parallelize(model, plan.dims, mesh, device, cfg.training.precision, cfg.parallel.recompute,
                       cfg.performance.compile)


def describe_performance(cfg: Config) -> str:
    perf = cfg.performance
    extras = ", ".join(f"{name} {version or 'absent'}" for name, version in detect_optional_extras().items())
    return (f"kernels {perf.kernel_backend} | attention {perf.attention_backend}"
            f"{' with document masks' if perf.document_mask else ''}"
            f"{' | torch.compile per block' if perf.compile else ''} | optional extras: {extras}")


def _train(cfg: Config, pm: ParallelModel, optimizer, loader: MicroBatchLoader, progress: TrainProgress,
           schedule: ObjectiveSchedule, lr_schedule, guard: NonFiniteGuard, manager: CheckpointManager,
           stop: StopPolicy, on_step, device: torch.device, result: RunResult) -> None:
    t = cfg.training
    meter = IntervalMeter()
    tensorboard = TensorBoardWriter(cfg.logging.tensorboard_dir)
    run_start = time.perf_counter()
    batches = iter(loader)
    pm.train()
    if progress.step < t.train_iters:
        log(first_step_note(cfg, progress.step + 1, t.train_iters))
    while progress.step < t.train_iters:
        step = progress.step + 1
        objective = schedule.objective_at(step)
        micro_batches = [schedule.make_batch(step, mb["tokens"].numpy(), mb["sample_ids"].tolist(),
                                             mb["document_ids"].numpy() if cfg.performance.document_mask else None)
                         for mb in next(batches)]
        lr = lr_schedule.lr_at(step)
        out = train_step(pm, optimizer, micro_batches, lr, t.clip_grad, device, t.precision)
        progress.advance(t.global_batch_size)
        result.last_step = step
        sample_ids = [k for b in micro_batches for k in b.sample_ids]
        if on_step is not None:
            on_step(StepReport(step, objective, out.loss, out.grad_norm, lr, out.applied, sample_ids))
        if not out.applied:
            log(f"warning: step {step} skipped (update not applied): loss {out.loss}, grad-norm {out.grad_norm}; "
                f"{len(guard.in_a_row) + 1} in a row, the run stops at {t.max_skipped_steps}")
        must_stop = guard.record(step, out.applied, out.loss, out.grad_norm, sample_ids)
        result.total_skipped = guard.total_skipped
        if must_stop:
            saved = "No checkpoint was written (no --save)."
            if manager.save_dir is not None:
                saved = (f"Checkpoint {manager.save(step)} holds the weights and optimizer state of step "
                         f"{guard.last_good_step} (the last good state) with the data position after step {step}.")
            raise guard.error(saved)
        meter.add(out.loss, out.grad_norm, t.global_batch_size * loader.dataset.seq_length)
        tensorboard.scalars(step, {"loss": out.loss, f"loss/{objective}": out.loss, "lr": lr,
                                   "grad_norm": out.grad_norm})
        if step % cfg.logging.log_interval == 0 or step == t.train_iters or schedule.is_switch_step(step):
            summary = meter.flush()
            eta = (time.perf_counter() - run_start) / (step - result.start_step) * (t.train_iters - step)
            log(f"step {step}/{t.train_iters} | objective {objective} | loss {summary.loss:.4f} | lr {lr:.1e} | "
                f"grad-norm {summary.grad_norm:.2f} | {summary.tokens_per_second:.0f} tok/s | "
                f"eta {format_duration(eta)}")
            tensorboard.scalars(step, {"tokens_per_second": summary.tokens_per_second})
        if schedule.is_switch_step(step):
            log(f"objective switch after step {step}: {objective} -> {schedule.objective_at(step + 1)}")
        if manager.due(step):
            result.last_checkpoint = manager.save(step)
        if step < t.train_iters and (reason := stop.reason_to_stop(step)):
            result.last_checkpoint = manager.save(step) or result.last_checkpoint
            result.stop_reason = reason
            log(f"stopping after step {step} ({reason}); " + ("relaunch the same command to continue from here"
                                                           if manager.save_dir else "nothing saved (no --save)"))
            break
    tensorboard.close()
    log(f"done: {progress.step - result.start_step} steps in {format_duration(time.perf_counter() - run_start)}")

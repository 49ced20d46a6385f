"""The training loop: plan -> (start check) -> build -> (restore) -> steps -> validations -> checkpoints.

Read top to bottom: ``_pretrain`` resolves the run and checks any checkpoint it starts from (all user errors
surface here, before any work), builds this rank's share of the model in the run's layout (one process is
the trivial layout), restores what it takes from the checkpoint, then ``_train`` runs one optimizer step per
global batch, switching objective where the ObjectiveSchedule says so and scoring the validation set when due.
The loop keeps no per-step history: tests and tools observe steps through the ``on_step`` callback, and every
logged step and validation goes to ``metrics.jsonl``. On a GPU the host does not wait for the steps: the
non-finite guard is decided on the device and the step numbers are read at log lines (training/step_metrics.py).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from megamlm.checkpoint import load_model_weights
from megamlm.checkpoint.lock import lock_save_folder
from megamlm.checkpoint.manager import CheckpointManager
from megamlm.config import Config, split_weights
from megamlm.data import GlobalBatchSampler, MicroBatchLoader, build_train_dataset
from megamlm.hf.init_from import adopt_hf_init_from, warn_if_context_shorter
from megamlm.log import log, rank
from megamlm.model.attention_backends import detect_optional_extras
from megamlm.model.transformer import Transformer, count_parameters
from megamlm.objectives import Batch, ObjectiveSchedule
from megamlm.parallel.parallelize import ParallelModel, parallelize
from megamlm.parallel.runtime import start_parallel
from megamlm.training.device_guard import SkipStreak
from megamlm.training.guards import NonFiniteGuard
from megamlm.training.metrics import format_duration
from megamlm.training.optimizer import build_optimizer, set_hyperparameters
from megamlm.training.progress import TrainProgress
from megamlm.training.reporting import RunReporter
from megamlm.training.resume import Start, plan_start
from megamlm.training.run_record import build_run_record, write_run_record
from megamlm.training.setup import RunPlan, backends_on_device, plan_run
from megamlm.training.signals import ExitSignalHandler
from megamlm.training.startup_notes import first_step_note, memory_note
from megamlm.training.step import train_step
from megamlm.training.step_metrics import FinishedStep, StepLedger, StepReport
from megamlm.training.stopping import StopPolicy
from megamlm.training.validation import ValidationSet, load_validation_set


@dataclass
class RunResult:
    """What a launch did, in summary."""

    start_step: int
    last_step: int
    switch_step: int | None
    resumed_from: Path | None = None
    start: str = "fresh"
    """How the run started (training/resume.py): fresh, init, continue, resume, branch or override."""
    stop_reason: str | None = None
    """Why the run stopped before --train-iters (signal, --exit-interval, --exit-duration-in-mins)."""
    last_checkpoint: Path | None = None
    total_skipped: int = 0


def pretrain(cfg: Config, on_step: Callable[[StepReport], None] | None = None,
             read_on_device: bool | None = None) -> RunResult:
    """Train; SIGTERM/SIGUSR1/SIGINT during the run save a checkpoint and return early (training/signals.py), and
    the --save folder is locked for the run (checkpoint/lock.py).

    ``read_on_device``: decide the non-finite skip on the device and read the step numbers only when needed
    (training/step_metrics.py). None: where it pays, on a GPU with the fused AdamW; True also on CPU (tests).
    """
    with ExitSignalHandler() as signals, ExitStack() as held:
        return _pretrain(cfg, signals, held, on_step, read_on_device)


def _pretrain(cfg: Config, signals: ExitSignalHandler, held: ExitStack, on_step, read_on_device) -> RunResult:
    t, c = cfg.training, cfg.checkpoint
    if c.init_from:  # a Hugging Face model is imported once and lends the run its shape and tokenizer
        adopt_hf_init_from(cfg)
    plan = plan_run(cfg)
    mesh, device = start_parallel(plan.dims, plan.device)
    record = build_run_record(cfg, plan, plan.dims.world_size)
    # One run per --save folder: an existing folder is locked before its checkpoints are read, a new one only before
    # the first write, so that a refused launch leaves nothing behind.
    save_exists = bool(c.save) and Path(c.save).exists()
    if save_exists:
        held.enter_context(lock_save_folder(c.save))
    start = plan_start(cfg, record)  # every difference from a checkpoint is honoured or refused here
    record["lineage"] = start.lineage
    for note in start.notes:
        log(note)

    progress = start.progress()
    # The run's samples end here; the sample stream itself does not depend on it.
    end_sample = progress.consumed_samples + max(t.train_iters - progress.step, 0) * t.global_batch_size
    group = dist.group.WORLD if plan.dims.is_parallel else None
    seq_length, vocab_size = plan.model_args.max_seq_length, plan.model_args.vocab_size
    # The (small) validation set first: its errors come before the training index is built.
    validation = load_validation_set(cfg, plan.data_path, seq_length, vocab_size, plan.objective_schedule.masking,
                                     group)
    dataset = build_train_dataset(plan.data_path, seq_length=seq_length, num_samples=end_sample, seed=t.seed,
                                  cache_dir=cfg.data.data_cache_path, vocab_size=vocab_size, group=group,
                                  split=split_weights(cfg.data))
    pm = build_parallel_model(cfg, plan, mesh, device)
    optimizer = build_optimizer(pm.model, t.lr, t.weight_decay, (t.adam_beta1, t.adam_beta2), t.adam_eps,
                                impl=cfg.performance.optimizer_impl)
    sampler = GlobalBatchSampler(total_samples=end_sample, global_batch_size=t.global_batch_size,
                                 micro_batch_size=t.micro_batch_size, dp_rank=pm.dp_rank, dp_size=pm.dp_size,
                                 consumed_samples=progress.consumed_samples)
    guard = NonFiniteGuard(t.max_skipped_steps)
    schedule, lr_schedule = plan.objective_schedule, plan.lr_schedule
    manager = CheckpointManager(c.save, pm.model, optimizer,
                                {"progress": progress, "sampler": sampler, "guard": guard,
                                 "objective_schedule": schedule, "lr_schedule": lr_schedule,
                                 "history": start.history}, record,
                                last_step=t.train_iters, interval=c.save_interval, keep_last=c.keep_last,
                                pinned=pinned_steps(cfg, schedule.switch_step))
    restore(start, manager, cfg, seq_length)
    if not save_exists:
        held.enter_context(lock_save_folder(c.save))
    if c.save and rank() == 0:
        write_run_record(c.save, record)

    log(f"model: {count_parameters(pm.model, include_lm_head=False) / 1e6:.1f}M parameters on this rank "
        f"without the LM head ({plan.model_args.num_layers} layers, hidden {plan.model_args.hidden_size}, "
        f"vocab {vocab_size}, seq {seq_length})")
    log(schedule.describe())
    log(f"data: {', '.join(plan.data_path)} | samples {progress.consumed_samples}-{end_sample - 1} of the stream "
        f"| tokenizer {plan.tokenizer_path} | device {device}")
    if validation is not None:
        log(f"validation: {validation.num_samples} held-out samples every {validation.interval} steps, at the "
            "switch and at the end (MLM loss and accuracy, CLM loss)")
    log(describe_performance(cfg))
    log(memory_note(cfg, plan.dims, plan.model_args, device))
    result = RunResult(start_step=progress.step, last_step=progress.step, switch_step=schedule.switch_step,
                       resumed_from=start.path if start.restores_state else None, start=start.kind)
    loader = MicroBatchLoader(dataset, sampler, num_workers=cfg.data.num_workers, pin_memory=device.type == "cuda")
    _train(cfg, plan, pm, optimizer, loader, progress, schedule, lr_schedule, guard, manager, validation,
           StopPolicy(signals, t.exit_interval, t.exit_duration_in_mins), on_step, read_on_device, device, result)
    return result


def skip_streak(guard: NonFiniteGuard, optimizer, device: torch.device,
                read_on_device: bool | None) -> SkipStreak | None:
    """The device-side streak when the steps decide their skip on the device: on a GPU (the host would wait
    there), and only with torch's fused AdamW (the one that can skip an update on the device)."""
    if read_on_device is None:
        read_on_device = device.type == "cuda"
    if not (read_on_device and optimizer.defaults.get("fused")):
        return None
    return SkipStreak(len(guard.in_a_row), guard.max_in_a_row, device)


def pinned_steps(cfg: Config, switch_step: int | None) -> dict[int, str]:
    """Steps whose checkpoints --keep-last never deletes, and why."""
    pinned = {step: "--save-at" for step in cfg.checkpoint.save_at}
    if switch_step:
        pinned[switch_step] = "objective switch"
    return pinned


def restore(start: Start, manager: CheckpointManager, cfg: Config, seq_length: int) -> None:
    """Load what ``start`` takes from its checkpoint: the whole state, or the weights only."""
    t = cfg.training
    if start.restores_state:
        # The history is the one plan_start continued; this launch's schedules replace a branch's.
        schedules = () if start.restores_schedules else ("objective_schedule", "lr_schedule")
        manager.restore(start.path, start.train_state, skip=("history", *schedules))
        set_hyperparameters(manager.optimizer, t.weight_decay, (t.adam_beta1, t.adam_beta2), t.adam_eps)
        progress = start.train_state["state"]["progress"]
        verb = {"resume": "resumed", "branch": "branched", "override": "resumed (schedule overridden)"}[start.kind]
        log(f"{verb} from {start.path} at step {progress['step']} ({progress['consumed_samples']} samples consumed)")
    elif start.kind == "continue":
        load_model_weights(start.path, manager.model, verify=False)  # plan_start checked it
        log(f"continued pretraining from the weights of {start.path} at sample {start.progress().consumed_samples} "
            "of the stream (fresh optimizer and schedule, step 0)")
    elif start.kind == "init":
        load_model_weights(start.path, manager.model, verify=False)  # plan_start checked it
        log(f"initialised weights from {start.path} (fresh optimizer, schedule and data position)")
        warn_if_context_shorter(start.path, seq_length)


def build_parallel_model(cfg: Config, plan: RunPlan, mesh, device: torch.device) -> ParallelModel:
    """The full model from the run's seed (the same weights on every rank), then this rank's share of it."""
    backends = backends_on_device(plan, cfg, device)
    if backends.attention == "auto":
        log(f"attention auto: {backends.auto_attention[0]} for bidirectional, {backends.auto_attention[1]} for causal "
            "(fastest measured on this device)")
    torch.manual_seed(cfg.training.seed)
    model = Transformer(plan.model_args, backends).to(device)
    return parallelize(model, plan.dims, mesh, device, cfg.training.precision, cfg.parallel.recompute,
                       cfg.performance.compile, cfg.performance.fp8)


def describe_performance(cfg: Config) -> str:
    perf = cfg.performance
    extras = ", ".join(f"{name} {version or 'absent'}" for name, version in detect_optional_extras().items())
    return (f"kernels {perf.kernel_backend} | attention {perf.attention_backend}"
            f"{' with document masks' if perf.document_mask else ''}"
            f" | compile {perf.compile}{' | fp8 linears' if perf.fp8 else ''} | optional extras: {extras}")


def _train(cfg: Config, plan: RunPlan, pm: ParallelModel, optimizer, loader: MicroBatchLoader,
           progress: TrainProgress, schedule: ObjectiveSchedule, lr_schedule, guard: NonFiniteGuard,
           manager: CheckpointManager, validation: ValidationSet | None, stop: StopPolicy, on_step,
           read_on_device: bool | None, device: torch.device, result: RunResult) -> None:
    t = cfg.training
    streak = skip_streak(guard, optimizer, device, read_on_device)
    reporter = RunReporter(cfg.checkpoint.save, cfg.logging.tensorboard_dir, cfg.logging.log_interval,
                           t.train_iters, result.start_step, plan.model_args, device, plan.dims.world_size)
    ledger = StepLedger(guard, reporter, t.global_batch_size, on_step)
    run_start = time.perf_counter()
    batches = iter(loader)
    pm.train()
    if progress.step < t.train_iters:
        log(first_step_note(pm.compile_mode, progress.step + 1, t.train_iters))
    while progress.step < t.train_iters:
        step = progress.step + 1
        objective = schedule.objective_at(step)
        micro_batches = [schedule.make_batch(step, mb["tokens"].numpy(), mb["sample_ids"].tolist(),
                                             mb["document_ids"].numpy() if cfg.performance.document_mask else None)
                         for mb in next(batches)]
        if device.type == "cuda":  # pinned: the copies to the device do not make the host wait
            micro_batches = [pin_batch(b) for b in micro_batches]
        lr = lr_schedule.lr_at(step)
        out = train_step(pm, optimizer, micro_batches, lr, t.clip_grad, device, t.precision, streak=streak)
        progress.advance(t.global_batch_size)
        result.last_step = step
        ledger.add(FinishedStep(step, objective, lr, [k for b in micro_batches for k in b.sample_ids],
                                progress.consumed_samples, schedule.is_switch_step(step), out))
        validating = validation is not None and validation.due(step, t.train_iters, schedule.switch_step)
        if (streak is None or on_step is not None or validating or manager.due(step)
                or reporter.logs_at(step, schedule.is_switch_step(step))):
            settle(ledger, guard, manager, step, result)
        if schedule.is_switch_step(step):
            log(f"objective switch after step {step}: {objective} -> {schedule.objective_at(step + 1)}")
        if validating:
            reporter.validation(validation.evaluate(pm, step, device, t.precision), progress.consumed_samples)
        if manager.due(step):
            result.last_checkpoint = manager.save(step)
        if step < t.train_iters and (reason := stop.reason_to_stop(step)):
            settle(ledger, guard, manager, step, result)
            result.last_checkpoint = manager.save(step) or result.last_checkpoint
            result.stop_reason = reason
            log(f"stopping after step {step} ({reason}); " + ("relaunch the same command to continue from here"
                                                           if manager.save_dir else "nothing saved (no --save)"))
            break
    reporter.close()
    log(f"done: {progress.step - result.start_step} steps in {format_duration(time.perf_counter() - run_start)}")


def pin_batch(batch: Batch) -> Batch:
    document_ids = batch.document_ids.pin_memory() if batch.document_ids is not None else None
    return replace(batch, input_ids=batch.input_ids.pin_memory(), targets=batch.targets.pin_memory(),
                   document_ids=document_ids)


def settle(ledger: StepLedger, guard: NonFiniteGuard, manager: CheckpointManager, step: int,
           result: RunResult) -> None:
    """Account for the steps up to ``step`` (training/step_metrics.py); raise NonFiniteError, after saving a
    checkpoint of the last good state, when the guard's streak is complete."""
    stopped_at = ledger.settle()
    result.total_skipped = guard.total_skipped
    if stopped_at is None:
        return
    saved = "No checkpoint was written (no --save)."
    if manager.save_dir is not None:
        saved = (f"Checkpoint {manager.save(step)} holds the weights and optimizer state of step "
                 f"{guard.last_good_step} (the last good state) with the data position after step {step}.")
    if step > stopped_at:
        saved += (f" Steps {stopped_at + 1}-{step} ran before the host read the step flags; their updates were held "
                  "back.")
    raise guard.error(saved)

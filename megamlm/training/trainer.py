"""The training loop: plan -> build -> (resume) -> steps -> checkpoints.

Read top to bottom: ``pretrain`` resolves the run (all user errors surface here, before any work),
builds the model and optimizer, restores a checkpoint when asked, then runs one optimizer step per
global batch, switching objective where the ObjectiveSchedule says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from megamlm.checkpoint import load_checkpoint, load_model_weights, save_checkpoint
from megamlm.checkpoint.ranks import rank, world_size
from megamlm.config import Config
from megamlm.log import log
from megamlm.model.config import Backends
from megamlm.model.transformer import Transformer, count_parameters
from megamlm.parallel.data_parallel import apply_compile, apply_recompute
from megamlm.parallel.runtime import start_parallel
from megamlm.training.metrics import IntervalMeter, TensorBoardWriter, format_duration
from megamlm.training.guards import NonFiniteGuard, SkipNonFiniteUpdates
from megamlm.training.optimizer import build_optimizer
from megamlm.training.resume import checkpoint_to_resume
from megamlm.training.run_record import build_run_record, write_run_record
from megamlm.training.setup import RunPlan, plan_run
from megamlm.training.signals import ExitSignalHandler
from megamlm.training.step import train_step
from megamlm.training.stopping import StopPolicy


@dataclass
class RunResult:
    """What a run did, per step (tests and tools read this)."""

    losses: dict[int, float] = field(default_factory=dict)
    objectives: dict[int, str] = field(default_factory=dict)
    sample_ids: dict[int, list[int]] = field(default_factory=dict)
    switch_step: int | None = None
    checkpoints: list[Path] = field(default_factory=list)
    start_step: int = 0
    resumed_from: Path | None = None
    skipped_steps: list[int] = field(default_factory=list)
    stop_reason: str | None = None
    """Why the run stopped before --train-iters (signal, --exit-interval, --exit-duration-in-mins)."""


def resolve_device(choice: str) -> torch.device:
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        from megamlm.config import ConfigError

        raise ConfigError("--device cuda was asked for but no CUDA/ROCm device is visible; use --device cpu")
    return torch.device(choice)


def build_model(plan: RunPlan, seed: int, device: torch.device, backends: Backends = Backends()) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(plan.model_args, backends=backends)
    return model.to(device)


def select_backends(perf) -> Backends:
    """The model's kernel and attention backends (checked here, before any work), and a report of the
    optional accelerators. Nothing process-wide is set: the model is built with what this returns."""
    from megamlm.model.attention_backends import detect_optional_extras

    backends = Backends(attention=perf.attention_backend, kernels=perf.kernel_backend)
    extras = ", ".join(f"{name} {version or 'absent'}" for name, version in detect_optional_extras().items())
    log(f"kernels {perf.kernel_backend} | attention {perf.attention_backend}"
        f"{' with document masks' if perf.document_mask else ''}{' | torch.compile per block' if perf.compile else ''}"
        f" | optional extras: {extras}")
    return backends


def pretrain(cfg: Config) -> RunResult:
    """Train; SIGTERM/SIGUSR1 during the run save a checkpoint and return early (see training/signals.py)."""
    with ExitSignalHandler() as signals:
        return _pretrain(cfg, signals)


def _pretrain(cfg: Config, signals: ExitSignalHandler) -> RunResult:
    t, ckpt_cfg = cfg.training, cfg.checkpoint
    if ckpt_cfg.init_from:  # a Hugging Face model is imported once and lends the run its shape and tokenizer
        from megamlm.hf.init_from import adopt_hf_init_from

        adopt_hf_init_from(cfg)
    plan = plan_run(cfg)
    device = resolve_device(t.device)
    backends = select_backends(cfg.performance)
    parallel = start_parallel(cfg, device)  # None for one process; else joins the launcher's process group
    if parallel is not None:
        device = parallel.device
    config_record = build_run_record(cfg, plan, world_size())
    resume_from = checkpoint_to_resume(ckpt_cfg, config_record)  # auto-resume from --save, else --load
    if ckpt_cfg.init_from and resume_from is None:
        from megamlm.checkpoint import resolve_checkpoint

        resolve_checkpoint(ckpt_cfg.init_from)  # fail on a bad path before any work

    from megamlm.data import GlobalBatchSampler, MicroBatchLoader, build_train_dataset

    seq_length = plan.model_args.max_seq_length
    dataset = build_train_dataset(plan.data_path, seq_length=seq_length, num_samples=plan.num_samples,
                                  seed=t.seed, cache_dir=cfg.data.data_cache_path,
                                  vocab_size=plan.model_args.vocab_size,
                                  group=parallel.group if parallel is not None else None)

    schedule, lr_schedule = plan.objective_schedule, plan.lr_schedule
    model = build_model(plan, t.seed, device, backends)
    log(f"model: {count_parameters(model, include_lm_head=False) / 1e6:.1f}M parameters "
        f"without the LM head, {count_parameters(model) / 1e6:.1f}M in all "
        f"({plan.model_args.num_layers} layers, hidden {plan.model_args.hidden_size}, "
        f"vocab {plan.model_args.vocab_size}, seq {seq_length})")
    log(schedule.describe())
    log(f"data: {', '.join(plan.data_path)} | {len(dataset)} samples of {seq_length} tokens | "
        f"tokenizer {plan.tokenizer_path} | device {device}")
    step_fn, dp_rank, dp_size = train_step, 0, 1
    if parallel is not None:  # TP -> recompute -> FSDP/DDP; `model` becomes this rank's share
        model = parallel.parallelize(model, t.precision, cfg.parallel.recompute, cfg.performance.compile)
        step_fn, dp_rank, dp_size = parallel.train_step, parallel.dp_rank, parallel.dp_size
    else:
        if cfg.parallel.recompute:
            apply_recompute(model)
        if cfg.performance.compile:
            apply_compile(model)

    optimizer = build_optimizer(model, t.lr, t.weight_decay, (t.adam_beta1, t.adam_beta2), t.adam_eps,
                                impl=cfg.performance.optimizer_impl)
    result = RunResult(switch_step=schedule.switch_step)
    step, consumed = 0, 0
    if resume_from is not None:
        state = load_checkpoint(resume_from, model, optimizer, verify=False)
        schedule.load_state_dict(state["objective_schedule"])
        lr_schedule.load_state_dict(state["lr_schedule"])
        step, consumed = state["step"], state["consumed_samples"]
        result.resumed_from = resume_from
        log(f"resumed from {resume_from} at step {step} ({consumed} samples consumed)")
    elif ckpt_cfg.init_from:
        path = load_model_weights(ckpt_cfg.init_from, model)
        log(f"initialised weights from {path} (fresh optimizer, schedule and data position)")
    result.start_step = step

    sampler = GlobalBatchSampler(total_samples=plan.num_samples, global_batch_size=t.global_batch_size,
                                 micro_batch_size=t.micro_batch_size, dp_rank=dp_rank, dp_size=dp_size,
                                 consumed_samples=consumed)
    if ckpt_cfg.save and rank() == 0:
        write_run_record(ckpt_cfg.save, config_record)

    def checkpoint(at_step: int, consumed_samples: int) -> Path:
        path = save_checkpoint(ckpt_cfg.save, at_step, model, optimizer, {
            "consumed_samples": consumed_samples, "objective_schedule": schedule.state_dict(),
            "lr_schedule": lr_schedule.state_dict(), "sampler": {"consumed_samples": consumed_samples},
        }, config_record, keep_last=ckpt_cfg.keep_last,
            pinned="objective switch" if schedule.is_switch_step(at_step) else None)
        result.checkpoints.append(path)
        log(f"saved checkpoint {path}")
        return path

    guarded_optimizer = SkipNonFiniteUpdates(optimizer)  # applies no update when any rank's gradients are not finite
    guard = NonFiniteGuard(t.max_skipped_steps)
    stop = StopPolicy(signals, t.exit_interval, t.exit_duration_in_mins)

    meter = IntervalMeter()
    tensorboard = TensorBoardWriter(cfg.logging.tensorboard_dir)
    tokens_per_step = t.global_batch_size * seq_length
    run_start = time.perf_counter()
    batches = iter(MicroBatchLoader(dataset, sampler, num_workers=cfg.data.num_workers,
                                    pin_memory=device.type == "cuda"))
    model.train()
    if parallel is not None:
        parallel.train()
    while step < t.train_iters:
        step += 1
        objective = schedule.objective_at(step)
        loaded = next(batches)
        micro_batches = [schedule.make_batch(step, mb["tokens"].numpy(), mb["sample_ids"].tolist(),
                                             mb["document_ids"].numpy() if cfg.performance.document_mask else None)
                         for mb in loaded]
        lr = lr_schedule.lr_at(step)
        stats = step_fn(model, guarded_optimizer, micro_batches, lr, t.clip_grad, device, t.precision)
        consumed += t.global_batch_size
        result.losses[step] = stats.loss
        result.objectives[step] = objective
        result.sample_ids[step] = [k for b in micro_batches for k in b.sample_ids]
        if guarded_optimizer.skipped:
            result.skipped_steps.append(step)
            log(f"warning: step {step} skipped (update not applied): loss {stats.loss}, grad-norm {stats.grad_norm}; "
                f"{len(guard.in_a_row) + 1} in a row, the run stops at {t.max_skipped_steps}")
        if guard.record(step, guarded_optimizer.skipped, stats.loss, stats.grad_norm, result.sample_ids[step]):
            saved = "No checkpoint was written (no --save)."
            if ckpt_cfg.save:
                last_good = guard.in_a_row[0].step - 1
                saved = (f"Checkpoint {checkpoint(step, consumed)} holds the weights and optimizer state of step "
                         f"{last_good} (the last good state) with the data position after step {step}.")
            raise guard.error(saved)
        meter.add(stats.loss, stats.grad_norm, tokens_per_step)
        tensorboard.scalars(step, {"loss": stats.loss, f"loss/{objective}": stats.loss, "lr": lr,
                                   "grad_norm": stats.grad_norm})

        if step % cfg.logging.log_interval == 0 or step == t.train_iters or schedule.is_switch_step(step):
            summary = meter.flush()
            elapsed = time.perf_counter() - run_start
            eta = elapsed / (step - result.start_step) * (t.train_iters - step)
            log(f"step {step}/{t.train_iters} | objective {objective} | loss {summary.loss:.4f} | lr {lr:.1e} | "
                f"grad-norm {summary.grad_norm:.2f} | {summary.tokens_per_second:.0f} tok/s | "
                f"eta {format_duration(eta)}")
            tensorboard.scalars(step, {"tokens_per_second": summary.tokens_per_second})
        if schedule.is_switch_step(step):
            log(f"objective switch after step {step}: {objective} -> {schedule.objective_at(step + 1)}")
        if ckpt_cfg.save and (
            schedule.is_switch_step(step)
            or step == t.train_iters
            or (ckpt_cfg.save_interval and step % ckpt_cfg.save_interval == 0)
        ):
            checkpoint(step, consumed)
        if step < t.train_iters and (reason := stop.reason_to_stop(step)):
            if ckpt_cfg.save and not (result.checkpoints and result.checkpoints[-1].name == f"iter_{step:07d}"):
                checkpoint(step, consumed)
            result.stop_reason = reason
            log(f"stopping after step {step} ({reason}); " + ("relaunch the same command to continue from here"
                                                           if ckpt_cfg.save else "nothing saved (no --save)"))
            break
    tensorboard.close()
    log(f"done: {step - result.start_step} steps in {format_duration(time.perf_counter() - run_start)}")
    return result

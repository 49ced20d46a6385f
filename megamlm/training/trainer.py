"""The training loop: plan -> build -> (resume) -> steps -> checkpoints.

Read top to bottom: ``pretrain`` resolves the run (all user errors surface here, before any work),
builds the model and optimizer, restores a checkpoint when asked, then runs one optimizer step per
global batch, switching objective where the ObjectiveSchedule says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from megamlm.checkpoint import CheckpointError, load_checkpoint, load_model_weights, read_checkpoint_config, \
    save_checkpoint
from megamlm.config import Config
from megamlm.log import log
from megamlm.model.transformer import Transformer, count_parameters
from megamlm.training.metrics import IntervalMeter, TensorBoardWriter, format_duration
from megamlm.training.optimizer import build_optimizer
from megamlm.training.setup import RunPlan, plan_run
from megamlm.training.step import train_step


@dataclass
class RunResult:
    """What a run did, per step (tests and tools read this)."""

    losses: dict[int, float] = field(default_factory=dict)
    objectives: dict[int, str] = field(default_factory=dict)
    sample_ids: dict[int, list[int]] = field(default_factory=dict)
    switch_step: int | None = None
    checkpoints: list[Path] = field(default_factory=list)
    start_step: int = 0


def resolve_device(choice: str) -> torch.device:
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        from megamlm.config import ConfigError

        raise ConfigError("--device cuda was asked for but no CUDA/ROCm device is visible; use --device cpu")
    return torch.device(choice)


def check_resume_compatible(load_path: str, plan: RunPlan) -> None:
    saved = read_checkpoint_config(load_path).get("model_args")
    mine = plan.model_args.to_dict()
    if saved is not None and saved != mine:
        diff = {k: (saved.get(k), v) for k, v in mine.items() if saved.get(k) != v}
        raise CheckpointError(f"checkpoint {load_path} has a different model shape (checkpoint, this run): {diff}; "
                              "resume with the same model flags")


def build_model(plan: RunPlan, seed: int, device: torch.device) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(plan.model_args)
    return model.to(device)


def pretrain(cfg: Config) -> RunResult:
    t, ckpt_cfg = cfg.training, cfg.checkpoint
    plan = plan_run(cfg)
    device = resolve_device(t.device)
    if ckpt_cfg.load:
        check_resume_compatible(ckpt_cfg.load, plan)
    if ckpt_cfg.init_from:
        from megamlm.checkpoint import resolve_checkpoint

        resolve_checkpoint(ckpt_cfg.init_from)  # fail on a bad path before any work

    from megamlm.data import GlobalBatchSampler, build_train_dataset

    seq_length = plan.model_args.max_seq_length
    dataset = build_train_dataset(plan.data_path, seq_length=seq_length, num_samples=plan.num_samples,
                                  seed=t.seed, cache_dir=cfg.data.data_cache_path,
                                  vocab_size=plan.model_args.vocab_size)

    schedule, lr_schedule = plan.objective_schedule, plan.lr_schedule
    model = build_model(plan, t.seed, device)
    optimizer = build_optimizer(model, t.lr, t.weight_decay, (t.adam_beta1, t.adam_beta2), t.adam_eps)
    log(f"model {cfg.model.model}: {count_parameters(model, include_lm_head=False) / 1e6:.1f}M parameters "
        f"without the LM head, {count_parameters(model) / 1e6:.1f}M in all "
        f"({plan.model_args.num_layers} layers, hidden {plan.model_args.hidden_size}, "
        f"vocab {plan.model_args.vocab_size}, seq {seq_length})")
    log(schedule.describe())
    log(f"data: {', '.join(plan.data_path)} | {len(dataset)} samples of {seq_length} tokens | "
        f"tokenizer {plan.tokenizer_path} | device {device}")

    result = RunResult(switch_step=schedule.switch_step)
    step, consumed = 0, 0
    if ckpt_cfg.load:
        state = load_checkpoint(ckpt_cfg.load, model, optimizer)
        schedule.load_state_dict(state["objective_schedule"])
        lr_schedule.load_state_dict(state["lr_schedule"])
        step, consumed = state["step"], state["consumed_samples"]
        log(f"resumed from {ckpt_cfg.load} at step {step} ({consumed} samples consumed)")
    elif ckpt_cfg.init_from:
        path = load_model_weights(ckpt_cfg.init_from, model)
        log(f"initialised weights from {path} (fresh optimizer, schedule and data position)")
    result.start_step = step

    sampler = GlobalBatchSampler(total_samples=plan.num_samples, global_batch_size=t.global_batch_size,
                                 micro_batch_size=t.micro_batch_size, consumed_samples=consumed)
    tok = plan.tokenizer
    config_record = {
        "config": cfg.to_dict(), "model_args": plan.model_args.to_dict(), "switch_step": schedule.switch_step,
        "data_path": plan.data_path, "seq_length": seq_length,
        "tokenizer": {"path": str(plan.tokenizer_path), "vocab_size": tok.vocab_size, "bos_id": tok.bos_id,
                      "eos_id": tok.eos_id, "pad_id": tok.pad_id, "mask_id": tok.mask_id},
    }

    def checkpoint(at_step: int, consumed_samples: int) -> None:
        path = save_checkpoint(ckpt_cfg.save, at_step, model, optimizer, {
            "consumed_samples": consumed_samples, "objective_schedule": schedule.state_dict(),
            "lr_schedule": lr_schedule.state_dict(), "sampler": {"consumed_samples": consumed_samples},
        }, config_record)
        result.checkpoints.append(path)
        log(f"saved checkpoint {path}")

    meter = IntervalMeter()
    tensorboard = TensorBoardWriter(cfg.logging.tensorboard_dir)
    tokens_per_step = t.global_batch_size * seq_length
    run_start = time.perf_counter()
    batches = iter(sampler)
    model.train()
    while step < t.train_iters:
        step += 1
        objective = schedule.objective_at(step)
        micro_ids = next(batches)
        micro_batches = []
        for ids in micro_ids:
            tokens = np.stack([dataset[k] for k in ids])
            micro_batches.append(schedule.make_batch(step, tokens, ids))
        lr = lr_schedule.lr_at(step)
        stats = train_step(model, optimizer, micro_batches, lr, t.clip_grad, device, t.precision)
        consumed += t.global_batch_size
        result.losses[step] = stats.loss
        result.objectives[step] = objective
        result.sample_ids[step] = [k for ids in micro_ids for k in ids]
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
    tensorboard.close()
    log(f"done: {t.train_iters} steps in {format_duration(time.perf_counter() - run_start)}")
    return result

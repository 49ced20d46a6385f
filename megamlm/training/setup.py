"""Everything a run resolves before its first step: data, tokenizer, model shape, schedules, layout, device.

All of it happens (and every user error is raised) before a model is built or a file is written.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from megamlm.config import (
    Config,
    ConfigError,
    TrainingConfig,
    model_args_for,
    objective_phases,
    switch_steps,
    validation_enabled,
    warmup_iters,
    wsd_decay_iters,
)
from megamlm.data import load_tokenizer, prepare_embedded_corpus
from megamlm.data.sidecar import check_dataset_files
from megamlm.kernels import check_kernel_backend
from megamlm.model.attention_backends import attention_backend_problem, check_attention_backend
from megamlm.model.attention_probe import resolve_auto_attention
from megamlm.model.config import Backends, ModelArgs
from megamlm.objectives import MaskingSpec, ObjectiveSchedule
from megamlm.parallel.compile import resolve_compile_mode
from megamlm.parallel.dims import ParallelDims, dims_from_config
from megamlm.parallel.float8 import check_float8
from megamlm.precision import uses_bf16
from megamlm.training.optim import LRSchedule

@dataclass
class RunPlan:
    model_args: ModelArgs
    data_path: list[str]
    tokenizer_path: str
    tokenizer: object
    objective_schedule: ObjectiveSchedule
    lr_schedule: LRSchedule
    dims: ParallelDims
    device: torch.device
    backends: Backends


def resolve_device(choice: str) -> torch.device:
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but no CUDA/ROCm device is visible; use --device cpu")
    return torch.device(choice)


def resolve_data_sources(cfg: Config) -> tuple[list[str], str]:
    """(data_path, tokenizer path); no --data-path means the bundled Austen corpus and its tokenizer."""
    if not cfg.data.data_path:
        if cfg.data.tokenizer_model:
            raise ConfigError("--tokenizer-model was given without --data-path; the bundled corpus has its own "
                              "tokenizer: pass --data-path too, or drop --tokenizer-model")
        prefix, tokenizer_path = prepare_embedded_corpus(cfg.data.data_cache_path)
        return [prefix], tokenizer_path
    if not cfg.data.tokenizer_model:
        raise ConfigError("--data-path needs --tokenizer-model (the tokenizer the data was preprocessed with): "
                          "it gives the mask, padding and special-token ids; data from tools/preprocess_data.py "
                          "names it in its sidecar, which this data lacks or whose tokenizer file is not here")
    return list(cfg.data.data_path), cfg.data.tokenizer_model


def masking_spec_for(cfg: Config, tokenizer) -> MaskingSpec:
    if tokenizer.mask_id is None and (objective_phases(cfg.objective.objective) != ("clm",)
                                      or validation_enabled(cfg)):
        raise ConfigError(f"tokenizer {tokenizer} has no mask token, which MLM (and validation, which scores MLM "
                          "too) needs; use a tokenizer with one (Llama 3's <|reserved_special_token_0|> is picked "
                          "automatically) or --objective clm without a validation set")
    o = cfg.objective
    return MaskingSpec(mask_ratio=o.mask_ratio, replace_prob=o.mask_replace_prob, random_prob=o.mask_random_prob,
                       keep_prob=o.mask_keep_prob, mask_id=tokenizer.mask_id if tokenizer.mask_id is not None else -1,
                       special_ids=tuple(tokenizer.special_ids), random_vocab_size=tokenizer.vocab_size)


def backends_for(cfg: Config, device: torch.device) -> Backends:
    """The model's kernel and attention backends, checked to run here."""
    perf = cfg.performance
    if perf.kernel_backend == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ConfigError(f"--kernel-backend triton runs Triton kernels on a CUDA/ROCm GPU, and this run is on "
                          f"{device.type}; use --kernel-backend auto (chunked LM-head loss on CPU), or set "
                          "TRITON_INTERPRET=1 to run the kernels in Triton's interpreter (slow, for tests)")
    try:
        return Backends(attention=check_attention_backend(perf.attention_backend),
                        kernels=check_kernel_backend(perf.kernel_backend))
    except (ValueError, RuntimeError, ImportError) as err:
        raise ConfigError(str(err)) from None


def lr_schedule_for(t: TrainingConfig) -> LRSchedule:
    return LRSchedule(t.lr, t.min_lr, t.lr_decay_style, warmup_iters(t), wsd_decay_iters(t), t.train_iters)


def backends_on_device(plan: RunPlan, cfg: Config, device: torch.device) -> Backends:
    """``plan.backends`` with ``--attention-backend auto`` measured on this rank's ``device``; every rank takes
    rank 0's choice, so the whole job computes attention the same way."""
    backends = resolve_auto_attention(plan.backends, device, plan.model_args, cfg.training.micro_batch_size,
                                      plan.dims.tp, cfg.performance.document_mask,
                                      torch.bfloat16 if uses_bf16(device, cfg.training.precision) else torch.float32)
    if backends.attention == "auto" and dist.is_available() and dist.is_initialized():
        choice = [backends.auto_attention]
        dist.broadcast_object_list(choice, src=0)
        backends = dataclasses.replace(backends, auto_attention=tuple(choice[0]))
    return backends


def plan_run(cfg: Config) -> RunPlan:
    """Resolve and check everything a run needs; raises ConfigError / DataError / LayoutError naming the fix."""
    dims = dims_from_config(cfg)
    device = resolve_device(cfg.training.device)
    resolve_compile_mode(cfg.performance.compile, device, dims)  # an impossible mode fails here, before any work
    if problem := attention_backend_problem(cfg.performance.attention_backend, device.type):
        raise ConfigError(problem)
    if cfg.performance.fp8:
        check_float8(dims)
    data_path, tokenizer_path = resolve_data_sources(cfg)
    tokenizer = load_tokenizer(tokenizer_path)
    check_dataset_files(data_path, tokenizer)  # readable, and made by this tokenizer where a sidecar says
    if cfg.data.valid_data_path:
        check_dataset_files(cfg.data.valid_data_path, tokenizer)  # and so was --valid-data-path
    args = model_args_for(cfg, tokenizer.vocab_size)
    t = cfg.training
    schedule = ObjectiveSchedule(cfg.objective.objective, switch_steps(cfg.objective, t.train_iters), t.train_iters,
                                 masking_spec_for(cfg, tokenizer), t.seed)
    lr_schedule = lr_schedule_for(t)
    return RunPlan(model_args=args, data_path=data_path, tokenizer_path=tokenizer_path, tokenizer=tokenizer,
                   objective_schedule=schedule, lr_schedule=lr_schedule, dims=dims, device=device,
                   backends=backends_for(cfg, device))

"""Everything a run resolves before its first step: data, tokenizer, model shape, schedules, layout, device
(``ResolvedRun``, made by ``resolve_run``).

All of it happens before a model is built or a file is written, and every user error is raised by the start-up
checks it runs (training/startup.py). The run record (training/run_record.py) describes what it resolved.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.distributed as dist

from megamlm.config import Config, model_args_for, split_weights
from megamlm.config.phase_data import phase_corpora, phases_own_data
from megamlm.config.phases import Recipe, recipe_of
from megamlm.data import load_tokenizer, prepare_embedded_corpus
from megamlm.data.embedded import TOKENIZER_FILE
from megamlm.data.sidecar import check_dataset_files
from megamlm.model.attention_probe import resolve_auto_attention
from megamlm.model.config import Backends, ModelArgs
from megamlm.objectives import MaskingSpec, ObjectiveSchedule
from megamlm.parallel.dims import ParallelDims
from megamlm.precision import uses_bf16
from megamlm.training.lineage import Segment
from megamlm.training.optim import LRSchedule
from megamlm.training.startup import check_launch, check_model, check_tokenizer


@dataclass
class ResolvedRun:
    """What a run resolved from its config before its first step."""

    model_args: ModelArgs
    data_path: list[str]
    tokenizer_path: str
    tokenizer: object
    objective_schedule: ObjectiveSchedule
    lr_schedule: LRSchedule
    dims: ParallelDims
    device: torch.device
    backends: Backends
    compile_mode: str
    """``--compile`` resolved for the device and layout."""
    split: tuple[float, float, float] | None
    """--split as normalised (train, validation, test) weights; None without it."""
    segment: Segment
    """The settings its steps get (the schedules above came from it): what a start compares with a checkpoint's
    history (``training/resume.py``)."""
    recipe: Recipe
    """The run's phases, resolved here once (config/phases.py): every reader is handed it, and the step asks it
    what step k is (``Recipe.at``)."""


def data_sources(cfg: Config) -> tuple[list[str], str]:
    """(data_path, tokenizer path); no --data-path means the phases' own data where they name it (every dataset
    they read, config/phase_data.py), else the bundled Austen corpus, tokenized with --tokenizer-model when given
    (cached per tokenizer) and with the bundled tokenizer otherwise."""
    if cfg.recipe.phases and phases_own_data(cfg):  # phases that name their own data
        return phase_corpora(cfg), cfg.data.tokenizer_model or str(TOKENIZER_FILE)  # data without a sidecar
    if not cfg.data.data_path:
        tokenizer_file = cfg.data.tokenizer_model or TOKENIZER_FILE
        prefix, tokenizer_path = prepare_embedded_corpus(cfg.data.data_cache_path, tokenizer_file)
        return [prefix], tokenizer_path
    return list(cfg.data.data_path), cfg.data.tokenizer_model


def masking_spec_for(cfg: Config, tokenizer) -> MaskingSpec:
    o = cfg.objective
    return MaskingSpec(mask_ratio=o.mask_ratio, replace_prob=o.mask_replace_prob, random_prob=o.mask_random_prob,
                       keep_prob=o.mask_keep_prob, mask_id=tokenizer.mask_id if tokenizer.mask_id is not None else -1,
                       special_ids=tuple(tokenizer.special_ids), random_vocab_size=tokenizer.vocab_size)


def objective_schedule_of(segment: Segment, recipe: Recipe, masking: MaskingSpec, seed: int) -> ObjectiveSchedule:
    """The ObjectiveSchedule of the run's segment (its objective stages and switches), each recipe phase's masking
    from its first step on (``masking``: the run's, which a phase's mask fields replace)."""
    maskings = [(phase.first_step, dataclasses.replace(
        masking, mask_ratio=phase.mask_ratio, replace_prob=phase.mask_replace_prob,
        random_prob=phase.mask_random_prob, keep_prob=phase.mask_keep_prob)) for phase in recipe.phases]
    return ObjectiveSchedule(**segment.objective_schedule, masking=masking, seed=seed, maskings=maskings)


def backends_on_device(plan: ResolvedRun, cfg: Config, device: torch.device) -> Backends:
    """``plan.backends`` with ``--attention-backend auto`` measured on this rank's ``device``; every rank takes
    rank 0's choice, so the whole job computes attention the same way (callers with a named backend keep it)."""
    backends = resolve_auto_attention(plan.backends, device, plan.model_args, cfg.training.micro_batch_size,
                                      plan.dims.tp, cfg.performance.document_mask,
                                      torch.bfloat16 if uses_bf16(device, cfg.training.precision) else torch.float32)
    if dist.is_available() and dist.is_initialized():
        choice = [backends.auto_attention]
        dist.broadcast_object_list(choice, src=0)
        backends = dataclasses.replace(backends, auto_attention=tuple(choice[0]))
    return backends


def resolve_run(cfg: Config) -> ResolvedRun:
    """Resolve and check everything a run needs; raises ConfigError / DataError / LayoutError naming the fix."""
    compute = check_launch(cfg)
    data_path, tokenizer_path = data_sources(cfg)
    tokenizer = load_tokenizer(tokenizer_path)
    check_dataset_files(data_path, tokenizer)  # readable, and made by this tokenizer where a sidecar says
    if cfg.data.valid_data_path:
        check_dataset_files(cfg.data.valid_data_path, tokenizer)  # and so was --valid-data-path
    for phase in cfg.recipe.phases:  # and each phase's data (config/phases.py)
        for paths in (phase.data_path, phase.valid_data_path):
            if paths:
                check_dataset_files(paths, tokenizer)
    args = model_args_for(cfg, tokenizer.vocab_size)
    check_tokenizer(cfg, tokenizer)
    check_model(cfg, args)
    recipe = recipe_of(cfg)  # the recipe, resolved once: everything after reads this one
    segment = Segment.of_config(cfg, recipe)  # the schedules, derived from the config in one place
    schedule = objective_schedule_of(segment, recipe, masking_spec_for(cfg, tokenizer), cfg.training.seed)
    return ResolvedRun(model_args=args, data_path=data_path, tokenizer_path=tokenizer_path, tokenizer=tokenizer,
                   objective_schedule=schedule, lr_schedule=segment.lr_schedule_object(), dims=compute.dims,
                   device=compute.device, backends=compute.backends, compile_mode=compute.compile_mode,
                   split=split_weights(cfg.data), segment=segment, recipe=recipe)

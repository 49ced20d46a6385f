"""Held-out validation that scores both objectives on the same fixed samples and masks, whatever the run trains.

The validation set is the first ``--eval-iters`` x ``--global-batch-size`` samples of the validation stream: the
validation documents of ``--split`` (the training stream holds only the training documents), or every document
of ``--valid-data-path``, cut into windows and ordered exactly like training samples (seed, seq length). The set
must fit in one pass over those documents. Every evaluation runs three forward passes per sample in the run's
parallel layout: bidirectional on the MLM-masked sample (MLM loss, MLM top-1 accuracy on the masked positions)
and causal on the sample itself (CLM loss); a run that trains MNTP also scores it (bidirectional, the same masks,
each masked token scored from the position before it). Validation sample k is masked as sample id ``2**62 + k`` with the
run's seed, a random stream no training sample uses, so two runs with the same seed, data, split, batch size and
``--eval-mask-ratio`` are scored on identical tokens. Which data, sample length, masking and sample mode each phase
of a recipe is scored at is decided once, in ``validation_plan`` (``--eval-samples run`` or ``phase``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from megamlm.config import (
    Config,
    eval_interval,
    eval_iters,
    objective_stages,
    validation_enabled,
)
from megamlm.config.phase_data import phases_own_data
from megamlm.data import DataError, GlobalBatchSampler, StreamSpec, build_validation_dataset
from megamlm.objectives import Batch, MaskingSpec
from megamlm.objectives.batch import make_batch
from megamlm.parallel.parallelize import ParallelModel
from megamlm.parallel.pipeline import pipeline_runner
from megamlm.parallel.vocab_parallel_loss import parallel_sparse_lm_loss, parallel_top1_correct
from megamlm.precision import autocast_for
from megamlm.training.resolved_run import ResolvedRun

VALIDATION_MASK_ID_BASE = 1 << 62
"""Validation sample k draws its mask from the stream of sample id VALIDATION_MASK_ID_BASE + k."""
MASKING_KEYS = ("mask_ratio", "replace_prob", "random_prob", "keep_prob")
"""The masking a validation record names (``validation_masking``)."""


def _at(seq_length: int | None, masking: MaskingSpec | None) -> str:
    """`` (128 tokens, mask 0.4)``: the setting a validation scored at, in words."""
    if seq_length is None:
        return ""
    return f" ({seq_length} tokens" + ("" if masking is None else f", mask {masking.mask_ratio:g}") + ")"


@dataclass
class ValidationResult:
    step: int
    mlm_loss: float
    mlm_accuracy: float
    """Share of the masked positions whose target is the highest logit."""
    clm_loss: float
    samples: int
    mlm_tokens: int
    clm_tokens: int
    seconds: float = 0.0
    """How long the evaluation took."""
    mntp_loss: float | None = None
    """MNTP loss, scored where the run trains MNTP (else None)."""
    mntp_tokens: int | None = None
    data: str | None = None
    """The validation data scored, in words (``ValidationSet.data``)."""
    seq_length: int | None = None
    """The length of the samples scored (``validation_plan``)."""
    masking: MaskingSpec | None = None
    """The MLM/MNTP masking they were scored with."""
    sample_mode: str | None = None

    def setting(self) -> dict:
        """The metrics record's names of what was scored: scores compare only between records that agree on them."""
        named = {} if self.data is None else {"validation_data": self.data}
        if self.seq_length is not None:
            named["validation_seq_length"] = self.seq_length
        if self.masking is not None:
            named["validation_masking"] = {key: getattr(self.masking, key) for key in MASKING_KEYS}
        if self.sample_mode is not None:
            named["validation_sample_mode"] = self.sample_mode
        return named

    def scalars(self) -> dict[str, float]:
        scalars = {"mlm_loss": self.mlm_loss, "mlm_accuracy": self.mlm_accuracy, "clm_loss": self.clm_loss}
        return scalars if self.mntp_loss is None else {**scalars, "mntp_loss": self.mntp_loss}

    def token_counts(self) -> dict[str, int]:
        counts = {"mlm_tokens": self.mlm_tokens, "clm_tokens": self.clm_tokens}
        return counts if self.mntp_tokens is None else {**counts, "mntp_tokens": self.mntp_tokens}

    def describe(self) -> str:
        mntp = "" if self.mntp_loss is None else f" | mntp loss {self.mntp_loss:.4f}"
        return (f"validation at step {self.step} | mlm loss {self.mlm_loss:.4f} | mlm accuracy "
                f"{self.mlm_accuracy:.4f} | clm loss {self.clm_loss:.4f}{mntp} | {self.samples} samples"
                f"{'' if self.data is None else ' of ' + self.data}{_at(self.seq_length, self.masking)} | "
                f"{self.seconds:.1f} s")


@dataclass
class ValidationSet:
    """The run's fixed validation samples and when to score them."""

    dataset: object
    num_samples: int
    global_batch_size: int
    micro_batch_size: int
    seed: int
    masking: MaskingSpec
    interval: int
    document_mask: bool = False
    whole_documents: bool = False
    """The samples are whole documents (a document --sample-mode): ``objectives.batch.make_batch``'s flag."""
    objectives: tuple[str, ...] = ("mlm", "clm")
    """What every evaluation scores: MLM and CLM always, MNTP where the run trains it."""
    data: str | None = None
    """The data its samples come from, in words (``--split 969,30,1 of PREFIX``, a --valid-data-path list): named
    in the start-up log and in every validation record."""
    seq_length: int | None = None
    """The samples' length (``validation_plan``: the run's, or with --eval-samples phase the phase's)."""
    sample_mode: str | None = None

    def describe(self) -> str:
        """``32 held-out samples of DATA (128 tokens, mask 0.4)``, as the start-up log says it."""
        return (f"{self.num_samples} held-out samples" + (f" of {self.data}" if self.data else "")
                + _at(self.seq_length, self.masking))

    def due(self, step: int, last_step: int, switch_steps) -> bool:
        """Evaluate after ``step``: every ``interval`` steps, at every objective switch (``switch_steps``: one step
        or several) and at the last step."""
        switches = switch_steps if isinstance(switch_steps, (tuple, list)) else (switch_steps,)
        return step % self.interval == 0 or step == last_step or step in switches

    def scored(self) -> str:
        """What an evaluation reports, in words."""
        return "MLM loss and accuracy, CLM loss" + (", MNTP loss" if "mntp" in self.objectives else "")

    def micro_batches(self, pm: ParallelModel) -> list[list[list[int]]]:
        """This data-parallel rank's micro-batches (sample ids) of each validation global batch."""
        sampler = GlobalBatchSampler(self.num_samples, self.global_batch_size, self.micro_batch_size,
                                     dp_rank=pm.dp_rank, dp_size=pm.dp_size)
        return list(sampler.global_batches(0))

    def evaluate(self, pm: ParallelModel, step: int, device: torch.device, precision: str = "auto") -> ValidationResult:
        """MLM loss and accuracy and CLM loss over every validation sample; the same result on every rank."""
        start = time.perf_counter()
        totals = {objective: np.zeros(3) for objective in self.objectives}
        pm.train(False)
        try:
            for global_batch in self.micro_batches(pm):
                rows = [(np.stack([self.dataset[k] for k in ids]),
                         np.stack([self.dataset.document_ids(k) for k in ids]) if self.document_mask else None, ids)
                        for ids in global_batch]
                for objective in self.objectives:
                    batches = [make_batch(objective, tokens, [VALIDATION_MASK_ID_BASE + k for k in ids], self.seed,
                                          self.masking, documents, self.whole_documents)
                               for tokens, documents, ids in rows]
                    totals[objective] += forward_metrics(pm, batches, device, precision, accuracy=objective == "mlm")
        finally:
            pm.train(True)
        (mlm_loss, mlm_tokens, correct), (clm_loss, clm_tokens, _) = totals["mlm"], totals["clm"]
        result = ValidationResult(step, mlm_loss / max(mlm_tokens, 1), correct / max(mlm_tokens, 1),
                                  clm_loss / max(clm_tokens, 1), self.num_samples, int(mlm_tokens), int(clm_tokens),
                                  time.perf_counter() - start, data=self.data, seq_length=self.seq_length,
                                  masking=self.masking, sample_mode=self.sample_mode)
        if "mntp" in totals:
            mntp_loss, mntp_tokens, _ = totals["mntp"]
            result.mntp_loss, result.mntp_tokens = mntp_loss / max(mntp_tokens, 1), int(mntp_tokens)
        return result


def forward_metrics(pm: ParallelModel, micro_batches: list[Batch], device: torch.device, precision: str = "auto",
                    accuracy: bool = False) -> tuple[float, int, int]:
    """Forward only, no gradients (validation): (sum of token losses, predicted tokens, top-1 correct predictions
    when ``accuracy``) over the micro-batches of every data-parallel rank; the same numbers on every rank."""
    def measure(hidden: torch.Tensor, targets: torch.Tensor) -> tuple[float, int, int]:
        model = pm.model
        loss, predicted = parallel_sparse_lm_loss(hidden, model.lm_head.weight, targets, model.backends.kernels,
                                                  prediction_head=model.head, bias=model.lm_head.bias)
        correct = parallel_top1_correct(hidden, model.lm_head.weight, targets, prediction_head=model.head,
                                        bias=model.lm_head.bias) if accuracy else 0
        return float(loss), predicted, correct

    autocast = autocast_for(device, precision)
    with torch.no_grad():
        if pm.dims.pp > 1:
            runner = pipeline_runner(pm, len(micro_batches), device, micro_batches[0].input_ids.shape[1])
            measured = runner.evaluate(micro_batches, measure, device, autocast)
        else:
            measured = []
            for batch in micro_batches:
                document_ids = batch.document_ids.to(device) if batch.document_ids is not None else None
                position_ids = batch.position_ids.to(device) if batch.position_ids is not None else None
                with autocast():
                    hidden = pm.parts[0](batch.input_ids.to(device), causal=batch.causal, document_ids=document_ids,
                                         position_ids=position_ids)
                    measured.append(measure(hidden, batch.targets.to(device)))
    sums = torch.tensor([sum(m[i] for m in measured) for i in range(3)], dtype=torch.float64, device=device)
    if pm.mesh is not None:  # the numbers live on the last pipeline stage, repeated on each of its TP ranks
        dist.all_reduce(sums)
        sums /= pm.dims.tp
    loss, predicted, correct = sums.tolist()
    return loss, round(predicted), round(correct)


@dataclass
class PhaseValidation:
    """The validation sets of a recipe whose phases validate on different data (``valid_data_path``): a validation
    after step s scores the set of the phase that trained step s, and its record names that set's data. The sets
    share the interval, size and masks (``ValidationSet``'s interface, so the loop reads either)."""

    phases: tuple[tuple[int, ValidationSet, str], ...]
    """(last step, validation set, its data in words) of each phase, in order."""

    def __getattr__(self, name):  # interval, num_samples, due, scored: the same in every phase's set
        return getattr(self.phases[0][1], name)

    def describe(self) -> str:
        """Each phase's held-out samples and data, as the start-up log says them."""
        return "; ".join(f"through step {last}: {validation.describe()}" for last, validation, _ in self.phases)

    def evaluate(self, pm: ParallelModel, step: int, device: torch.device, precision: str = "auto") -> ValidationResult:
        _, validation, data = next((p for p in self.phases if step <= p[0]), self.phases[-1])
        return dataclasses.replace(validation.evaluate(pm, step, device, precision), data=data)


def load_validation_set(cfg: Config, plan: ResolvedRun, group=None) -> ValidationSet | PhaseValidation | None:
    """The run's validation set (None without --split or --valid-data-path), or one per setting its recipe's phases
    validate at (``validation_plan``); a DataError, before any work, when one cannot hold ``--eval-iters`` global
    batches in one pass."""
    if not validation_enabled(cfg):
        return None
    by_phase = validation_plan(cfg, plan)
    sets = {scored: _validation_set(cfg, plan, scored, group) for _, scored in by_phase}
    if len(sets) == 1:
        return next(iter(sets.values()))
    return PhaseValidation(tuple((last, sets[scored], sets[scored].data) for last, scored in by_phase))


@dataclass(frozen=True)
class _Source:
    """Validation data: a --data-path list, and whether its --split validation documents are meant (else all)."""

    data_path: tuple[str, ...]
    split: bool

    def describe(self, cfg: Config) -> str:
        """The data in words: ``--split 969,30,1 of PREFIX`` (its held-out documents), or the list itself."""
        data = " ".join(self.data_path)
        return f"--split {cfg.data.split} of {data}" if self.split else data


@dataclass(frozen=True)
class Scored:
    """What the validations of one phase score: data, sample length, masking and sample mode."""

    source: _Source
    seq_length: int
    masking: MaskingSpec
    sample_mode: str


def validation_plan(cfg: Config, plan: ResolvedRun) -> tuple[tuple[int, Scored], ...]:
    """(last step, what its validations score) of each phase: the one place that decides it.

    - Data: the phase's ``valid_data_path``, else the run's --valid-data-path, else the ``--split`` documents of the
      run's data or, without run-level data, of the phase's own (config/phase_data.py: nothing is held out of a
      corpus the run does not read).
    - Length, masking and sample mode (``--eval-samples``): ``run`` (the default) scores every phase at --seq-length
      (the model's positions), the run's masking and --sample-mode, so every validation of a run, and of every arm of
      a study, scores the same samples; ``phase`` scores each phase at its own sequence length, masking and sample
      mode, as a stage launched on its own would (Megatron's context extension is a launch at the new --seq-length,
      ModernBERT's a config whose evaluation runs at its max_seq_len). --eval-mask-ratio sets the ratio either way.
    """
    own_data = phases_own_data(cfg) and not cfg.data.valid_data_path
    run_source = _Source(tuple(cfg.data.valid_data_path or plan.data_path), not cfg.data.valid_data_path)
    per_phase = cfg.validation.eval_samples == "phase"
    out = []
    for phase in plan.recipe.phases:
        source = (_Source(phase.valid_data_path, False) if phase.valid_data_path else
                  _Source(phase.data_path, True) if own_data else run_source)
        masking = plan.objective_schedule.masking_at(phase.first_step) if per_phase else plan.objective_schedule.masking
        if cfg.validation.eval_mask_ratio is not None:
            masking = dataclasses.replace(masking, mask_ratio=cfg.validation.eval_mask_ratio)
        out.append((phase.last_step, Scored(source, phase.seq_length if per_phase else plan.model_args.max_seq_length,
                                            masking, phase.sample_mode if per_phase else cfg.data.sample_mode)))
    return tuple(out)


def _validation_set(cfg: Config, plan: ResolvedRun, scored: Scored, group) -> ValidationSet:
    t, source, seq_length = cfg.training, scored.source, scored.seq_length
    iters = eval_iters(cfg)
    num_samples = iters * t.global_batch_size
    run_split = cfg.data.split is not None and source.split  # the --split documents
    dataset = build_validation_dataset(StreamSpec(list(source.data_path), seq_length, num_samples, t.seed,
                                                  cache_dir=cfg.data.data_cache_path,
                                                  vocab_size=plan.model_args.vocab_size,
                                                  split=plan.split if run_split else None,
                                                  sample_mode=scored.sample_mode), group)
    available = dataset.first_pass_samples()
    if available < num_samples:
        given = "--valid-data-path" if list(source.data_path) == cfg.data.valid_data_path else \
            "a phase's valid_data_path"
        where = f"--split {cfg.data.split}" if run_split else f"{given} {' '.join(source.data_path)}"
        raise DataError(f"--eval-iters {iters} x --global-batch-size {t.global_batch_size} = {num_samples} "
                        f"validation samples, but the validation set ({where}) holds {available} samples of "
                        f"{seq_length} tokens; lower --eval-iters to at most {available // t.global_batch_size}, or "
                        "give validation more documents")
    whole = scored.sample_mode != "windows"
    return ValidationSet(dataset, num_samples, t.global_batch_size, t.micro_batch_size, t.seed, scored.masking,
                         eval_interval(cfg), cfg.performance.document_mask or whole, whole,
                         objectives=("mlm", "clm", "mntp") if "mntp" in objective_stages(cfg.objective.objective)
                         else ("mlm", "clm"), data=source.describe(cfg), seq_length=seq_length,
                         sample_mode=scored.sample_mode)

"""Held-out validation that scores both objectives on the same fixed samples and masks, whatever the run trains.

The validation set is the first ``--eval-iters`` x ``--global-batch-size`` samples of the validation stream: the
validation documents of ``--split`` (the training stream holds only the training documents), or every document
of ``--valid-data-path``, cut into windows and ordered exactly like training samples (seed, seq length). The set
must fit in one pass over those documents. Every evaluation runs three forward passes per sample in the run's
parallel layout: bidirectional on the MLM-masked sample (MLM loss, MLM top-1 accuracy on the masked positions)
and causal on the sample itself (CLM loss). Validation sample k is masked as sample id ``2**62 + k`` with the
run's seed, a random stream no training sample uses, so two runs with the same seed, data, split, batch size and
``--eval-mask-ratio`` are scored on identical tokens.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch

from megamlm.config import (
    Config,
    eval_interval,
    eval_iters,
    split_weights,
    validation_enabled,
)
from megamlm.data import DataError, GlobalBatchSampler, build_validation_dataset
from megamlm.objectives import MaskingSpec
from megamlm.objectives.batch import make_batch
from megamlm.parallel.forward_backward import forward_metrics
from megamlm.parallel.parallelize import ParallelModel

VALIDATION_MASK_ID_BASE = 1 << 62
"""Validation sample k draws its mask from the stream of sample id VALIDATION_MASK_ID_BASE + k."""


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

    def scalars(self) -> dict[str, float]:
        return {"mlm_loss": self.mlm_loss, "mlm_accuracy": self.mlm_accuracy, "clm_loss": self.clm_loss}

    def describe(self) -> str:
        return (f"validation at step {self.step} | mlm loss {self.mlm_loss:.4f} | mlm accuracy "
                f"{self.mlm_accuracy:.4f} | clm loss {self.clm_loss:.4f} | {self.samples} samples | "
                f"{self.seconds:.1f} s")


class ValidationSet:
    """The run's fixed validation samples and when to score them."""

    def __init__(self, dataset, num_samples: int, global_batch_size: int, micro_batch_size: int, seed: int,
                 masking: MaskingSpec, interval: int, document_mask: bool = False):
        self.dataset, self.num_samples = dataset, num_samples
        self.global_batch_size, self.micro_batch_size = global_batch_size, micro_batch_size
        self.seed, self.masking, self.interval, self.document_mask = seed, masking, interval, document_mask

    def due(self, step: int, last_step: int, switch_step: int | None) -> bool:
        """Evaluate after ``step``: every ``interval`` steps, at the objective switch and at the last step."""
        return step % self.interval == 0 or step == last_step or step == switch_step

    def micro_batches(self, pm: ParallelModel) -> list[list[list[int]]]:
        """This data-parallel rank's micro-batches (sample ids) of each validation global batch."""
        sampler = GlobalBatchSampler(self.num_samples, self.global_batch_size, self.micro_batch_size,
                                     dp_rank=pm.dp_rank, dp_size=pm.dp_size)
        return list(sampler.global_batches(0))

    def evaluate(self, pm: ParallelModel, step: int, device: torch.device, precision: str = "auto") -> ValidationResult:
        """MLM loss and accuracy and CLM loss over every validation sample; the same result on every rank."""
        start = time.perf_counter()
        totals = {"mlm": np.zeros(3), "clm": np.zeros(3)}
        pm.train(False)
        try:
            for global_batch in self.micro_batches(pm):
                rows = [(np.stack([self.dataset[k] for k in ids]),
                         np.stack([self.dataset.document_ids(k) for k in ids]) if self.document_mask else None, ids)
                        for ids in global_batch]
                for objective in ("mlm", "clm"):
                    batches = [make_batch(objective, tokens, [VALIDATION_MASK_ID_BASE + k for k in ids], self.seed,
                                          self.masking, documents) for tokens, documents, ids in rows]
                    totals[objective] += forward_metrics(pm, batches, device, precision, accuracy=objective == "mlm")
        finally:
            pm.train(True)
        (mlm_loss, mlm_tokens, correct), (clm_loss, clm_tokens, _) = totals["mlm"], totals["clm"]
        return ValidationResult(step, mlm_loss / max(mlm_tokens, 1), correct / max(mlm_tokens, 1),
                                clm_loss / max(clm_tokens, 1), self.num_samples, int(mlm_tokens), int(clm_tokens),
                                time.perf_counter() - start)


def load_validation_set(cfg: Config, data_path: list[str], seq_length: int, vocab_size: int, masking: MaskingSpec,
                        group=None) -> ValidationSet | None:
    """The run's validation set (None without --split or --valid-data-path); a DataError, before any work, when
    it cannot hold ``--eval-iters`` global batches in one pass."""
    if not validation_enabled(cfg):
        return None
    t, v = cfg.training, cfg.validation
    num_samples = eval_iters(cfg) * t.global_batch_size
    source = cfg.data.valid_data_path or data_path
    dataset = build_validation_dataset(source, seq_length, num_samples, t.seed, cache_dir=cfg.data.data_cache_path,
                                       vocab_size=vocab_size, split=split_weights(cfg.data),
                                       group=group)
    available = dataset.first_pass_samples()
    if available < num_samples:
        where = f"--split {cfg.data.split}" if cfg.data.split else f"--valid-data-path {' '.join(source)}"
        raise DataError(f"--eval-iters {eval_iters(cfg)} x --global-batch-size {t.global_batch_size} = {num_samples} "
                        f"validation samples, but the validation set ({where}) holds {available} samples of "
                        f"{seq_length} tokens; lower --eval-iters to at most {available // t.global_batch_size}, or "
                        "give validation more documents")
    if v.eval_mask_ratio is not None:
        masking = dataclasses.replace(masking, mask_ratio=v.eval_mask_ratio)
    return ValidationSet(dataset, num_samples, t.global_batch_size, t.micro_batch_size, t.seed, masking,
                         eval_interval(cfg), cfg.performance.document_mask)

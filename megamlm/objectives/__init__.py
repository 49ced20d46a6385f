"""Objectives: MLM masking, MNTP and CLM targets, the sparse LM loss and the ObjectiveSchedule."""

from megamlm.objectives.batch import Batch
from megamlm.objectives.loss import sparse_lm_loss
from megamlm.objectives.masking import IGNORE_INDEX, MaskingSpec, clm_targets, mlm_mask, mntp_targets
from megamlm.objectives.schedule import ObjectiveSchedule

__all__ = ["IGNORE_INDEX", "MaskingSpec", "mlm_mask", "mntp_targets", "clm_targets", "sparse_lm_loss",
           "ObjectiveSchedule", "Batch"]

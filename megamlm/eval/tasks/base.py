"""What every task type provides to the fine-tuning loop: validated data, a model with its head,
training features with a collate function and a loss, and an evaluation that returns a main score."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from megamlm.eval.examples import SPLITS, TaskData
from megamlm.eval.readers import TaskDataError


@dataclass
class TaskSettings:
    """Input-shaping knobs shared by all runs of a task (not searched over, unlike LR and seed)."""
    max_length: int = 512
    """Longest input in tokens (documents and QA windows included)."""
    max_query_length: int = 64
    """Longest question (QA) or query (retrieval) in tokens."""
    doc_stride: int = 128
    """QA: tokens of overlap between consecutive windows of a long context."""
    max_answer_length: int = 30
    """QA: longest predicted answer in tokens."""
    no_answer_threshold: float = 0.0
    """QA: predict no answer when null score > best span score + threshold (SQuAD-v2 style data)."""
    temperature: float = 0.05
    """Retrieval: softmax temperature of the in-batch-negative contrastive loss (cosine similarities)."""
    eval_batch_size: int = 64


def pad(sequences: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(s) for s in sequences)
    return torch.tensor([list(s) + [value] * (width - len(s)) for s in sequences], dtype=torch.long)


def encode_batch(id_lists: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    input_ids = pad(id_lists, pad_id)
    attention_mask = pad([[1] * len(s) for s in id_lists], 0)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


class Task(ABC):
    kind: str
    metric: str
    """Name of the main score (the one used to pick the learning rate)."""

    def __init__(self, data: TaskData, tokenizer, settings: TaskSettings):
        self.data, self.tokenizer, self.settings = data, tokenizer, settings
        self.name = data.name
        for split in SPLITS:
            if split not in data.splits:
                raise TaskDataError(f"task {data.name}: no {split} split; provide train, validation and test")
            if len(data.splits[split]) == 0:
                raise TaskDataError(f"task {data.name}: the {split} split is empty ({data.source}); "
                                    f"add examples to it or choose another task")
        self.validate()

    @property
    def family(self) -> str:
        return self.data.family

    def validate(self) -> None:
        """Raise TaskDataError when the data cannot be used (labels that do not match, ...)."""

    @abstractmethod
    def build_model(self, encoder) -> torch.nn.Module: ...

    @abstractmethod
    def train_features(self) -> list: ...

    @abstractmethod
    def collate(self, features: list) -> dict: ...

    @abstractmethod
    def loss(self, model, batch: dict) -> torch.Tensor: ...

    @abstractmethod
    def evaluate(self, model, split: str, device: torch.device) -> dict[str, float]:
        """Scores on a split; the main one under "score" (in percent)."""


def label_vocabulary(task_name: str, train_labels, other_splits: dict[str, object]) -> list[str]:
    """Sorted train labels; every evaluation label must occur in train."""
    labels = sorted(set(train_labels))
    known = set(labels)
    for split, split_labels in other_splits.items():
        unknown = sorted(set(split_labels) - known)
        if unknown:
            raise TaskDataError(f"task {task_name}: {split} labels {unknown[:5]} do not occur in train "
                                f"(train labels: {labels[:20]}); make the label names match across splits")
    return labels

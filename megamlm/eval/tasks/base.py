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
    max_length: int | None = None
    """Longest input in tokens (texts, documents, retrieval queries, QA windows); None = the protocol's
    round(0.99 x the model's max_position_embeddings), e.g. 2,028 for a 2,048-position model."""
    max_query_length: int = 64
    """QA: longest question in tokens."""
    doc_stride: int | None = None
    """QA: tokens of overlap between consecutive windows of a long context; None = 128, or half the room a window
    leaves for context where that is less (short windows)."""
    max_answer_length: int = 30
    """QA: longest predicted answer in tokens."""
    no_answer_threshold: float = 0.0
    """QA: predict no answer when null score > best span score + threshold (SQuAD-v2 style data)."""
    temperature: float = 0.05
    """Retrieval: softmax temperature of the multiple-negatives ranking loss over cosine similarities
    (0.05 = sentence-transformers' scale of 20)."""
    classifier_pooling: str = "mean"
    """Sequence classification: pooling of EuroBERT's head, mean | late | bos. Mean, as the paper (arXiv
    2507.00994) reports; EncodEval's SC configs set none, so EuroBERT's model-config default, late, applied there
    (megamlm/eval/README.md, the protocol table)."""
    eval_batch_size: int = 64
    eurobert_inputs: bool | None = None
    """EuroBERT's input convention (text + EOS, no template); None = decided by the model's type."""
    unseen_labels: bool = False
    """Accept validation/test labels that train lacks (the linear probe, whose small fixed subsets may miss a rare
    label: it never predicts one, so such examples score as wrong); fine-tuning refuses them."""


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
        """Raise TaskDataError when the data cannot be used (labels that do not match, ...).

        A hook, not abstract: the base accepts any data and subclasses with checks override it."""
        return None

    @abstractmethod
    def build_model(self, encoder) -> torch.nn.Module: ...

    @abstractmethod
    def train_features(self) -> list: ...

    @abstractmethod
    def collate(self, features: list) -> dict: ...

    @abstractmethod
    def loss(self, model, batch: dict) -> torch.Tensor: ...

    def forward_backward(self, model, batch: dict, micro_batch_size: int, autocast) -> torch.Tensor:
        """Loss of the batch, its gradients accumulated over micro-batches as Hugging Face's trainer does
        (each micro-batch's mean loss / number of micro-batches); returns the batch loss."""
        size = len(next(iter(batch.values())))
        starts = range(0, size, micro_batch_size)
        total = torch.zeros(())
        for start in starts:
            micro = {k: v[start:start + micro_batch_size] for k, v in batch.items()}
            with autocast():
                loss = self.loss(model, micro) / len(starts)
            loss.backward()
            total = total + loss.detach().float().cpu()
        return total

    @abstractmethod
    def evaluate(self, model, split: str, device: torch.device) -> dict[str, float]:
        """Scores on a split; the main one under "score" (in percent)."""

    def evaluate_splits(self, model, splits, device: torch.device) -> dict[str, dict]:
        """Scores of several splits (retrieval overrides this to encode a shared corpus once)."""
        return {split: self.evaluate(model, split, device) for split in splits}

    def encode_texts(self, texts: list[str], with_bos: bool = False) -> list[list[int]]:
        """Token ids as the protocol feeds them: EuroBERT models get the text and its EOS without the
        tokenizer's template (EncodEval's convention; BOS first when `with_bos`), others the template."""
        tokenizer, s = self.tokenizer, self.settings
        if s.eurobert_inputs:
            bos = tokenizer.bos_token if with_bos and tokenizer.bos_token else ""
            return tokenizer([bos + t + tokenizer.eos_token for t in texts], add_special_tokens=False,
                             truncation=True, max_length=s.max_length)["input_ids"]
        return tokenizer(texts, truncation=True, max_length=s.max_length)["input_ids"]


def label_vocabulary(task_name: str, train_labels, other_splits: dict[str, object], unseen: bool = False) -> list[str]:
    """Sorted train labels; every evaluation label must occur in train (``unseen``: the other splits' labels that
    train lacks are added after them instead)."""
    labels = sorted(set(train_labels))
    known = set(labels)
    if unseen:
        return labels + sorted({label for split_labels in other_splits.values() for label in split_labels} - known)
    for split, split_labels in other_splits.items():
        unknown = sorted(set(split_labels) - known)
        if unknown:
            raise TaskDataError(f"task {task_name}: {split} labels {unknown[:5]} do not occur in train "
                                f"(train labels: {labels[:20]}); make the label names match across splits")
    return labels

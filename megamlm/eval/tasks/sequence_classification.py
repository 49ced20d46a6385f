"""Sequence classification (single texts or pairs): EuroBERT's head (dense, GELU, linear) with mean
pooling by default (the paper's; EuroBERT's own default is "late"), accuracy. The paper's pair tasks arrive as one
formatted text (paper_datasets.py); a user task with a `text_pair` is encoded as a pair with the tokenizer's
template."""

from __future__ import annotations

import torch

from megamlm.eval import metrics
from megamlm.eval.heads import SequenceClassifier
from megamlm.eval.model_io import segment_separator
from megamlm.eval.readers import TaskDataError
from megamlm.eval.tasks.base import Task, encode_batch, label_vocabulary


class SequenceClassification(Task):
    kind = "sequence_classification"
    metric = "accuracy"

    def validate(self):
        splits = self.data.splits
        self.labels = label_vocabulary(self.name, [e.label for e in splits["train"]],
                                       {s: [e.label for e in splits[s]] for s in ("validation", "test")},
                                       self.settings.unseen_labels)
        if len(self.labels) < 2:
            raise TaskDataError(f"task {self.name}: the train split has a single label {self.labels}; "
                                f"classification needs at least two")
        has_pair = {e.text_pair is not None for s in splits.values() for e in s}
        if len(has_pair) > 1:
            raise TaskDataError(f"task {self.name}: some examples have a text_pair and some do not; "
                                f"give every example a pair or none")
        self.label_ids = {label: i for i, label in enumerate(self.labels)}
        self._encoded: dict[str, list[list[int]]] = {}

    def encode_split(self, split: str) -> list[list[int]]:
        """Token ids of each example of ``split`` as the model is fed them (cached; the linear probe reads them)."""
        if split not in self._encoded:
            examples = self.data.splits[split]
            if examples[0].text_pair is None:
                ids = self.encode_texts([e.text for e in examples], with_bos=self.settings.classifier_pooling == "bos")
            else:
                sep = segment_separator(self.tokenizer)
                ids = self.tokenizer([e.text + sep for e in examples], [e.text_pair for e in examples],
                                     truncation=True, max_length=self.settings.max_length)["input_ids"]
            self._encoded[split] = ids
        return self._encoded[split]

    def build_model(self, encoder):
        return SequenceClassifier(encoder, len(self.labels), self.settings.classifier_pooling)

    def train_features(self):
        ids = self.encode_split("train")
        return [(x, self.label_ids[e.label]) for x, e in zip(ids, self.data.splits["train"])]

    def collate(self, features):
        batch = encode_batch([f[0] for f in features], self.tokenizer.pad_token_id)
        batch["labels"] = torch.tensor([f[1] for f in features], dtype=torch.long)
        return batch

    def loss(self, model, batch):
        logits = model(batch["input_ids"], batch["attention_mask"])
        return torch.nn.functional.cross_entropy(logits, batch["labels"])

    @torch.no_grad()
    def evaluate(self, model, split, device):
        ids, examples = self.encode_split(split), self.data.splits[split]
        predictions = []
        size = self.settings.eval_batch_size
        for start in range(0, len(ids), size):
            batch = encode_batch(ids[start:start + size], self.tokenizer.pad_token_id)
            logits = model(batch["input_ids"].to(device), batch["attention_mask"].to(device))
            predictions.extend(self.labels[i] for i in logits.argmax(-1).tolist())
        acc = metrics.accuracy(predictions, [e.label for e in examples])
        kept = {"aggregate": metrics.MEAN, "ids": list(range(len(examples))), "predictions": predictions,
                "parts": [[100.0 * (p == e.label)] for p, e in zip(predictions, examples)]}
        return {"score": 100.0 * acc, "accuracy": 100.0 * acc, "examples": len(examples), "predictions": kept}

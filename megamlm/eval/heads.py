"""Task heads over any Hugging Face encoder (AutoModel): EuroBERT's sequence-classification head
(dense, GELU, linear) with its poolings, a linear layer per token for tagging, two outputs per token
for extractive QA, and a mean-pooled bi-encoder for retrieval."""

from __future__ import annotations

import torch
from torch import nn


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the hidden states of the non-padding tokens."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


POOLINGS = ("late", "mean", "bos")


class _EncoderWithHead(nn.Module):
    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.hidden_size = encoder.config.hidden_size

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class SequenceClassifier(_EncoderWithHead):
    """EuroBERT's classification head (transformers' EuroBertForSequenceClassification): dense + GELU +
    linear, with `pooling` "mean" (mean of the hidden states over non-padding tokens, then the head; the paper's,
    arXiv 2507.00994), "late" (the head on every token, then the mean of the logits; EuroBERT's default) or "bos"
    (first token)."""

    def __init__(self, encoder: nn.Module, num_labels: int, pooling: str = "mean"):
        super().__init__(encoder)
        if pooling not in POOLINGS:
            raise ValueError(f"unknown classifier pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
        self.pooling = pooling
        self.dense = nn.Linear(self.hidden_size, self.hidden_size)
        self.activation = nn.GELU()
        self.classifier = nn.Linear(self.hidden_size, num_labels)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.activation(self.dense(x)))

    def forward(self, input_ids, attention_mask):
        hidden = self.hidden_states(input_ids, attention_mask)
        if self.pooling == "late":
            return mean_pool(self.head(hidden), attention_mask)
        pooled = hidden[:, 0] if self.pooling == "bos" else mean_pool(hidden, attention_mask)
        return self.head(pooled)


class TokenClassifier(_EncoderWithHead):
    def __init__(self, encoder: nn.Module, num_labels: int):
        super().__init__(encoder)
        self.classifier = nn.Linear(self.hidden_size, num_labels)

    def forward(self, input_ids, attention_mask):
        return self.classifier(self.hidden_states(input_ids, attention_mask))


class SpanExtractor(_EncoderWithHead):
    """Two outputs per token (a token-classification head with 2 labels), read as start and end logits."""

    def __init__(self, encoder: nn.Module):
        super().__init__(encoder)
        self.qa_outputs = nn.Linear(self.hidden_size, 2)

    def forward(self, input_ids, attention_mask):
        logits = self.qa_outputs(self.hidden_states(input_ids, attention_mask))
        start, end = logits.unbind(-1)
        return start, end


class BiEncoder(_EncoderWithHead):
    """One shared encoder for queries and documents; unit-length mean-pooled embeddings (so that dot
    products are the cosine similarities of sentence-transformers' mean pooling)."""

    def forward(self, input_ids, attention_mask):
        pooled = mean_pool(self.hidden_states(input_ids, attention_mask), attention_mask)
        return nn.functional.normalize(pooled, dim=-1)

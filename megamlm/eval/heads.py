"""Task heads over any Hugging Face encoder (AutoModel): mean pooling for sentence-level tasks, a
linear layer per token for tagging, two logits per token (start, end) for extractive QA."""

from __future__ import annotations

import torch
from torch import nn


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the hidden states of the non-padding tokens."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


class _EncoderWithHead(nn.Module):
    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.hidden_size = encoder.config.hidden_size

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class SequenceClassifier(_EncoderWithHead):
    def __init__(self, encoder: nn.Module, num_labels: int):
        super().__init__(encoder)
        self.classifier = nn.Linear(self.hidden_size, num_labels)

    def forward(self, input_ids, attention_mask):
        return self.classifier(mean_pool(self.hidden_states(input_ids, attention_mask), attention_mask))


class TokenClassifier(_EncoderWithHead):
    def __init__(self, encoder: nn.Module, num_labels: int):
        super().__init__(encoder)
        self.classifier = nn.Linear(self.hidden_size, num_labels)

    def forward(self, input_ids, attention_mask):
        return self.classifier(self.hidden_states(input_ids, attention_mask))


class SpanExtractor(_EncoderWithHead):
    """Start and end logits per token: QA as a two-label token classification."""

    def __init__(self, encoder: nn.Module):
        super().__init__(encoder)
        self.qa_outputs = nn.Linear(self.hidden_size, 2)

    def forward(self, input_ids, attention_mask):
        logits = self.qa_outputs(self.hidden_states(input_ids, attention_mask))
        start, end = logits.unbind(-1)
        return start, end


class BiEncoder(_EncoderWithHead):
    """One shared encoder for queries and documents; unit-length mean-pooled embeddings."""

    def forward(self, input_ids, attention_mask):
        pooled = mean_pool(self.hidden_states(input_ids, attention_mask), attention_mask)
        return nn.functional.normalize(pooled, dim=-1)

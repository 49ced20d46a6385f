"""Frozen features for the linear probe: the final layer's hidden states (after the final norm), mean-pooled over a
text's non-padding tokens (special tokens the tokenizer's template adds included), or over a word's sub-tokens.

Inputs are encoded exactly as the fine-tuning tasks encode them (``SequenceClassification.encode_split``,
``TokenClassification.encode_split``: the tokenizer's template, cut at ``max_length``), sorted by length and
batched, so padding costs little; padding is masked in either attention mode.
"""

from __future__ import annotations

import numpy as np
import torch

from megamlm.eval.frozen import FrozenModel
from megamlm.eval.tasks.base import encode_batch


def _batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices sorted by length (longest first), in batches of ``batch_size``."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def _states(frozen: FrozenModel, id_lists: list[list[int]], causal: bool, batch_size: int, device: torch.device):
    """Yields (indices, hidden states (batch, seq, H) as float32 on the CPU, attention mask) per batch."""
    pad_id = frozen.tokenizer.pad_token_id
    for indices in _batches([len(ids) for ids in id_lists], batch_size):
        batch = encode_batch([id_lists[i] for i in indices], pad_id)
        mask = batch["attention_mask"]
        states = frozen.hidden_states(batch["input_ids"].to(device), mask.to(device), causal)
        yield indices, states.float().cpu(), mask


def pooled_features(frozen: FrozenModel, id_lists: list[list[int]], causal: bool, batch_size: int = 32,
                    device: torch.device | str = "cpu") -> np.ndarray:
    """(texts, hidden) mean of each text's final-layer states over its non-padding tokens."""
    out = np.zeros((len(id_lists), frozen.model.args.hidden_size), dtype=np.float32)
    for indices, states, mask in _states(frozen, id_lists, causal, batch_size, torch.device(device)):
        weights = mask.unsqueeze(-1).to(states.dtype)
        out[indices] = ((states * weights).sum(1) / weights.sum(1).clamp(min=1)).numpy()
    return out


def word_features(frozen: FrozenModel, encoded: list[tuple[list[int], list[int]]], causal: bool, batch_size: int = 32,
                  device: torch.device | str = "cpu") -> list[dict[int, np.ndarray]]:
    """Per sentence, {word index: mean of the final-layer states of its sub-tokens}; ``encoded`` holds (token ids,
    word index of each token or -1). Words cut off by ``max_length`` have no entry."""
    out: list[dict[int, np.ndarray]] = [{} for _ in encoded]
    for indices, states, _ in _states(frozen, [ids for ids, _ in encoded], causal, batch_size, torch.device(device)):
        for row, i in enumerate(indices):
            owners = torch.tensor(encoded[i][1])
            for word in sorted(set(encoded[i][1]) - {-1}):
                out[i][word] = states[row, : len(owners)][owners == word].mean(0).numpy()
    return out

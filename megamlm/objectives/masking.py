"""MLM masking and CLM targets: pure functions of (seed, global sample index) and the tokens.

A mask never depends on the rank, the parallel layout, the micro-batch or the step it is drawn at:
each sample's random stream is a counter-based Philox generator keyed by (seed, sample index).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MaskingSpec:
    mask_ratio: float
    replace_prob: float
    random_prob: float
    keep_prob: float
    mask_id: int
    special_ids: tuple[int, ...]
    random_vocab_size: int
    """Random replacements are drawn from [0, random_vocab_size), skipping special ids."""


def sample_generator(seed: int, sample_index: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=np.array([seed, sample_index], dtype=np.uint64)))


def mlm_mask(tokens: np.ndarray, sample_index: int, seed: int, spec: MaskingSpec,
             document_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """tokens (seq,) -> (inputs, targets); targets are IGNORE_INDEX except at selected positions. A position whose
    ``document_ids`` entry is negative (a row's padding, ``data/documents.py``) is never selected; the random draws
    are the same either way, so a row without padding gets the mask it always got."""
    rng = sample_generator(seed, sample_index)
    n = tokens.shape[0]
    select_draw, kind_draw = rng.random(n), rng.random(n)
    random_tokens = rng.integers(0, spec.random_vocab_size, n)
    special = np.isin(tokens, np.asarray(spec.special_ids, dtype=tokens.dtype))
    selected = (select_draw < spec.mask_ratio) & ~special
    if document_ids is not None:
        selected &= np.asarray(document_ids) >= 0
    # Random replacements that land on a special id fall back to the mask token.
    random_tokens = np.where(np.isin(random_tokens, spec.special_ids), spec.mask_id, random_tokens)

    inputs = tokens.astype(np.int64, copy=True)
    to_mask = selected & (kind_draw < spec.replace_prob)
    to_random = selected & (kind_draw >= spec.replace_prob) & (kind_draw < spec.replace_prob + spec.random_prob)
    inputs[to_mask] = spec.mask_id
    inputs[to_random] = random_tokens[to_random]
    targets = np.where(selected, tokens, IGNORE_INDEX).astype(np.int64)
    return inputs, targets


def mntp_targets(tokens: np.ndarray, sample_index: int, seed: int, spec: MaskingSpec,
                 document_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Masked next-token prediction (LLM2Vec, BidirLM): tokens (seq,) -> (inputs, targets).

    The sample's MLM mask (same spec, same random stream), each masked token scored one position early: its target
    sits at position i-1, whose output predicts it, so an adapted decoder's LM head keeps predicting the next
    token. The first position has no predecessor and is never selected; with ``document_ids`` (document masks) nor
    is a position whose predecessor belongs to another document. Only predecessor positions carry a target, so
    sparse prediction applies as for MLM.
    """
    inputs, selected_targets = mlm_mask(tokens, sample_index, seed, spec, document_ids)
    selected = selected_targets != IGNORE_INDEX
    scored = selected.copy()
    scored[0] = False
    if document_ids is not None:
        scored[1:] &= np.asarray(document_ids)[1:] == np.asarray(document_ids)[:-1]
    inputs = np.where(selected & ~scored, tokens.astype(np.int64), inputs)  # not scored: shown as it is
    targets = np.full_like(inputs, IGNORE_INDEX)
    targets[:-1] = np.where(scored[1:], selected_targets[1:], IGNORE_INDEX)
    return inputs, targets


def clm_targets(tokens: np.ndarray, document_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """tokens (seq,) -> (inputs, targets): target of position i is token i+1; the last position has none. With
    ``document_ids`` (whole documents, ``data/documents.py``) nor has the last token of a document or padding (a
    negative id): no target crosses a document boundary."""
    inputs = tokens.astype(np.int64, copy=True)
    targets = np.full_like(inputs, IGNORE_INDEX)
    targets[:-1] = inputs[1:]
    if document_ids is not None:
        documents = np.asarray(document_ids)
        targets[:-1][(documents[1:] != documents[:-1]) | (documents[:-1] < 0)] = IGNORE_INDEX
    return inputs, targets


def document_positions(document_ids: np.ndarray) -> np.ndarray:
    """RoPE positions (batch, seq) that restart at 0 where each document (a run of equal ids) starts."""
    documents = np.asarray(document_ids)
    index = np.broadcast_to(np.arange(documents.shape[-1], dtype=np.int64), documents.shape)
    starts = np.ones(documents.shape, dtype=bool)
    starts[..., 1:] = documents[..., 1:] != documents[..., :-1]
    first = np.maximum.accumulate(np.where(starts, index, 0), axis=-1)
    return index - first

"""Top-k retrieval over a corpus that never sits in memory whole: corpus embeddings arrive in chunks,
each chunk is scored against every query, and only a running top-k per query is kept.

Memory is bounded by the queries, one chunk of embeddings and one (queries x chunk) block of scores,
whatever the corpus size (a 6,980-query x 8.8M-document dense score matrix would be about 247 GB).
"""

from __future__ import annotations

from typing import Iterable

import torch

SCORE_BLOCK_ELEMENTS = 1 << 24
"""Largest (queries x documents) block of scores computed at once: 16M floats, 64 MB."""


class RunningTopK:
    """The k best (score, document index) pairs of each query over all chunks seen so far."""

    def __init__(self, queries: torch.Tensor, k: int):
        self.queries = queries.float()
        self.k = k
        self.scores = torch.full((len(queries), 0), float("-inf"))
        self.indices = torch.zeros((len(queries), 0), dtype=torch.long)
        self.seen = 0

    def add(self, documents: torch.Tensor) -> None:
        """Score the next chunk of documents (their indices continue from the previous chunks)."""
        documents = documents.float()
        step = max(1, SCORE_BLOCK_ELEMENTS // max(1, len(self.queries)))
        for start in range(0, len(documents), step):
            block = documents[start:start + step]
            scores = self.queries @ block.T
            offset = self.seen + start
            if scores.shape[1] > self.k:
                scores, local = scores.topk(self.k, dim=1)
            else:
                local = torch.arange(scores.shape[1]).expand_as(scores)
            merged_scores = torch.cat([self.scores, scores], dim=1)
            merged_indices = torch.cat([self.indices, local + offset], dim=1)
            keep = min(self.k, merged_scores.shape[1])
            self.scores, order = merged_scores.topk(keep, dim=1)
            self.indices = merged_indices.gather(1, order)
        self.seen += len(documents)

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores, document indices), each (queries x min(k, documents)), best first."""
        return self.scores, self.indices


def streaming_top_k(queries: torch.Tensor, document_chunks: Iterable[torch.Tensor],
                    k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k documents per query by dot product, reading the corpus one chunk at a time."""
    running = RunningTopK(queries, k)
    for chunk in document_chunks:
        running.add(chunk)
    return running.result()

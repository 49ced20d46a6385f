"""Retrieval with a bi-encoder: queries and documents share the encoder, are mean-pooled and
normalised; training is contrastive with in-batch negatives (every other document of the batch is a
negative for a query); evaluation ranks the whole corpus by cosine similarity, NDCG@10 and MRR@10."""

from __future__ import annotations

import torch

from megamlm.eval import metrics
from megamlm.eval.heads import BiEncoder
from megamlm.eval.readers import TaskDataError
from megamlm.eval.tasks.base import Task, encode_batch

TOP_K = 10


class Retrieval(Task):
    kind = "retrieval"
    metric = "ndcg@10"

    def validate(self):
        for split, data in self.data.splits.items():
            judged = [q for q, rels in data.qrels.items() if any(r > 0 for r in rels.values())]
            if not judged:
                raise TaskDataError(f"task {self.name}: no {split} query has a relevant document (relevance > 0); "
                                    f"check the qrels file of that split")
            missing = sorted({d for rels in data.qrels.values() for d in rels if d not in data.corpus})[:3]
            if missing:
                raise TaskDataError(f"task {self.name}: {split} judgements name documents {missing} that are not "
                                    f"in the corpus; add them to the corpus or drop those judgements")
        self._tokens: dict[tuple[int, str], list[int]] = {}

    def _ids(self, texts: list[str], max_length: int) -> list[list[int]]:
        return self.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]

    def build_model(self, encoder):
        return BiEncoder(encoder)

    def train_features(self):
        data = self.data.splits["train"]
        pairs = [(data.queries[q], data.corpus[d]) for q, rels in data.qrels.items() for d, r in rels.items() if r > 0]
        queries = self._ids([q for q, _ in pairs], self.settings.max_query_length)
        documents = self._ids([d for _, d in pairs], self.settings.max_length)
        return list(zip(queries, documents))

    def collate(self, features):
        pad_id = self.tokenizer.pad_token_id
        queries, documents = encode_batch([f[0] for f in features], pad_id), encode_batch([f[1] for f in features], pad_id)
        return {"input_ids": queries["input_ids"], "attention_mask": queries["attention_mask"],
                "doc_input_ids": documents["input_ids"], "doc_attention_mask": documents["attention_mask"]}

    def loss(self, model, batch):
        queries = model(batch["input_ids"], batch["attention_mask"])
        documents = model(batch["doc_input_ids"], batch["doc_attention_mask"])
        similarities = queries @ documents.T / self.settings.temperature
        return torch.nn.functional.cross_entropy(similarities, torch.arange(len(queries), device=queries.device))

    def _embed(self, model, texts: list[str], max_length: int, device) -> torch.Tensor:
        ids = self._ids(texts, max_length)
        size = self.settings.eval_batch_size
        chunks = []
        for start in range(0, len(ids), size):
            batch = encode_batch(ids[start:start + size], self.tokenizer.pad_token_id)
            chunks.append(model(batch["input_ids"].to(device), batch["attention_mask"].to(device)).float().cpu())
        return torch.cat(chunks)

    @torch.no_grad()
    def evaluate(self, model, split, device):
        data = self.data.splits[split]
        doc_ids, query_ids = list(data.corpus), list(data.queries)
        documents = self._embed(model, [data.corpus[d] for d in doc_ids], self.settings.max_length, device)
        queries = self._embed(model, [data.queries[q] for q in query_ids], self.settings.max_query_length, device)
        top = (queries @ documents.T).topk(min(TOP_K, len(doc_ids)), dim=-1).indices.tolist()
        rankings = {q: [doc_ids[i] for i in row] for q, row in zip(query_ids, top)}
        scores = metrics.retrieval_scores(rankings, data.qrels, k=TOP_K)
        return {"score": scores["ndcg@10"], **scores, "queries": len(query_ids), "documents": len(doc_ids)}

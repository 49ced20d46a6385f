"""Retrieval with a bi-encoder, as EncodEval trains and scores it.

Queries and documents share the encoder, are mean-pooled and compared by cosine similarity. Training
is the cached multiple-negatives ranking loss (sentence-transformers' CachedMultipleNegativesRankingLoss,
GradCache): every other document of the batch is a negative for a query; the batch's embeddings are
first computed without gradients in mini-batches of --micro-batch-size, the loss and its gradient with
respect to the embeddings are computed on the whole batch, then each mini-batch is encoded again with
gradients and back-propagated with its cached embedding gradient. The gradients equal those of the
whole batch at once, with the memory of one mini-batch.

Evaluation reads the corpus in blocks (sorted by length within a block to waste little padding),
scores each block against the queries of every split that shares the corpus (validation and test are
scored in one pass), and keeps a running top-10 per query (megamlm.eval.ranking): memory stays bounded
whatever the corpus size. NDCG@10 (and MRR@10) over the judged queries.
"""

from __future__ import annotations

import contextlib
import time

import torch

from megamlm.eval import metrics
from megamlm.eval.heads import BiEncoder
from megamlm.eval.ranking import RunningTopK
from megamlm.eval.readers import TaskDataError
from megamlm.eval.tasks.base import Task, encode_batch

TOP_K = 10
CORPUS_BLOCK = 8192
"""Documents tokenized, sorted by length and encoded together before their embeddings are ranked."""
PROGRESS_SECONDS = 30.0


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
        self.log = print
        self.throughput: dict[str, float] = {}

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, truncation=True, max_length=self.settings.max_length)["input_ids"]

    def build_model(self, encoder):
        return BiEncoder(encoder)

    def train_features(self):
        data = self.data.splits["train"]
        return [(data.queries[q], data.corpus[d]) for q, rels in data.qrels.items() for d, r in rels.items() if r > 0]

    def collate(self, features):
        pad_id = self.tokenizer.pad_token_id
        queries = encode_batch(self._ids([f[0] for f in features]), pad_id)
        documents = encode_batch(self._ids([f[1] for f in features]), pad_id)
        return {"input_ids": queries["input_ids"], "attention_mask": queries["attention_mask"],
                "doc_input_ids": documents["input_ids"], "doc_attention_mask": documents["attention_mask"]}

    def ranking_loss(self, queries: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
        similarities = queries.float() @ documents.float().T / self.settings.temperature
        return torch.nn.functional.cross_entropy(similarities, torch.arange(len(queries), device=queries.device))

    def loss(self, model, batch):
        return self.ranking_loss(model(batch["input_ids"], batch["attention_mask"]),
                                 model(batch["doc_input_ids"], batch["doc_attention_mask"]))

    def forward_backward(self, model, batch, micro_batch_size, autocast):
        sides = (("input_ids", "attention_mask"), ("doc_input_ids", "doc_attention_mask"))
        size = len(batch["input_ids"])
        slices = [slice(s, s + micro_batch_size) for s in range(0, size, micro_batch_size)]
        rng_states, cached = [], []
        with torch.no_grad():
            for ids, mask in sides:
                parts = []
                for part in slices:
                    rng_states.append(_rng_state(batch[ids].device))
                    with autocast():
                        parts.append(model(batch[ids][part], batch[mask][part]).float())
                cached.append(torch.cat(parts).requires_grad_())
        loss = self.ranking_loss(*cached)
        loss.backward()
        states = iter(rng_states)
        for (ids, mask), embeddings in zip(sides, cached):
            for part in slices:
                with _restored_rng(next(states), batch[ids].device), autocast():
                    again = model(batch[ids][part], batch[mask][part]).float()
                again.backward(embeddings.grad[part])
        return loss.detach().cpu()

    def _embed_ids(self, model, ids: list[list[int]], device) -> torch.Tensor:
        size = self.settings.eval_batch_size
        chunks = []
        for start in range(0, len(ids), size):
            batch = encode_batch(ids[start:start + size], self.tokenizer.pad_token_id)
            chunks.append(model(batch["input_ids"].to(device), batch["attention_mask"].to(device)).float().cpu())
        return torch.cat(chunks)

    def _embed_block(self, model, texts: list[str], device) -> tuple[torch.Tensor, int]:
        """Embeddings in the given order, encoded longest first; and the number of tokens."""
        ids = self._ids(texts)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        embedded = self._embed_ids(model, [ids[i] for i in order], device)
        out = torch.empty_like(embedded)
        out[torch.tensor(order)] = embedded
        return out, sum(len(x) for x in ids)

    @torch.no_grad()
    def evaluate_splits(self, model, splits, device):
        results, groups = {}, []
        for split in splits:
            group = next((g for g in groups if self.data.splits[g[0]].corpus is self.data.splits[split].corpus), None)
            if group is None:
                groups.append([split])
            else:
                group.append(split)
        for group in groups:
            results.update(self._evaluate_group(model, group, device))
        return results

    @torch.no_grad()
    def evaluate(self, model, split, device):
        return self.evaluate_splits(model, [split], device)[split]

    def _evaluate_group(self, model, group: list[str], device) -> dict[str, dict]:
        corpus = self.data.splits[group[0]].corpus
        query_ids = [(split, q) for split in group for q in self.data.splits[split].queries]
        texts = [self.data.splits[split].queries[q] for split, q in query_ids]
        query_embeddings = torch.cat([self._embed_block(model, texts[i:i + CORPUS_BLOCK], device)[0]
                                      for i in range(0, len(texts), CORPUS_BLOCK)])
        running = RunningTopK(query_embeddings, TOP_K)
        doc_ids = list(corpus)
        started = last = time.perf_counter()
        tokens = 0
        for start in range(0, len(doc_ids), CORPUS_BLOCK):
            block = doc_ids[start:start + CORPUS_BLOCK]
            embeddings, block_tokens = self._embed_block(model, [corpus[d] for d in block], device)
            running.add(embeddings)
            tokens += block_tokens
            now = time.perf_counter()
            if now - last >= PROGRESS_SECONDS and start + len(block) < len(doc_ids):
                last = now
                self.log(f"  {self.name}: encoded {start + len(block):,}/{len(doc_ids):,} documents "
                         f"({(start + len(block)) / (now - started):.0f} docs/s)")
        seconds = max(time.perf_counter() - started, 1e-9)
        _, top = running.result()
        rankings: dict[str, dict[str, list[str]]] = {split: {} for split in group}
        for (split, q), row in zip(query_ids, top.tolist()):
            rankings[split][q] = [doc_ids[i] for i in row]
        speed = {"corpus_docs_per_s": len(doc_ids) / seconds, "corpus_tokens_per_s": tokens / seconds}
        if len(doc_ids) >= CORPUS_BLOCK:
            self.log(f"  {self.name}: encoded {len(doc_ids):,} documents for {', '.join(group)} in {seconds:.0f} s "
                     f"({speed['corpus_docs_per_s']:.0f} docs/s, {speed['corpus_tokens_per_s']:.0f} tokens/s)")
        out = {}
        for split in group:
            data = self.data.splits[split]
            scores = metrics.retrieval_scores(rankings[split], data.qrels, k=TOP_K)
            queries, parts = metrics.retrieval_parts(rankings[split], data.qrels, k=TOP_K)
            kept = {"aggregate": metrics.MEAN, "ids": queries, "predictions": [rankings[split].get(q, [])
                                                                                for q in queries], "parts": parts}
            out[split] = {"score": scores["ndcg@10"], **scores, "queries": len(data.queries),
                          "documents": len(doc_ids), **speed, "predictions": kept}
        return out


def _rng_state(device: torch.device):
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


@contextlib.contextmanager
def _restored_rng(state, device: torch.device):
    """Replay the random state of the first pass (dropout masks) for the pass with gradients."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], device)
        yield

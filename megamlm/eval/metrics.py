"""Scores used by the fine-tuning evaluation, each a plain function of predictions and references.

Span F1 follows the seqeval/CoNLL convention: an entity counts only if its type and both boundaries
match exactly, so a partial overlap is one false positive and one false negative. SQuAD EM/F1 use the
official answer normalisation; an example without gold answers is a no-answer question, scored 1 only
for an empty prediction. Ranking metrics treat a document without a judgement as relevance 0 and use
the relevance itself as the gain (trec_eval's and scikit-learn's NDCG; the same as 2^rel - 1 for the
binary judgements of the paper's protocol).

Confidence intervals and the comparison of two arms use scipy.stats: the t quantiles of a mean's interval, and
Welch's two-sided t-test (unequal variances) with its Welch-Satterthwaite interval for a difference of means,
Holm's step-down correction over the comparisons of one table (``welch``, ``compare``, ``holm``).
"""

from __future__ import annotations

import collections
import math
import re
import string
import warnings
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy import stats


def accuracy(predictions: Sequence, references: Sequence) -> float:
    if len(predictions) != len(references):
        raise ValueError(f"accuracy: {len(predictions)} predictions for {len(references)} references")
    if not references:
        raise ValueError("accuracy: no examples to score")
    return sum(p == r for p, r in zip(predictions, references)) / len(references)


def tagging_accuracy(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> float:
    """Token-level accuracy over all tokens of all sentences."""
    flat_pred, flat_ref = [], []
    for i, (p, r) in enumerate(zip(predictions, references, strict=True)):
        if len(p) != len(r):
            raise ValueError(f"tagging_accuracy: sentence {i} has {len(p)} predicted tags for {len(r)} tokens")
        flat_pred.extend(p)
        flat_ref.extend(r)
    return accuracy(flat_pred, flat_ref)


def bio_spans(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """Entity spans (type, start, end_exclusive) of one BIO/IOB2 sequence.

    An I- tag that does not continue an entity of its type starts a new entity (seqeval's default
    lenient reading of IOB1-style starts); "O" and anything without a B-/I- prefix ends an entity.
    """
    spans = set()
    current_type, start = None, 0
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, entity_type = tag.partition("-")
        if prefix not in ("B", "I") or not entity_type:
            prefix, entity_type = "O", None
        continues = prefix == "I" and entity_type == current_type
        if current_type is not None and not continues:
            spans.add((current_type, start, i))
            current_type = None
        if prefix in ("B", "I") and not continues:
            current_type, start = entity_type, i
    return spans


def span_f1(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro-averaged exact-match entity precision, recall and F1 over BIO-tagged sentences."""
    true_pos = pred_total = gold_total = 0
    for i, (p, r) in enumerate(zip(predictions, references, strict=True)):
        if len(p) != len(r):
            raise ValueError(f"span_f1: sentence {i} has {len(p)} predicted tags for {len(r)} tokens")
        pred_spans, gold_spans = bio_spans(p), bio_spans(r)
        true_pos += len(pred_spans & gold_spans)
        pred_total += len(pred_spans)
        gold_total += len(gold_spans)
    precision = true_pos / pred_total if pred_total else 0.0
    recall = true_pos / gold_total if gold_total else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def majority_vote(votes: Sequence[str]) -> str:
    """The most frequent label among a word's sub-token predictions; a tie goes to the earliest sub-token."""
    counts = collections.Counter(votes)
    best = max(counts.values())
    return next(v for v in votes if counts[v] == best)


def is_bio_tagset(labels: Iterable[str]) -> bool:
    """True when the label set looks like BIO entity tags (every label is O, B-X or I-X, and some B-)."""
    labels = list(labels)
    return any(label.startswith("B-") for label in labels) and all(
        label == "O" or (label[:2] in ("B-", "I-") and len(label) > 2) for label in labels)


_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop articles a/an/the, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _exact(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _token_f1(prediction: str, gold: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        # A no-answer on either side: right only if both are empty.
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str], gold_answers: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """SQuAD (v1 and v2) exact match and F1 in percent, max over gold answers, averaged over questions.

    `gold_answers[qid]` is a list of answer texts; an empty list marks a no-answer question, for which
    the empty prediction "" is correct. A question without a prediction counts as answered "".
    """
    if not gold_answers:
        raise ValueError("squad_scores: no questions to score")
    exact = f1 = 0.0
    has_ans = [0.0, 0.0, 0]
    no_ans = [0.0, 0.0, 0]
    for qid, golds in gold_answers.items():
        pred = predictions.get(qid, "")
        golds = [g for g in golds if normalize_answer(g)] or [""]
        e = max(_exact(pred, g) for g in golds)
        f = max(_token_f1(pred, g) for g in golds)
        exact += e
        f1 += f
        bucket = has_ans if golds != [""] else no_ans
        bucket[0] += e
        bucket[1] += f
        bucket[2] += 1
    n = len(gold_answers)
    out = {"exact": 100.0 * exact / n, "f1": 100.0 * f1 / n}
    for name, (e, f, count) in (("has_ans", has_ans), ("no_ans", no_ans)):
        if count:
            out[f"{name}_exact"] = 100.0 * e / count
            out[f"{name}_f1"] = 100.0 * f / count
    return out


def ndcg_at_k(ranking: Sequence[str], relevance: Mapping[str, float], k: int = 10) -> float:
    """NDCG@k with linear gains (the relevance) and log2 discounts; unjudged documents have relevance 0."""
    dcg = sum(max(relevance.get(doc, 0), 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:k]))
    ideal = sorted((r for r in relevance.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(rank + 2) for rank, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def mrr_at_k(ranking: Sequence[str], relevance: Mapping[str, float], k: int = 10) -> float:
    """Reciprocal rank of the first document with relevance > 0 within the top k, else 0."""
    for rank, doc in enumerate(ranking[:k]):
        if relevance.get(doc, 0) > 0:
            return 1.0 / (rank + 1)
    return 0.0


def retrieval_scores(rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, float]],
                     k: int = 10) -> dict[str, float]:
    """Mean NDCG@k and MRR@k (in percent) over the judged queries that have a relevant document."""
    queries = [q for q, rels in qrels.items() if any(r > 0 for r in rels.values())]
    if not queries:
        raise ValueError("retrieval_scores: no query has a relevant document in the judgements")
    ndcg = sum(ndcg_at_k(rankings.get(q, []), qrels[q], k) for q in queries) / len(queries)
    mrr = sum(mrr_at_k(rankings.get(q, []), qrels[q], k) for q in queries) / len(queries)
    return {f"ndcg@{k}": 100.0 * ndcg, f"mrr@{k}": 100.0 * mrr}


def mean_confidence_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean and the half-width of its t-distribution confidence interval (0 for a single value)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_confidence_interval: no values")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)


# ---- comparing two arms --------------------------------------------------------------------------------------

SIGNIFICANCE = 0.05
"""A difference is called significant at a Holm-adjusted p-value below this."""


@dataclass(frozen=True)
class Comparison:
    """mean(a) - mean(b) with Welch's two-sided t-test; NaN fields where the test cannot be made (fewer than 2
    values in an arm, or no spread in either)."""
    difference: float
    half_width: float
    """Of the difference's confidence interval (Welch-Satterthwaite degrees of freedom)."""
    dof: float
    p_value: float
    n_a: int
    n_b: int

    @property
    def tested(self) -> bool:
        return not math.isnan(self.p_value)


def welch(a, b, confidence: float = 0.95):
    """Welch's two-sided t-test of mean(a) - mean(b) over the last axis (arrays of shape (..., n_a) and
    (..., n_b), or lists): (difference, half-width of its ``confidence`` interval, Welch-Satterthwaite degrees
    of freedom, p-value), each an array over the leading axes (floats for 1-D inputs). The p-value is scipy's
    ``ttest_ind(equal_var=False)``; the interval is ``t.ppf(0.5 + confidence / 2, dof)`` standard errors either
    side. With fewer than 2 values in an arm, or no spread in either, everything but the difference is NaN."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n_a, n_b = a.shape[-1], b.shape[-1]
    if not n_a or not n_b:
        raise ValueError("welch: an arm has no values")
    difference = a.mean(axis=-1) - b.mean(axis=-1)
    nan = np.full(np.shape(difference), np.nan)
    if n_a < 2 or n_b < 2:
        return _scalar(difference), _scalar(nan), _scalar(nan), _scalar(nan)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # identical values: scipy's precision warning, NaN
        var_a, var_b = a.var(axis=-1, ddof=1) / n_a, b.var(axis=-1, ddof=1) / n_b
        spread = (var_a + var_b) > 0
        dof = np.where(spread, (var_a + var_b) ** 2 / (var_a ** 2 / (n_a - 1) + var_b ** 2 / (n_b - 1)), np.nan)
        half = np.where(spread, stats.t.ppf(0.5 + confidence / 2, dof) * np.sqrt(var_a + var_b), np.nan)
        p = np.where(spread, stats.ttest_ind(a, b, axis=-1, equal_var=False).pvalue, np.nan)
    return _scalar(difference), _scalar(half), _scalar(dof), _scalar(p)


def _scalar(x):
    return float(x) if np.ndim(x) == 0 else x


def compare(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Comparison:
    """``welch`` of two lists of values (one per seed) as a Comparison."""
    return Comparison(*welch(list(a), list(b), confidence), n_a=len(a), n_b=len(b))


def holm(p_values):
    """Holm's step-down adjustment of one family of p-values (the last axis; a list or an array of shape
    (..., m)): the i-th smallest of the k tested ones becomes max over j <= i of min(1, (k - j + 1) p_(j)).
    NaN (not tested) stays NaN and is not counted in the family."""
    p = np.asarray(p_values, dtype=float)
    tested = ~np.isnan(p)
    k = tested.sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(tested, p, np.inf), axis=-1)
    ranked = np.take_along_axis(p, order, axis=-1)
    factor = k - np.arange(p.shape[-1])
    with np.errstate(invalid="ignore"):
        scaled = np.where(np.take_along_axis(tested, order, axis=-1), np.minimum(1.0, factor * ranked), -np.inf)
    scaled = np.maximum.accumulate(scaled, axis=-1)
    adjusted = np.empty_like(p)
    np.put_along_axis(adjusted, order, scaled, axis=-1)
    adjusted = np.where(tested, adjusted, np.nan)
    return adjusted.tolist() if isinstance(p_values, (list, tuple)) else adjusted


# ---- per-example parts: what a corpus score is summed from ---------------------------------------------------

MEAN, RATIO, SPAN_F1 = "mean", "ratio", "span_f1"
"""How a split's main score is made from its examples' parts (summed over examples): ``mean``, 100 x sum of the
first part / examples (accuracy, SQuAD F1, nDCG@10: each example's score, in percent, is its first part);
``ratio``, 100 x sum(first) / sum(second) (tagging accuracy: right words, words); ``span_f1``,
100 x 2 sum(tp) / (sum(predicted) + sum(gold)) (entity spans)."""


def score_from_parts(aggregate: str, parts) -> float | np.ndarray:
    """The main score from per-example parts (..., examples, k): over the examples axis, as ``aggregate`` says."""
    parts = np.asarray(parts, dtype=float)
    sums, n = parts.sum(axis=-2), parts.shape[-2]
    if aggregate == MEAN:
        return sums[..., 0] / n
    with np.errstate(divide="ignore", invalid="ignore"):
        if aggregate == RATIO:
            return 100.0 * sums[..., 0] / sums[..., 1]
        if aggregate == SPAN_F1:
            total = sums[..., 1] + sums[..., 2]
            return np.where(total > 0, 100.0 * 2 * sums[..., 0] / np.where(total > 0, total, 1), 0.0)
    raise ValueError(f"score_from_parts: unknown aggregate {aggregate!r}")


def tagging_parts(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
                  spans: bool) -> tuple[str, list[list[float]]]:
    """Per sentence, the parts of tagging accuracy (right words, words) or of span F1 (spans right, predicted,
    gold): summed over sentences they give ``tagging_accuracy`` and ``span_f1`` exactly."""
    if spans:
        parts = []
        for p, r in zip(predictions, references):
            predicted, gold = bio_spans(p), bio_spans(r)
            parts.append([float(len(predicted & gold)), float(len(predicted)), float(len(gold))])
        return SPAN_F1, parts
    return RATIO, [[float(sum(a == b for a, b in zip(p, r))), float(len(r))] for p, r in zip(predictions, references)]


def squad_parts(predictions: Mapping[str, str], gold_answers: Mapping[str, Sequence[str]]) -> list[list[float]]:
    """Per question (in ``gold_answers``' order), its F1 and exact match in percent, as ``squad_scores`` scores it:
    their means are its f1 and exact."""
    parts = []
    for qid, golds in gold_answers.items():
        pred = predictions.get(qid, "")
        golds = [g for g in golds if normalize_answer(g)] or [""]
        parts.append([100.0 * max(_token_f1(pred, g) for g in golds), 100.0 * max(_exact(pred, g) for g in golds)])
    return parts


def retrieval_parts(rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, float]],
                    k: int = 10) -> tuple[list[str], list[list[float]]]:
    """(the scored queries, per query its nDCG@k and MRR@k in percent): their means are ``retrieval_scores``."""
    queries = [q for q, rels in qrels.items() if any(r > 0 for r in rels.values())]
    return queries, [[100.0 * ndcg_at_k(rankings.get(q, []), qrels[q], k), 100.0 * mrr_at_k(rankings.get(q, []),
                                                                                             qrels[q], k)]
                     for q in queries]

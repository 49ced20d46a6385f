"""Trivial baselines: what a task's score is without any model, each learned (where it learns anything) from the
train split alone and scored with the task's own metric (megamlm.eval.metrics) on the same validation and test
examples the fine-tuned models are scored on.

- sequence classification, ``majority``: the most frequent train label for every example (a tie goes to the label
  first in sorted order, as the task's label vocabulary); and the lexical classifiers ``tf-idf+logreg`` and
  ``naive-bayes`` over word and character n-grams, each chosen on validation among its settings
  (megamlm.eval.lexical);
- token classification, ``per-word-tag``: each word's most frequent train tag, and the most frequent train tag
  overall for a word train never shows (ties: the tag seen first in train); scored like the task, span F1 for BIO
  tags and tagging accuracy otherwise;
- question answering, ``no-answer``: the empty answer everywhere; and ``rule``: the best of a few rule extractors
  (``QA_RULES``: speaker rules written for the Austen QA tasks, and two generic name rules), chosen by F1 on the
  train split, then scored on validation and test (the chosen rule and every rule's train F1 are named in the
  row's description), for every QA task: a task some rule answers is measured against that rule;
- retrieval, ``tf-idf``: scikit-learn's TfidfVectorizer (defaults: lowercased words of 2+ characters, smoothed idf,
  L2-normalised rows) fitted on the split's corpus, documents ranked by cosine similarity to the query (ties in
  corpus order), nDCG@10 and MRR@10 as the task scores them.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from megamlm.eval import lexical, metrics
from megamlm.eval.examples import QAExample, RetrievalSplit, TaskData

EVAL_SPLITS = ("validation", "test")


@dataclass
class Baseline:
    name: str
    """Short name; shown as the model ``baseline:NAME`` in tables."""
    description: str
    metric: str
    """The task's main score, as its Task names it."""
    validation: dict
    test: dict
    """Scores as a fine-tuning run's (the main one under "score", in percent)."""


# ---- sequence classification ---------------------------------------------------------------------------------

def majority_class(data: TaskData) -> Baseline:
    counts = collections.Counter(e.label for e in data.splits["train"])
    label = min(counts, key=lambda lab: (-counts[lab], lab))
    scores = {}
    for split in EVAL_SPLITS:
        examples = data.splits[split]
        acc = 100.0 * metrics.accuracy([label] * len(examples), [e.label for e in examples])
        scores[split] = {"score": acc, "accuracy": acc, "examples": len(examples)}
    return Baseline("majority", f"always {label!r}, the most frequent train label", "accuracy", **scores)


def lexical_classifier(data: TaskData, kind: str) -> Baseline:
    """A lexical classifier (``lexical.LEXICAL_CLASSIFIERS``) chosen on validation, its test accuracy at that
    choice."""
    best, scores, tried = lexical.chosen_on_validation(data, kind)
    grid = ", ".join(f"{c.view} {c.strength:g} {v:.1f}" for c, v in tried.items())
    description = (f"{lexical.LEXICAL_CLASSIFIERS[kind]} over {best.view} ({'C' if 'logreg' in kind else 'alpha'} "
                   f"{best.strength:g}), chosen on validation among: {grid}")
    out = {split: {"score": scores[split], "accuracy": scores[split], "examples": len(data.splits[split])}
           for split in EVAL_SPLITS}
    return Baseline(kind, description, "accuracy", **out)


# ---- token classification ------------------------------------------------------------------------------------

def per_word_tag(data: TaskData) -> Baseline:
    per_word: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    overall: collections.Counter = collections.Counter()
    for sentence in data.splits["train"]:
        for word, tag in zip(sentence.tokens, sentence.tags):
            per_word[word][tag] += 1
            overall[tag] += 1
    fallback = overall.most_common(1)[0][0]
    best = {word: counts.most_common(1)[0][0] for word, counts in per_word.items()}
    spans = metrics.is_bio_tagset(overall)
    scores = {}
    for split in EVAL_SPLITS:
        sentences = data.splits[split]
        predicted = [[best.get(w, fallback) for w in s.tokens] for s in sentences]
        gold = [s.tags for s in sentences]
        out = {"accuracy": 100.0 * metrics.tagging_accuracy(predicted, gold), "examples": len(sentences)}
        if spans:
            f1 = metrics.span_f1(predicted, gold)
            out.update({"span_precision": 100.0 * f1["precision"], "span_recall": 100.0 * f1["recall"],
                        "span_f1": 100.0 * f1["f1"]})
        out["score"] = out["span_f1" if spans else "accuracy"]
        scores[split] = out
    return Baseline("per-word-tag", f"each word's most frequent train tag, else {fallback!r} (the most frequent)",
                    "span_f1" if spans else "accuracy", **scores)


# ---- question answering --------------------------------------------------------------------------------------

_VERBS = r"(?:said|cried|replied|answered|returned|added|continued|asked|exclaimed)"
_NAME = r"((?:(?:Mrs?|Dr)\.?\s+|Miss\s+|Lady\s+|Sir\s+|Colonel\s+|Captain\s+|Admiral\s+)?[A-Z][a-z]+)"
_AFTER_QUOTE = re.compile(r'[,!?]"\s+' + _VERBS + r"\s+" + _NAME)
_TITLED = re.compile(r"\b((?:Mrs?|Dr)\.\s+[A-Z][a-z]+|(?:Miss|Lady|Sir|Colonel|Captain|Admiral)\s+[A-Z][a-z]+)")
_MID_SENTENCE_NAME = re.compile(r"(?<=[a-z,;] )([A-Z][a-z]+)")
_QUOTED = re.compile(r'"([^"]+)"')


def _first(pattern: re.Pattern) -> Callable[[QAExample], str]:
    def rule(example: QAExample) -> str:
        match = pattern.search(example.context)
        return match.group(1) if match else ""
    return rule


_VERB_THEN_NAME = re.compile(_VERBS + r"\s+" + _NAME)


def _fragment_start(example: QAExample) -> int:
    """Where the question's quoted words start in the context; -1 where the question quotes nothing found there."""
    quoted = _QUOTED.search(example.question)
    return example.context.find(quoted.group(1).rstrip("?!.,")) if quoted else -1


def _speaker_of_quoted_words(example: QAExample) -> str:
    """The name after the speech verb that follows the quote holding the question's quoted words."""
    start = _fragment_start(example)
    if start < 0:
        return ""
    match = _AFTER_QUOTE.search(example.context, start)
    return match.group(1) if match else ""


def _speaker_before_quoted_words(example: QAExample) -> str:
    """The name after the last speech verb before the question's quoted words."""
    start = _fragment_start(example)
    if start < 0:
        return ""
    before = list(_VERB_THEN_NAME.finditer(example.context, 0, start))
    return before[-1].group(1) if before else ""


def _speaker_around_quoted_words(example: QAExample) -> str:
    """Two cases: the name right after the quote holding the quoted words where a speech verb follows its closing
    mark (`"A," said X`), else the name after the last speech verb before them (`said X, "B"`)."""
    start = _fragment_start(example)
    if start < 0:
        return ""
    close = example.context.find('"', start)
    after = _AFTER_QUOTE.match(example.context, close - 1) if close > 0 else None
    return after.group(1) if after else _speaker_before_quoted_words(example)


QA_RULES: dict[str, tuple[str, Callable[[QAExample], str]]] = {
    "speaker-after-quote": ("the first capitalised name after a speech verb (said, cried, ...) that follows a "
                            "closing quote, else no answer", _first(_AFTER_QUOTE)),
    "speaker-of-quoted-words": ("the name after the speech verb following the quote that holds the question's "
                                "quoted words, else no answer", _speaker_of_quoted_words),
    "speaker-before-quoted-words": ("the name after the last speech verb before the question's quoted words, else "
                                    "no answer", _speaker_before_quoted_words),
    "speaker-around-quoted-words": ("two cases: the name after the speech verb right after the quote holding the "
                                    "question's quoted words, else the name after the last speech verb before "
                                    "them", _speaker_around_quoted_words),
    "first-titled-name": ("the first titled name (Mr. X, Miss X, ...), else no answer", _first(_TITLED)),
    "first-mid-sentence-name": ("the first capitalised word inside a sentence, else no answer",
                                _first(_MID_SENTENCE_NAME)),
}
"""Candidate rule extractors for extractive QA (written for the Austen speaker questions, tried on every QA task;
the best on train is the task's ``rule`` baseline): name -> (what it answers, the rule)."""


def _qa_scores(examples: list[QAExample], answer: Callable[[QAExample], str]) -> dict:
    scores = metrics.squad_scores({e.id: answer(e) for e in examples}, {e.id: [a for a, _ in e.answers]
                                                                        for e in examples})
    return {"score": scores["f1"], **scores, "examples": len(examples)}


def no_answer(data: TaskData) -> Baseline:
    scores = {split: _qa_scores(data.splits[split], lambda e: "") for split in EVAL_SPLITS}
    return Baseline("no-answer", "the empty answer for every question", "f1", **scores)


def best_rule(data: TaskData, rules: dict[str, tuple[str, Callable[[QAExample], str]]] = QA_RULES) -> Baseline:
    """The rule with the best train F1 (ties: the first listed), scored on validation and test."""
    train = {name: _qa_scores(data.splits["train"], rule)["score"] for name, (_, rule) in rules.items()}
    name = max(train, key=lambda n: train[n])
    description, rule = rules[name]
    scores = {split: _qa_scores(data.splits[split], rule) for split in EVAL_SPLITS}
    tried = ", ".join(f"{n} {f:.1f}" for n, f in train.items())
    return Baseline("rule", f"{name}: {description} (best train F1 of: {tried})", "f1", **scores)


# ---- retrieval -----------------------------------------------------------------------------------------------

TOP_K = 10
DOCUMENT_BLOCK = 4096


def lexical_rankings(split: RetrievalSplit, k: int = TOP_K) -> dict[str, list[str]]:
    """Each query's k best documents by TF-IDF cosine similarity (the vectorizer fitted on the split's corpus)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    doc_ids, query_ids = list(split.corpus), list(split.queries)
    vectorizer = TfidfVectorizer(dtype=np.float32)
    documents = vectorizer.fit_transform([split.corpus[d] for d in doc_ids])
    queries = vectorizer.transform([split.queries[q] for q in query_ids])
    best_scores = np.full((len(query_ids), 0), -np.inf, dtype=np.float32)
    best_index = np.zeros((len(query_ids), 0), dtype=np.int64)
    for start in range(0, len(doc_ids), DOCUMENT_BLOCK):
        block = (queries @ documents[start:start + DOCUMENT_BLOCK].T).toarray()
        scores = np.concatenate([best_scores, block], axis=1)
        index = np.concatenate([best_index, np.arange(start, start + block.shape[1])[None].repeat(len(query_ids), 0)],
                               axis=1)
        order = np.lexsort((index, -scores), axis=1)[:, :k]  # best score first, ties in corpus order
        best_scores, best_index = np.take_along_axis(scores, order, 1), np.take_along_axis(index, order, 1)
    return {q: [doc_ids[i] for i in row] for q, row in zip(query_ids, best_index.tolist())}


def lexical_ranking(data: TaskData) -> Baseline:
    scores = {}
    for split in EVAL_SPLITS:
        content = data.splits[split]
        out = metrics.retrieval_scores(lexical_rankings(content), content.qrels, k=TOP_K)
        scores[split] = {"score": out[f"ndcg@{TOP_K}"], **out, "queries": len(content.queries),
                         "documents": len(content.corpus)}
    return Baseline("tf-idf", "scikit-learn TF-IDF (fitted on the split's corpus), cosine ranking", f"ndcg@{TOP_K}",
                    **scores)


LEXICAL_BASELINES = {
    "sequence_classification": tuple(lexical.LEXICAL_CLASSIFIERS),
    "token_classification": ("per-word-tag",),
    "question_answering": ("rule",),
    "retrieval": ("tf-idf",),
}
"""Every task kind's lexical baselines (names of its ``trivial_baselines`` rows): what word identity alone scores,
the floor every arm is held to beside random init (``study/evidence/informative.py``)."""


def trivial_baselines(data: TaskData) -> list[Baseline]:
    """The task's trivial baselines (module docstring), computed without training."""
    if data.kind == "sequence_classification":
        return [majority_class(data), *(lexical_classifier(data, kind) for kind in lexical.LEXICAL_CLASSIFIERS)]
    if data.kind == "token_classification":
        return [per_word_tag(data)]
    if data.kind == "question_answering":
        return [no_answer(data), best_rule(data)]
    return [lexical_ranking(data)]

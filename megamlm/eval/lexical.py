"""Lexical baselines of sequence classification: what word and character n-gram counts alone score on a task, each
a scikit-learn classifier trained on the train split and chosen on validation exactly as the fine-tuned models'
learning rate is (the best validation accuracy over its settings; ties: the first listed), then scored on test.

- ``tf-idf+logreg``: TF-IDF features (sublinear tf, terms in at least 2 train examples) and an L2 logistic
  regression, over word 1-2-grams or character 2-5-grams inside word boundaries (``char_wb``), C in ``C_GRID``;
- ``naive-bayes``: multinomial naive Bayes over the same word or character n-gram counts, alpha in ``ALPHA_GRID``.

Both train on at most ``MAX_TRAIN`` examples of a larger train split (a fixed random subset).

A pair example (``text_pair``) is read as one bag: the n-grams of its text and of its pair, added up, so neither a
segment's position nor the junction between them is a feature. That is what "a bag of words" means for a pair, and
why a task whose two orderings of the same segments are both present (``order_tasks.py``) leaves every such
classifier at chance by construction: its two examples have the same features and opposite labels.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from megamlm.eval import metrics
from megamlm.eval.examples import TaskData, TextExample
from megamlm.extras import require

ANALYZERS = {"word 1-2-grams": ("word", (1, 2)), "character 2-5-grams": ("char_wb", (2, 5))}
"""The n-gram views every classifier is tried on: name -> (scikit-learn analyzer, n-gram range)."""
MAX_TRAIN = 20_000
"""At most this many train examples (a fixed random subset) per classifier: the paper's largest sets (MNLI, QQP:
hundreds of thousands of pairs) would take the character n-gram logistic regression hours on a CPU."""
C_GRID = (1.0, 10.0)
ALPHA_GRID = (0.1, 1.0)
MIN_DF = 2


@dataclass(frozen=True)
class Candidate:
    """One setting of one lexical classifier."""
    view: str
    """A key of ``ANALYZERS``."""
    strength: float
    """C of the logistic regression, alpha of naive Bayes."""


def _bag_analyzer(view: str) -> Callable[[tuple[str, str | None]], list[str]]:
    """The n-grams of an example (text, pair): the text's followed by the pair's, never one across them."""
    from sklearn.feature_extraction.text import CountVectorizer

    analyzer, ngrams = ANALYZERS[view]
    base = CountVectorizer(analyzer=analyzer, ngram_range=ngrams, lowercase=True).build_analyzer()
    return lambda example: base(example[0]) + (base(example[1]) if example[1] else [])


def _inputs(examples: list[TextExample]) -> list[tuple[str, str | None]]:
    return [(e.text, e.text_pair) for e in examples]


def _pipeline(kind: str, candidate: Candidate):
    require("sklearn", "the lexical baselines of sequence classification (eval/lexical.py)")
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.pipeline import make_pipeline

    analyzer = _bag_analyzer(candidate.view)
    if kind == "tf-idf+logreg":
        return make_pipeline(TfidfVectorizer(analyzer=analyzer, min_df=MIN_DF, sublinear_tf=True),
                             LogisticRegression(C=candidate.strength, max_iter=2000))
    return make_pipeline(CountVectorizer(analyzer=analyzer, min_df=MIN_DF), MultinomialNB(alpha=candidate.strength))


def candidates(kind: str) -> list[Candidate]:
    grid = C_GRID if kind == "tf-idf+logreg" else ALPHA_GRID
    return [Candidate(view, strength) for view in ANALYZERS for strength in grid]


def _accuracy(model, examples: list[TextExample]) -> float:
    return 100.0 * metrics.accuracy(list(model.predict(_inputs(examples))), [e.label for e in examples])


def chosen_on_validation(data: TaskData, kind: str) -> tuple[Candidate, dict[str, float], dict[Candidate, float]]:
    """Train every candidate of ``kind`` on train; the best on validation (ties: the first listed), its validation
    and test accuracy, and every candidate's validation accuracy."""
    train = data.splits["train"]
    if len(train) > MAX_TRAIN:
        train = [train[i] for i in sorted(random.Random(0).sample(range(len(train)), MAX_TRAIN))]
    tried: dict[Candidate, float] = {}
    fitted = {}
    for candidate in candidates(kind):
        model = _pipeline(kind, candidate).fit(_inputs(train), [e.label for e in train])
        tried[candidate] = _accuracy(model, data.splits["validation"])
        fitted[candidate] = model
    best = max(tried, key=lambda c: tried[c])  # max keeps the first of equal values
    scores = {"validation": tried[best], "test": _accuracy(fitted[best], data.splits["test"])}
    return best, scores, tried


LEXICAL_CLASSIFIERS = {
    "tf-idf+logreg": "TF-IDF + logistic regression",
    "naive-bayes": "multinomial naive Bayes",
}
"""The lexical baselines of sequence classification: name -> what it is."""


def grid_settings() -> dict:
    """What determines the lexical baselines besides the data (part of the stored baselines' fingerprint)."""
    return {"views": {name: [a, list(n)] for name, (a, n) in ANALYZERS.items()}, "C": list(C_GRID),
            "alpha": list(ALPHA_GRID), "min_df": MIN_DF, "max_train": MAX_TRAIN}

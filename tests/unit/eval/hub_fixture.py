"""Tiny local copies of the Hub datasets behind the paper's 12 tasks, with the Hub's schemas (column names,
ClassLabel features, split names, configs), and a stand-in for `datasets.load_dataset` that serves them:
the tests exercise the online loading path without the network."""

from __future__ import annotations

import random

WORDS = "the cat sat on a mat Elizabeth said that Darcy was proud and Jane smiled at Bingley in the rain".split()
NER = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _glue(datasets, config: str):
    rng = random.Random(config)
    if config == "sst2":
        columns, names = ("sentence",), ["negative", "positive"]
    elif config == "qqp":
        columns, names = ("question1", "question2"), ["not_duplicate", "duplicate"]
    else:
        columns, names = ("premise", "hypothesis"), ["entailment", "neutral", "contradiction"]
    features = datasets.Features({**{c: datasets.Value("string") for c in columns},
                                  "label": datasets.ClassLabel(names=names), "idx": datasets.Value("int32")})

    def rows(n, hidden=False):
        return [{**{c: _sentence(rng, 5) for c in columns}, "label": -1 if hidden else i % len(names), "idx": i}
                for i in range(n)]
    splits = {"train": rows(40), "validation": rows(6), "test": rows(4, hidden=True)}
    if config == "mnli":
        splits = {"train": rows(40), "validation_matched": rows(6), "validation_mismatched": rows(5),
                  "test_matched": rows(3, hidden=True), "test_mismatched": rows(3, hidden=True)}
    return {k: datasets.Dataset.from_list(v, features=features) for k, v in splits.items()}


def _tagging(datasets, tokens: str, tags: str, extra: dict | None = None):
    rng = random.Random(tokens + tags)
    features = datasets.Features({**(extra or {}), tokens: datasets.Sequence(datasets.Value("string")),
                                  tags: datasets.Sequence(datasets.ClassLabel(names=NER))})

    def rows(n):
        out = []
        for i in range(n):
            words = ["Elizabeth", "Bennet", "walked", "to", "Netherfield", "Park", rng.choice(WORDS)]
            row = {tokens: words, tags: [1, 2, 0, 0, 3, 4, 0]}
            if extra:
                row.update({"idx": str(i), "text": " ".join(words), "annotator": "a"})
            out.append(row)
        return out
    return {k: datasets.Dataset.from_list(rows(n), features=features)
            for k, n in (("train", 12), ("validation", 3), ("test", 3))}


def _squad(datasets, v2: bool):
    context = "Elizabeth said that Darcy was proud and Jane smiled at Bingley in the rain"

    def rows(n, prefix):
        out = []
        for i in range(n):
            if v2 and i % 3 == 2:
                answers = {"text": [], "answer_start": []}
            else:
                answers = {"text": ["Darcy"], "answer_start": [context.index("Darcy")]}
            out.append({"id": f"{prefix}{i}", "title": "t", "context": context, "question": "Who was proud?",
                        "answers": answers})
        return out
    return {"train": datasets.Dataset.from_list(rows(40, "tr")),
            "validation": datasets.Dataset.from_list(rows(5, "va"))}


def _record(datasets):
    """hgissbkh/record as EncodEval reads it: SQuAD's columns (context, question, answers)."""
    context = "Anne met Wentworth in Bath and Anne smiled"

    def rows(n):
        return [{"context": context, "question": "_ met Wentworth in Bath",
                 "answers": {"text": ["Anne", "Anne"], "answer_start": [0, context.rindex("Anne")]}} for _ in range(n)]
    return {"train": datasets.Dataset.from_list(rows(40)), "validation": datasets.Dataset.from_list(rows(4))}


def _beir(datasets, prefix: str, with_title: bool):
    corpus = [{"_id": f"{prefix}d{i}", "title": f"Title {i}" if with_title else "",
               "text": _sentence(random.Random(i), 8)}
              for i in range(30)]
    queries = [{"_id": f"{prefix}q{i}", "text": _sentence(random.Random(100 + i), 4)} for i in range(12)]
    return {"corpus": {"corpus": datasets.Dataset.from_list(corpus)},
            "queries": {"queries": datasets.Dataset.from_list(queries)}}


def _qrels(datasets, prefix: str, splits: dict[str, range]):
    out = {}
    for split, queries in splits.items():
        rows = []
        for i in queries:
            rows.append({"query-id": f"{prefix}q{i}", "corpus-id": f"{prefix}d{i}", "score": 1})
            rows.append({"query-id": f"{prefix}q{i}", "corpus-id": f"{prefix}d{i + 12}", "score": 0})
        out[split] = datasets.Dataset.from_list(rows)
    return out


def _mldr(datasets):
    def rows(queries):
        return [{"query_id": f"m{i}", "query": _sentence(random.Random(200 + i), 4),
                 "positive_passages": [{"docid": f"md{i}", "text": "x", "title": ""}],
                 "negative_passages": [{"docid": f"md{i + 20}", "text": "y", "title": ""}]} for i in queries]
    corpus = [{"docid": f"md{i}", "text": _sentence(random.Random(300 + i), 8)} for i in range(30)]
    return {"default": {"train": datasets.Dataset.from_list(rows(range(8, 12))),
                        "dev": datasets.Dataset.from_list(rows(range(4))),
                        "test": datasets.Dataset.from_list(rows(range(4, 8)))},
            "corpus": {"corpus": datasets.Dataset.from_list(corpus)}}


def build_hub(datasets) -> dict:
    """{(path, config): {split: Dataset}} for every source of the 12 datasets."""
    hub = {("nyu-mll/glue", c): _glue(datasets, c) for c in ("sst2", "qqp", "mnli")}
    hub[("hgissbkh/conll2003-en", None)] = _tagging(datasets, "words", "ner")
    hub[("hgissbkh/ontonotes5", None)] = _tagging(datasets, "tokens", "tags")
    hub[("hgissbkh/uner_en", None)] = _tagging(datasets, "tokens", "ner_tags", extra={
        "idx": datasets.Value("string"), "text": datasets.Value("string"), "annotator": datasets.Value("string")})
    hub[("rajpurkar/squad", None)] = _squad(datasets, v2=False)
    hub[("rajpurkar/squad_v2", None)] = _squad(datasets, v2=True)
    hub[("hgissbkh/record", None)] = _record(datasets)
    pairs = [{"query": _sentence(random.Random(400 + i), 4), "positive": _sentence(random.Random(500 + i), 8)}
             for i in range(24)]
    hub[("hgissbkh/msmarco-pairs", None)] = {"train": datasets.Dataset.from_list(pairs)}
    for prefix, hub_id, title in (("", "BeIR/msmarco", False), ("n", "BeIR/nq", True)):
        for config, splits in _beir(datasets, prefix, title).items():
            hub[(hub_id, config)] = splits
    hub[("BeIR/msmarco-qrels", None)] = _qrels(datasets, "", {"train": range(8, 12), "validation": range(4),
                                                              "test": range(4, 8)})
    hub[("BeIR/nq-qrels", None)] = _qrels(datasets, "n", {"test": range(10)})
    for config, splits in _mldr(datasets).items():
        hub[("hgissbkh/mldr-en", config)] = splits
    return hub


class FakeHub:
    """Serves `datasets.load_dataset(path, name, split=...)` from build_hub; records the calls."""

    def __init__(self, datasets):
        self.data = build_hub(datasets)
        self.calls: list[tuple] = []

    def load_dataset(self, path, name=None, split=None, **kwargs):
        self.calls.append((path, name, split))
        if (path, name) not in self.data:
            raise FileNotFoundError(f"Dataset {path} ({name}) doesn't exist on the Hub or cannot be accessed.")
        return self.data[(path, name)][split]

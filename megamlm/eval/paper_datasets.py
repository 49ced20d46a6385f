"""The paper's 12 evaluation datasets, loaded with Hugging Face `datasets` by their Hub names and built
as EncodEval builds them (the sources, splits, text formats and retrieval corpora are its choices;
megamlm/eval/README.md lists them with what could and could not be verified).

Loading: online, `datasets.load_dataset` downloads and caches (a cluster's login node usually is
online: run `python tools/fetch_eval_datasets.py` there); with HF_HUB_OFFLINE=1 it reads the cache;
with --hf-datasets-dir, `save_to_disk` copies named `<hub id with / as __>[__<config>]`. A dataset
that cannot be had is one error naming it and the command that fetches it.

Splits: where a benchmark has no labelled test split (GLUE, SQuAD, ReCoRD), its validation split is the
test split and a 5% `train_test_split(train_size=0.95, seed=42)` of train picks the learning rate.
Retrieval trains on MS MARCO pairs (`Query: ` / `Document: ` prefixes) for all three retrieval tasks;
MS MARCO picks the LR on its dev judgements and tests on TREC DL 2019 (BeIR's test split); NQ splits
its judged queries in two halves (validation, test); MLDR uses its dev and test splits. The corpus
of each is the documents judged in its validation or test judgements (any relevance), one corpus for
both splits (so it is encoded once); --retrieval-corpus full keeps the whole corpus instead.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from megamlm import extras
from megamlm.eval.examples import (
    QAExample,
    RetrievalSplit,
    TaggedSentence,
    TaskData,
    TextExample,
)
from megamlm.eval.readers import TaskDataError

RETRIEVAL_CORPORA = ("judged", "full")
HELD_OUT_FRACTION, SPLIT_SEED = 0.05, 42
NQ_SPLIT_SEED = 0
QUERY_PREFIX, DOCUMENT_PREFIX = "Query: ", "Document: "
FETCH_TOOL = "tools/fetch_eval_datasets.py"


@dataclass(frozen=True)
class HubSource:
    """One `datasets.load_dataset(path, name, split=split)` call."""
    path: str
    name: str | None
    split: str

    def folder_name(self) -> str:
        return self.path.replace("/", "__") + (f"__{self.name}" if self.name else "")

    def call(self) -> str:
        name = f", {self.name!r}" if self.name else ""
        return f"datasets.load_dataset({self.path!r}{name}, split={self.split!r})"


@dataclass(frozen=True)
class PaperDataset:
    name: str
    kind: str
    sources: tuple[HubSource, ...]
    build: Callable[["Loader"], dict]
    max_steps: int | None = None
    """EncodEval's fine-tuning max_steps for this dataset where its config differs from its task type's
    (finetune.PROTOCOL_MAX_STEPS); None: the task type's."""


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


class Loader:
    """Loads the sources of one dataset: from save_to_disk copies, else through `datasets` (online or from
    its offline cache)."""

    def __init__(self, dataset: PaperDataset, local_dir: Path | None, retrieval_corpus: str):
        self.dataset, self.local_dir, self.retrieval_corpus = dataset, local_dir, retrieval_corpus

    def __call__(self, path: str, name: str | None, split: str):
        source = HubSource(path, name, split)
        datasets = _import_datasets()
        if self.local_dir is not None:
            folder = self.local_dir / source.folder_name()
            if not folder.is_dir():
                raise TaskDataError(f"dataset {self.dataset.name}: {folder} is missing; "
                                    f"{how_to_fetch(self.dataset, self.local_dir)}")
            copy = datasets.load_from_disk(str(folder))
            if split not in copy:
                raise TaskDataError(f"dataset {self.dataset.name}: {folder} has no split {split!r} (it has "
                                    f"{', '.join(copy)}); {how_to_fetch(self.dataset, self.local_dir)}")
            return copy[split]
        try:
            return datasets.load_dataset(path, name, split=split)
        except Exception as error:  # the message of `datasets` varies by version and by cause
            where = ("is not in the local Hugging Face cache (HF_HUB_OFFLINE is set)" if hub_offline()
                     else f"could not be loaded ({type(error).__name__}: {str(error).splitlines()[0][:200]})")
            raise TaskDataError(f"dataset {self.dataset.name}: {source.call()} {where}; "
                                f"{how_to_fetch(self.dataset, None)}") from None


def how_to_fetch(dataset: PaperDataset, local_dir: Path | None) -> str:
    if local_dir is None:
        return (f"fetch it on a machine with network access with `python {FETCH_TOOL} {dataset.name}` "
                f"(fills the Hugging Face cache; copy the cache here if this machine is another one)")
    return (f"make the copies with `python {FETCH_TOOL} {dataset.name} --save-to {local_dir}` on a machine "
            f"with network access")


def _import_datasets():
    return extras.require("datasets", "reading the paper's datasets from the Hugging Face Hub")


def _class_names(feature, column: str | None):
    """The ClassLabel names under `column`, found through nested lists, Sequences and dicts."""
    if isinstance(feature, dict):
        if column in feature:
            return _class_names(feature[column], None)
        return next((n for n in (_class_names(f, column) for f in feature.values()) if n), None)
    if isinstance(feature, (list, tuple)):
        return _class_names(feature[0], column) if feature else None
    if getattr(feature, "names", None) and column is None:
        return list(feature.names)
    inner = getattr(feature, "feature", None)
    return _class_names(inner, column) if inner is not None else None


def _label_names(name: str, dataset, column: str) -> list[str]:
    names = _class_names(dict(dataset.features), column)
    if not names:
        raise TaskDataError(f"dataset {name}: column {column!r} has no label names (not a ClassLabel); "
                            f"cannot map its integers to labels")
    return names


def _columns(name: str, dataset, needed: tuple[str, ...]) -> None:
    missing = [c for c in needed if c not in dataset.column_names]
    if missing:
        raise TaskDataError(f"dataset {name}: columns {missing} are missing (it has {dataset.column_names}); "
                            f"the Hub copy does not have the schema megamlm reads")


def _held_out(dataset):
    """EncodEval's validation split: 5% of train, datasets' train_test_split with seed 42."""
    parts = dataset.train_test_split(train_size=1 - HELD_OUT_FRACTION, seed=SPLIT_SEED)
    return parts["train"], parts["test"]


# --- sequence classification ---------------------------------------------------------------------

def _glue(config: str, test_split: str, template: str | None, columns: tuple[str, ...]):
    def build(load: Loader) -> dict:
        name = load.dataset.name
        train_all, test = load("nyu-mll/glue", config, "train"), load("nyu-mll/glue", config, test_split)
        _columns(name, train_all, columns + ("label",))
        names = _label_names(name, train_all, "label")

        def examples(rows):
            text = ((lambda r: r[columns[0]]) if template is None
                    else (lambda r: template.format(*(r[c] for c in columns))))
            return [TextExample(text(r), names[r["label"]]) for r in rows if r["label"] >= 0]

        train, validation = _held_out(train_all)
        return {"train": examples(train), "validation": examples(validation), "test": examples(test)}
    return build


# --- token classification ------------------------------------------------------------------------

def _tagging(hub_id: str, tokens: str, tags: str):
    def build(load: Loader) -> dict:
        name = load.dataset.name
        splits = {split: load(hub_id, None, split) for split in ("train", "validation", "test")}
        _columns(name, splits["train"], (tokens, tags))
        names = _label_names(name, splits["train"], tags)
        return {split: [TaggedSentence(list(r[tokens]), [names[t] for t in r[tags]]) for r in rows if r[tokens]]
                for split, rows in splits.items()}
    return build


# --- question answering --------------------------------------------------------------------------

def _qa_example(name: str, split: str, index: int, row: dict) -> QAExample:
    qid = str(row.get("id", f"{split}-{index}"))
    if "context" in row:  # SQuAD layout (rajpurkar/squad, squad_v2; hgissbkh/record as EncodEval reads it)
        answers = list(zip(row["answers"]["text"], row["answers"]["answer_start"]))
        return QAExample(qid, row["question"], row["context"], answers)
    if "passage" in row:  # SuperGLUE ReCoRD layout: gold answers are the passage's entity spans
        gold = set(row["answers"])
        spans = row["entity_spans"]
        answers = [(t, s) for t, s in zip(spans["text"], spans["start"]) if t in gold]
        if "idx" in row:
            qid = f"{row['idx']['passage']}-{row['idx']['query']}"
        return QAExample(qid, row["query"].replace("@placeholder", "_"), row["passage"], answers)
    raise TaskDataError(f"dataset {name}: rows have columns {sorted(row)}; expected SQuAD's context/question/answers "
                        f"or ReCoRD's passage/query/entity_spans/answers")


def _qa(hub_id: str):
    def build(load: Loader) -> dict:
        name = load.dataset.name
        train_all, test = load(hub_id, None, "train"), load(hub_id, None, "validation")
        train, validation = _held_out(train_all)
        return {split: [_qa_example(name, split, i, r) for i, r in enumerate(rows)]
                for split, rows in (("train", train), ("validation", validation), ("test", test))}
    return build


# --- retrieval -----------------------------------------------------------------------------------

def _msmarco_pairs(load: Loader) -> RetrievalSplit:
    pairs = load("hgissbkh/msmarco-pairs", None, "train")
    _columns(load.dataset.name, pairs, ("query", "positive"))
    queries, corpus, qrels = {}, {}, {}
    for i, row in enumerate(pairs):
        key = f"pair{i}"
        queries[key], corpus[key], qrels[key] = QUERY_PREFIX + row["query"], DOCUMENT_PREFIX + row["positive"], {key: 1}
    return RetrievalSplit(queries, corpus, qrels)


def _judged_splits(load: Loader, judgements: dict[str, list[tuple[str, str, int]]], queries_of: Callable[[set], dict],
                   documents: Callable[[set | None], dict]) -> dict[str, RetrievalSplit]:
    """Validation and test over one shared corpus: the judged documents of both (or the whole corpus).
    Relevance is binary as in EncodEval (score >= 1 is relevant); judged non-relevant documents stay
    in the corpus."""
    judged = {d for rows in judgements.values() for _, d, _ in rows}
    corpus = documents(judged if load.retrieval_corpus == "judged" else None)
    all_queries = queries_of({q for rows in judgements.values() for q, _, _ in rows})
    splits = {}
    for split, rows in judgements.items():
        qrels: dict[str, dict[str, int]] = {}
        for q, d, score in rows:
            qrels.setdefault(q, {})[d] = int(score >= 1)
        qrels = {q: rels for q, rels in qrels.items() if any(rels.values())}
        splits[split] = RetrievalSplit({q: all_queries[q] for q in qrels}, corpus, qrels)
    return splits


def _beir_queries(load: Loader, hub_id: str):
    def queries_of(wanted: set) -> dict:
        rows = load(hub_id, "queries", "queries")
        return {str(r["_id"]): QUERY_PREFIX + r["text"] for r in rows if str(r["_id"]) in wanted}
    return queries_of


def _beir_documents(load: Loader, hub_id: str, with_title: bool):
    def documents(wanted: set | None) -> dict:
        out = {}
        for batch in load(hub_id, "corpus", "corpus").iter(batch_size=10_000):
            titles = batch.get("title") or [""] * len(batch["_id"])
            for doc_id, title, text in zip(batch["_id"], titles, batch["text"]):
                doc_id = str(doc_id)
                if wanted is None or doc_id in wanted:
                    out[doc_id] = DOCUMENT_PREFIX + (f"{title}. {text}" if with_title else text)
        return out
    return documents


def _qrel_rows(dataset) -> list[tuple[str, str, int]]:
    return [(str(r["query-id"]), str(r["corpus-id"]), int(r["score"])) for r in dataset]


def _msmarco(load: Loader) -> dict:
    judgements = {split: _qrel_rows(load("BeIR/msmarco-qrels", None, split)) for split in ("validation", "test")}
    splits = _judged_splits(load, judgements, _beir_queries(load, "BeIR/msmarco"),
                            _beir_documents(load, "BeIR/msmarco", with_title=False))
    return {"train": _msmarco_pairs(load), **splits}


def _nq(load: Loader) -> dict:
    rows = _qrel_rows(load("BeIR/nq-qrels", None, "test"))
    query_ids = sorted({q for q, _, _ in rows})
    validation = set(random.Random(NQ_SPLIT_SEED).sample(query_ids, round(0.5 * len(query_ids))))
    judgements = {"validation": [r for r in rows if r[0] in validation],
                  "test": [r for r in rows if r[0] not in validation]}
    splits = _judged_splits(load, judgements, _beir_queries(load, "BeIR/nq"),
                            _beir_documents(load, "BeIR/nq", with_title=True))
    return {"train": _msmarco_pairs(load), **splits}


def _mldr(load: Loader) -> dict:
    queries, judgements = {}, {}
    for split, hub_split in (("validation", "dev"), ("test", "test")):
        rows = load("hgissbkh/mldr-en", "default", hub_split)
        _columns(load.dataset.name, rows, ("query_id", "query", "positive_passages"))
        judgements[split] = []
        for r in rows:
            queries[str(r["query_id"])] = QUERY_PREFIX + r["query"]
            judgements[split] += [(str(r["query_id"]), str(p["docid"]), 1) for p in r["positive_passages"]]

    def documents(wanted: set | None) -> dict:
        out = {}
        for batch in load("hgissbkh/mldr-en", "corpus", "corpus").iter(batch_size=10_000):
            for doc_id, text in zip(batch["docid"], batch["text"]):
                if wanted is None or str(doc_id) in wanted:
                    out[str(doc_id)] = DOCUMENT_PREFIX + text
        return out

    splits = _judged_splits(load, judgements, lambda wanted: queries, documents)
    return {"train": _msmarco_pairs(load), **splits}


def _glue_sources(config: str, test_split: str) -> tuple[HubSource, ...]:
    return (HubSource("nyu-mll/glue", config, "train"), HubSource("nyu-mll/glue", config, test_split))


def _splits(hub_id: str, splits: tuple[str, ...]) -> tuple[HubSource, ...]:
    return tuple(HubSource(hub_id, None, s) for s in splits)


PAIRS = (HubSource("hgissbkh/msmarco-pairs", None, "train"),)
PAPER_DATASETS = {d.name: d for d in (
    PaperDataset("sst2", "sequence_classification", _glue_sources("sst2", "validation"),
                 _glue("sst2", "validation", None, ("sentence",))),
    PaperDataset("qqp", "sequence_classification", _glue_sources("qqp", "validation"),
                 _glue("qqp", "validation", "Question 1: {}\nQuestion 2: {}", ("question1", "question2"))),
    PaperDataset("mnli", "sequence_classification", _glue_sources("mnli", "validation_matched"),
                 _glue("mnli", "validation_matched", "Premise: {}\nHypothesis: {}", ("premise", "hypothesis"))),
    PaperDataset("conll2003", "token_classification", _splits("hgissbkh/conll2003-en", ("train", "validation", "test")),
                 _tagging("hgissbkh/conll2003-en", "words", "ner")),
    # EncodEval's configs/TC/ontonotes_*.yaml set max_steps: 1000 (1,000 steps, not one epoch of its ~60k
    # sentences); its CoNLL-2003 and UNER configs set -1 (one epoch), the token-classification default.
    PaperDataset("ontonotes", "token_classification", _splits("hgissbkh/ontonotes5", ("train", "validation", "test")),
                 _tagging("hgissbkh/ontonotes5", "tokens", "tags"), max_steps=1000),
    PaperDataset("uner", "token_classification", _splits("hgissbkh/uner_en", ("train", "validation", "test")),
                 _tagging("hgissbkh/uner_en", "tokens", "ner_tags")),
    PaperDataset("squad", "question_answering", _splits("rajpurkar/squad", ("train", "validation")),
                 _qa("rajpurkar/squad")),
    PaperDataset("squad_v2", "question_answering", _splits("rajpurkar/squad_v2", ("train", "validation")),
                 _qa("rajpurkar/squad_v2")),
    PaperDataset("record", "question_answering", _splits("hgissbkh/record", ("train", "validation")),
                 _qa("hgissbkh/record")),
    PaperDataset("msmarco", "retrieval", PAIRS + (
        HubSource("BeIR/msmarco", "queries", "queries"), HubSource("BeIR/msmarco", "corpus", "corpus"),
        HubSource("BeIR/msmarco-qrels", None, "validation"), HubSource("BeIR/msmarco-qrels", None, "test")), _msmarco),
    PaperDataset("nq", "retrieval", PAIRS + (
        HubSource("BeIR/nq", "queries", "queries"), HubSource("BeIR/nq", "corpus", "corpus"),
        HubSource("BeIR/nq-qrels", None, "test")), _nq),
    PaperDataset("mldr", "retrieval", PAIRS + (
        HubSource("hgissbkh/mldr-en", "default", "dev"), HubSource("hgissbkh/mldr-en", "default", "test"),
        HubSource("hgissbkh/mldr-en", "corpus", "corpus")), _mldr),
)}


def load_paper_dataset(name: str, local_dir: str | Path | None = None, retrieval_corpus: str = "judged") -> TaskData:
    if retrieval_corpus not in RETRIEVAL_CORPORA:
        raise TaskDataError(f"unknown retrieval corpus {retrieval_corpus!r}; use one of {', '.join(RETRIEVAL_CORPORA)}")
    dataset = PAPER_DATASETS[name]
    loader = Loader(dataset, Path(local_dir) if local_dir else None, retrieval_corpus)
    source = f"Hugging Face datasets: {', '.join(sorted({s.path for s in dataset.sources}))}"
    return TaskData(name, dataset.kind, dataset.build(loader), source=source, max_steps=dataset.max_steps)

"""The paper's 12 evaluation datasets by name, read through Hugging Face `datasets` from local copies
only: a folder of `save_to_disk` copies (--hf-datasets-dir), or else the Hugging Face cache in offline
mode. Nothing here downloads; a missing dataset is one error that says how to get it.

Where a benchmark hides its test labels (GLUE, ReCoRD) or has no test split (SQuAD), the official
validation split is the test split and 5% of train (by a hash of the row index) is held out as the
validation split used to pick the learning rate. Retrieval follows the paper: train on MS MARCO, pick
the LR on MS MARCO dev, test on MS MARCO (TREC DL 2019 judgements), NQ or MLDR (English).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from megamlm.eval.examples import (
    QAExample,
    RetrievalSplit,
    TaggedSentence,
    TaskData,
    TextExample,
)
from megamlm.eval.readers import TaskDataError

Source = tuple[str, str | None]  # (hub id, config)


@dataclass(frozen=True)
class PaperDataset:
    name: str
    kind: str
    sources: tuple[Source, ...]
    convert: Callable[[str, dict], dict]


def source_folder_name(source: Source) -> str:
    hub_id, config = source
    return hub_id.replace("/", "__") + (f"__{config}" if config else "")


def held_out(name: str, index: int) -> bool:
    return int(hashlib.sha256(f"{name}-{index}".encode()).hexdigest(), 16) % 20 == 0


def _carve(name: str, rows, convert_row) -> tuple[list, list]:
    train, validation = [], []
    for i, row in enumerate(rows):
        example = convert_row(row)
        if example is not None:
            (validation if held_out(name, i) else train).append(example)
    return train, validation


def _class_names(feature, column: str):
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


def _label_names(dataset, column: str) -> list[str]:
    names = _class_names(dict(dataset.features), column)
    if not names:
        raise TaskDataError(f"column {column!r} has no label names (not a ClassLabel); cannot map its integers to tags")
    return names


def _glue(text: str, pair: str | None, test_split: str):
    def convert(name, sources):
        data = next(iter(sources.values()))
        names = _label_names(data["train"], "label")

        def row_to_example(row):
            if row["label"] < 0:  # hidden label
                return None
            return TextExample(row[text], names[row["label"]], row[pair] if pair else None)

        train, validation = _carve(name, data["train"], row_to_example)
        test = [e for e in map(row_to_example, data[test_split]) if e is not None]
        return {"train": train, "validation": validation, "test": test}
    return convert


def _tagging(tokens: str, tags: str, nested_sentences: bool = False):
    def convert(name, sources):
        data = next(iter(sources.values()))
        names = _label_names(data["train"], tags)  # conll2012_ontonotesv5: nested under "sentences"

        def sentences(rows):
            out = []
            for row in rows:
                for s in (row["sentences"] if nested_sentences else [row]):
                    if s[tokens]:
                        out.append(TaggedSentence(list(s[tokens]), [names[t] for t in s[tags]]))
            return out
        return {split: sentences(data[split]) for split in ("train", "validation", "test")}
    return convert


def _squad_row(row) -> QAExample:
    answers = list(zip(row["answers"]["text"], row["answers"]["answer_start"]))
    return QAExample(str(row["id"]), row["question"], row["context"], answers)


def _squad(name, sources):
    data = next(iter(sources.values()))
    train, validation = _carve(name, data["train"], _squad_row)
    return {"train": train, "validation": validation, "test": [_squad_row(r) for r in data["validation"]]}


def _record_row(row) -> QAExample:
    """ReCoRD as extractive QA: the cloze query is the question, gold answers are the entity spans
    of the passage whose text is an accepted answer."""
    gold = set(row["answers"])
    spans = row["entity_spans"]
    answers = [(t, s) for t, s in zip(spans["text"], spans["start"]) if t in gold]
    qid = f"{row['idx']['passage']}-{row['idx']['query']}"
    return QAExample(qid, row["query"].replace("@placeholder", "_"), row["passage"], answers)


def _record(name, sources):
    data = next(iter(sources.values()))
    train, validation = _carve(name, data["train"], _record_row)
    return {"train": train, "validation": validation, "test": [_record_row(r) for r in data["validation"]]}


def beir_split(corpus_rows, query_rows, qrel_rows) -> RetrievalSplit:
    qrels: dict[str, dict[str, int]] = {}
    for row in qrel_rows:
        qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
    queries = {str(r["_id"]): r["text"] for r in query_rows if str(r["_id"]) in qrels}
    corpus = {str(r["_id"]): (f"{r['title']}. {r['text']}" if r.get("title") else r["text"]) for r in corpus_rows}
    return RetrievalSplit(queries, corpus, qrels)


MSMARCO = (("BeIR/msmarco", "corpus"), ("BeIR/msmarco", "queries"), ("BeIR/msmarco-qrels", None))


def _msmarco_splits(sources) -> dict:
    corpus = sources[MSMARCO[0]]["corpus"]
    queries = sources[MSMARCO[1]]["queries"]
    qrels = sources[MSMARCO[2]]
    return {split: beir_split(corpus, queries, qrels[split]) for split in ("train", "validation", "test")}


def _msmarco(name, sources):
    return _msmarco_splits(sources)


def _nq(name, sources):
    splits = _msmarco_splits(sources)
    corpus = sources[("BeIR/nq", "corpus")]["corpus"]
    queries = sources[("BeIR/nq", "queries")]["queries"]
    splits["test"] = beir_split(corpus, queries, sources[("BeIR/nq-qrels", None)]["test"])
    return splits


def _mldr(name, sources):
    splits = _msmarco_splits(sources)
    corpus = {str(r["docid"]): r["text"] for r in sources[("Shitao/MLDR", "corpus-en")]["corpus"]}
    queries, qrels = {}, {}
    for row in sources[("Shitao/MLDR", "en")]["test"]:
        queries[str(row["query_id"])] = row["query"]
        qrels[str(row["query_id"])] = {str(p["docid"]): 1 for p in row["positive_passages"]}
    splits["test"] = RetrievalSplit(queries, corpus, qrels)
    return splits


PAPER_DATASETS = {d.name: d for d in (
    PaperDataset("sst2", "sequence_classification", (("nyu-mll/glue", "sst2"),), _glue("sentence", None, "validation")),
    PaperDataset("qqp", "sequence_classification", (("nyu-mll/glue", "qqp"),), _glue("question1", "question2", "validation")),
    PaperDataset("mnli", "sequence_classification", (("nyu-mll/glue", "mnli"),),
                 _glue("premise", "hypothesis", "validation_matched")),
    PaperDataset("conll2003", "token_classification", (("eriktks/conll2003", None),), _tagging("tokens", "ner_tags")),
    PaperDataset("ontonotes", "token_classification", (("ontonotes/conll2012_ontonotesv5", "english_v4"),),
                 _tagging("words", "named_entities", nested_sentences=True)),
    PaperDataset("uner", "token_classification", (("universalner/universal_ner", "en_ewt"),), _tagging("tokens", "ner_tags")),
    PaperDataset("squad", "question_answering", (("rajpurkar/squad", None),), _squad),
    PaperDataset("squad_v2", "question_answering", (("rajpurkar/squad_v2", None),), _squad),
    PaperDataset("record", "question_answering", (("aps/super_glue", "record"),), _record),
    PaperDataset("msmarco", "retrieval", MSMARCO, _msmarco),
    PaperDataset("nq", "retrieval", MSMARCO + (("BeIR/nq", "corpus"), ("BeIR/nq", "queries"), ("BeIR/nq-qrels", None)), _nq),
    PaperDataset("mldr", "retrieval", MSMARCO + (("Shitao/MLDR", "en"), ("Shitao/MLDR", "corpus-en")), _mldr),
)}


def _how_to_get(dataset: PaperDataset, local_dir: Path | None) -> str:
    root = str(local_dir) if local_dir else "DIR"
    lines = [f'datasets.load_dataset("{h}"{f", {c!r}" if c else ""}).save_to_disk("{root}/{source_folder_name((h, c))}")'
             for h, c in dataset.sources]
    return ("on a machine with network access run: " + "; ".join(lines) +
            f", then pass --hf-datasets-dir {root} (or fill the Hugging Face cache there and copy it here)")


def _import_datasets_offline():
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        raise TaskDataError("the paper's datasets are read with the Hugging Face `datasets` package, which is not "
                            "installed; pip install datasets") from None
    import huggingface_hub.constants

    # The environment is read at import time; these packages may have been imported before us.
    datasets.config.HF_DATASETS_OFFLINE = True
    datasets.config.HF_HUB_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True
    return datasets


def load_paper_dataset(name: str, local_dir: str | Path | None = None) -> TaskData:
    dataset = PAPER_DATASETS[name]
    datasets = _import_datasets_offline()
    local_dir = Path(local_dir) if local_dir else None
    sources = {}
    for source in dataset.sources:
        if local_dir is not None:
            folder = local_dir / source_folder_name(source)
            if not folder.is_dir():
                raise TaskDataError(f"dataset {name}: {folder} is missing; {_how_to_get(dataset, local_dir)}")
            sources[source] = datasets.load_from_disk(str(folder))
        else:
            try:
                sources[source] = datasets.load_dataset(source[0], source[1])
            except Exception as e:  # offline cache miss: the message of `datasets` varies by version
                raise TaskDataError(f"dataset {name}: {source[0]} ({source[1] or 'default'}) is not in the local "
                                    f"Hugging Face cache and the network is not used ({type(e).__name__}); "
                                    f"{_how_to_get(dataset, None)}") from None
    return TaskData(name, dataset.kind, dataset.convert(name, sources), source=f"Hugging Face datasets: {name}")

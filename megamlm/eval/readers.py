"""Readers for the formats users already have: JSONL/TSV classification, CoNLL and JSONL tagging,
SQuAD JSON, and BEIR's corpus/queries/qrels; and a task folder that holds one file per split."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from megamlm.errors import UserError
from megamlm.eval.examples import (
    SPLITS,
    TASK_KINDS,
    QAExample,
    RetrievalSplit,
    TaggedSentence,
    TaskData,
    TextExample,
)


class TaskDataError(UserError, ValueError):
    """Task data that cannot be used as given; the message names the problem and the fix."""


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise TaskDataError(f"{path}:{line_no}: not valid JSON ({e.msg}); "
                                        "fix the line or remove it") from None
    return rows


def _field(row: dict, name: str, path: Path, index: int):
    if name not in row:
        raise TaskDataError(f"{path}: record {index} has no field {name!r} (fields: {sorted(row)}); "
                            f"rename the field or pass the right field name")
    return row[name]


def read_classification(path: str | Path, text_field: str = "text", pair_field: str | None = None,
                        label_field: str = "label") -> list[TextExample]:
    """JSONL (one object per line) or TSV with a header row; labels are kept as strings."""
    path = Path(path)
    if path.suffix == ".tsv":
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    else:
        rows = _read_jsonl(path)
    if pair_field is None and rows and "text_pair" in rows[0]:
        pair_field = "text_pair"
    return [TextExample(text=str(_field(r, text_field, path, i)), label=str(_field(r, label_field, path, i)),
                        text_pair=None if pair_field is None else str(_field(r, pair_field, path, i)))
            for i, r in enumerate(rows)]


def read_conll(path: str | Path, tag_column: int = -1) -> list[TaggedSentence]:
    """CoNLL columns (word first, tag in `tag_column`), sentences separated by blank lines;
    -DOCSTART- lines are skipped."""
    path = Path(path)
    sentences, tokens, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            columns = line.split()
            if not columns or columns[0] == "-DOCSTART-":
                if tokens:
                    sentences.append(TaggedSentence(tokens, tags))
                tokens, tags = [], []
                continue
            if len(columns) < 2:
                raise TaskDataError(f"{path}:{line_no}: a CoNLL line needs a word and a tag column, got "
                                    f"{line.strip()!r}")
            tokens.append(columns[0])
            tags.append(columns[tag_column])
    if tokens:
        sentences.append(TaggedSentence(tokens, tags))
    return sentences


def read_tagged_jsonl(path: str | Path, tokens_field: str = "tokens", tags_field: str = "tags") -> list[TaggedSentence]:
    path = Path(path)
    sentences = []
    for i, row in enumerate(_read_jsonl(path)):
        tokens, tags = _field(row, tokens_field, path, i), _field(row, tags_field, path, i)
        if len(tokens) != len(tags):
            raise TaskDataError(f"{path}: record {i} has {len(tokens)} tokens but {len(tags)} tags; "
                                f"give exactly one tag per token")
        sentences.append(TaggedSentence([str(t) for t in tokens], [str(t) for t in tags]))
    return sentences


def read_squad(path: str | Path) -> list[QAExample]:
    """SQuAD v1.1/v2.0 JSON: data -> paragraphs -> qas; `is_impossible` or no answers = no answer."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if "data" not in doc:
        raise TaskDataError(f"{path}: not SQuAD JSON (no top-level 'data' list)")
    examples = []
    for article in doc["data"]:
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                answers = ([] if qa.get("is_impossible")
                           else [(a["text"], int(a["answer_start"])) for a in qa["answers"]])
                for text, start in answers:
                    if context[start:start + len(text)] != text:
                        raise TaskDataError(f"{path}: question {qa['id']}: answer {text!r} is not at character "
                                            f"{start} of its context; fix answer_start")
                examples.append(QAExample(str(qa["id"]), qa["question"], context, answers))
    return examples


def read_beir(folder: str | Path, split: str) -> RetrievalSplit:
    """BEIR layout: corpus.jsonl ({_id, title, text}), queries.jsonl ({_id, text}) and
    qrels/<split>.tsv (header, then query-id, corpus-id, score). Only judged queries are kept."""
    folder = Path(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    for path in (folder / "corpus.jsonl", folder / "queries.jsonl", qrels_path):
        if not path.is_file():
            raise TaskDataError(f"BEIR folder {folder}: missing {path.relative_to(folder)}")
    corpus = {}
    for row in _read_jsonl(folder / "corpus.jsonl"):
        title, text = row.get("title") or "", row.get("text") or ""
        corpus[str(row["_id"])] = f"{title}. {text}" if title else text
    queries = {str(r["_id"]): r["text"] for r in _read_jsonl(folder / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            columns = line.rstrip("\n").split("\t")
            if line_no == 1 and not columns[-1].lstrip("-").isdigit():
                continue  # header
            if len(columns) < 3:
                raise TaskDataError(f"{qrels_path}:{line_no}: expected query-id, corpus-id, score")
            qrels.setdefault(columns[0], {})[columns[1]] = int(columns[2])
    missing = sorted({q for q in qrels if q not in queries})[:3]
    if missing:
        raise TaskDataError(f"{qrels_path}: judged queries {missing} are not in queries.jsonl")
    return RetrievalSplit({q: queries[q] for q in qrels}, corpus, qrels)


_SPLIT_ALIASES = {"train": ("train",), "validation": ("validation", "dev", "valid", "val"), "test": ("test",)}
_EXTENSIONS = {
    "sequence_classification": (".jsonl", ".tsv"),
    "token_classification": (".conll", ".txt", ".jsonl"),
    "question_answering": (".json",),
}


def _split_file(folder: Path, kind: str, split: str) -> Path:
    for stem in _SPLIT_ALIASES[split]:
        for ext in _EXTENSIONS[kind]:
            if (folder / f"{stem}{ext}").is_file():
                return folder / f"{stem}{ext}"
    names = ", ".join(f"{_SPLIT_ALIASES[split][0]}{e}" for e in _EXTENSIONS[kind])
    raise TaskDataError(f"task folder {folder}: no {split} file; add one of {names}")


def read_task_folder(kind: str, folder: str | Path, name: str | None = None) -> TaskData:
    """A user task: a folder with train/validation/test files in one of the formats above
    (validation may be called dev; for retrieval, a BEIR folder with qrels/{train,dev|validation,test}.tsv)."""
    folder = Path(folder)
    if kind not in TASK_KINDS:
        raise TaskDataError(f"unknown task type {kind!r}; use one of {', '.join(TASK_KINDS)}")
    if not folder.is_dir():
        raise TaskDataError(f"task folder {folder} does not exist")
    splits: dict = {}
    for split in SPLITS:
        if kind == "retrieval":
            stems = [s for s in _SPLIT_ALIASES[split] if (folder / "qrels" / f"{s}.tsv").is_file()]
            if not stems:
                raise TaskDataError(f"BEIR folder {folder}: no qrels/{_SPLIT_ALIASES[split][0]}.tsv")
            splits[split] = read_beir(folder, stems[0])
            continue
        path = _split_file(folder, kind, split)
        if kind == "sequence_classification":
            splits[split] = read_classification(path)
        elif kind == "token_classification":
            splits[split] = read_tagged_jsonl(path) if path.suffix == ".jsonl" else read_conll(path)
        else:
            splits[split] = read_squad(path)
    return TaskData(name or folder.name, kind, splits, source=str(folder))

"""Small tasks built from the project's shared data folder (`../shared/data` beside the repository,
described in its README): sentiment and genre classification and POS tagging. (The Austen QA and
retrieval sets read the corpus shipped in the package: austen_tasks.py.) All splits are deterministic."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from megamlm.eval.examples import TaggedSentence, TaskData, TextExample
from megamlm.eval.readers import TaskDataError

DATA_DIR_ENV = "MEGAMLM_EVAL_DATA"
TASK_FILES = {
    "rt-sentiment": "sentiment/rt_snippets.jsonl",
    "brown-genre": "brown/brown.jsonl",
    "brown-pos": "brown/brown_pos.jsonl",
    "brown-word-order": "brown/brown.jsonl",
    "brown-sentence-order": "brown/brown.jsonl",
    "brown-agreement": "brown/brown.jsonl",
}
"""The file of the data folder each task reads (a study's --run checks them all before its first step)."""


def default_data_dir() -> Path:
    """$MEGAMLM_EVAL_DATA, else the `shared/data` folder beside the repository root."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV])
    return Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def data_file(data_dir: Path, relative: str, task: str) -> Path:
    path = Path(data_dir) / relative
    if not path.is_file():
        raise TaskDataError(f"task {task} needs {relative} under the data folder {data_dir}, which is missing; "
                            f"pass --data-dir (or set ${DATA_DIR_ENV}) to the folder that holds brown/ and sentiment/")
    return path


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def hash_split(key: str) -> str:
    """Fixed 80/10/10 split by a hash of a stable key: digit 8 -> validation, 9 -> test."""
    bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 10
    return {8: "validation", 9: "test"}.get(bucket, "train")


def rt_sentiment(data_dir: Path) -> TaskData:
    """Rotten Tomatoes snippets, binary label (mean human score > 0), the file's own split
    (8,410 / 1,090 / 1,068)."""
    rows = read_jsonl(data_file(data_dir, TASK_FILES["rt-sentiment"], "rt-sentiment"))
    splits = {"train": [], "validation": [], "test": []}
    for row in rows:
        splits[row["split"]].append(TextExample(row["text"], "positive" if row["label"] == 1 else "negative"))
    return TaskData("rt-sentiment", "sequence_classification", splits, source="sentiment/rt_snippets.jsonl")


MIN_PARAGRAPH_CHARS = 200


def brown_genre(data_dir: Path) -> TaskData:
    """Brown Corpus genre (15 classes) of a paragraph: documents are cut at blank lines, paragraphs
    under 200 characters (headlines, short dialogue) are dropped; split by source file (about
    8,000 / 1,000 / 1,000 paragraphs)."""
    rows = read_jsonl(data_file(data_dir, TASK_FILES["brown-genre"], "brown-genre"))
    splits = {"train": [], "validation": [], "test": []}
    for doc in rows:
        for paragraph in doc["text"].split("\n\n"):
            if len(paragraph) >= MIN_PARAGRAPH_CHARS:
                splits[doc["split"]].append(TextExample(paragraph, doc["genre_name"]))
    return TaskData("brown-genre", "sequence_classification", splits, source="brown/brown.jsonl")


POS_KEEP_EVERY = 5


def brown_pos(data_dir: Path) -> TaskData:
    """Brown sentences with the 12 universal POS tags (tagging accuracy); every 5th sentence of each
    split in file order, to stay CPU-sized (about 9,200 / 1,100 / 1,100 sentences)."""
    rows = read_jsonl(data_file(data_dir, TASK_FILES["brown-pos"], "brown-pos"))
    splits = {"train": [], "validation": [], "test": []}
    seen = {"train": 0, "validation": 0, "test": 0}
    for row in rows:
        split = row["split"]
        if seen[split] % POS_KEEP_EVERY == 0:
            splits[split].append(TaggedSentence(row["tokens"], row["tags"]))
        seen[split] += 1
    return TaskData("brown-pos", "token_classification", splits, source="brown/brown_pos.jsonl")

"""The in-memory form of every task's data: one small dataclass per task type, and TaskData that
holds the named splits ("train", "validation", "test") of one task."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TaskKind = Literal["sequence_classification", "token_classification", "question_answering", "retrieval"]
TASK_KINDS: tuple[str, ...] = ("sequence_classification", "token_classification", "question_answering", "retrieval")
FAMILY_OF_KIND = {
    "sequence_classification": "sequence classification",
    "token_classification": "token classification",
    "question_answering": "question answering",
    "retrieval": "information retrieval",
}
SPLITS = ("train", "validation", "test")


@dataclass
class TextExample:
    """One sequence-classification input: a text, or a pair of texts, and its label."""
    text: str
    label: str
    text_pair: str | None = None


@dataclass
class TaggedSentence:
    """A pre-tokenized sentence with one tag per word."""
    tokens: list[str]
    tags: list[str]


@dataclass
class QAExample:
    """An extractive question: answers are (text, character start in context); none = no answer."""
    id: str
    question: str
    context: str
    answers: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class RetrievalSplit:
    """Queries, the corpus searched for them, and graded judgements qrels[query_id][doc_id] = relevance."""
    queries: dict[str, str]
    corpus: dict[str, str]
    qrels: dict[str, dict[str, int]]

    def __len__(self) -> int:
        return len(self.queries)


@dataclass
class TaskData:
    """A task: its kind, its splits, and where it came from (shown in errors and result files)."""
    name: str
    kind: str
    splits: dict[str, list | RetrievalSplit]
    source: str = ""
    max_steps: int | None = None
    """The protocol's fine-tuning steps for this dataset where they are not its kind's (finetune.PROTOCOL_MAX_STEPS;
    -1: epochs only); None: its kind's. Set per dataset in the registry (paper_datasets.PAPER_DATASETS)."""

    @property
    def family(self) -> str:
        return FAMILY_OF_KIND[self.kind]

"""The four task types of the paper's evaluation; `build_task` picks one by TaskData.kind."""

from __future__ import annotations

from megamlm.eval.tasks.base import Task, TaskSettings
from megamlm.eval.tasks.question_answering import QuestionAnswering
from megamlm.eval.tasks.retrieval import Retrieval
from megamlm.eval.tasks.sequence_classification import SequenceClassification
from megamlm.eval.tasks.token_classification import TokenClassification


def build_task(data, tokenizer, settings: TaskSettings | None = None) -> Task:
    classes = {cls.kind: cls for cls in (SequenceClassification, TokenClassification, QuestionAnswering, Retrieval)}
    if data.kind not in classes:
        raise ValueError(f"task {data.name}: unknown task type {data.kind!r}; use one of {', '.join(classes)}")
    return classes[data.kind](data, tokenizer, settings or TaskSettings())


__all__ = ["Task", "TaskSettings", "build_task"]

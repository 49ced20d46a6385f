"""The four task types of the paper's evaluation; `build_task` picks one by TaskData.kind."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from megamlm.eval.model_io import model_type, protocol_max_length
from megamlm.eval.tasks.base import Task, TaskSettings
from megamlm.eval.tasks.question_answering import QuestionAnswering
from megamlm.eval.tasks.retrieval import Retrieval
from megamlm.eval.tasks.sequence_classification import SequenceClassification
from megamlm.eval.tasks.token_classification import TokenClassification


def settings_for_model(settings: TaskSettings, model_path: str | Path | None) -> TaskSettings:
    """The settings with what depends on the model filled in: the protocol's max length (99% of its
    positions) and EuroBERT's input convention for EuroBERT models."""
    max_length, eurobert = settings.max_length, settings.eurobert_inputs
    if max_length is None:
        if model_path is None:
            raise ValueError("TaskSettings.max_length is None (the protocol's length) but no model folder was given")
        max_length = protocol_max_length(model_path)
    if eurobert is None:
        eurobert = model_path is not None and model_type(model_path) == "eurobert"
    return dataclasses.replace(settings, max_length=max_length, eurobert_inputs=eurobert)


def build_task(data, tokenizer, settings: TaskSettings | None = None, model_path: str | Path | None = None) -> Task:
    settings = settings_for_model(settings or TaskSettings(), model_path)
    classes = {cls.kind: cls for cls in (SequenceClassification, TokenClassification, QuestionAnswering, Retrieval)}
    if data.kind not in classes:
        raise ValueError(f"task {data.name}: unknown task type {data.kind!r}; use one of {', '.join(classes)}")
    return classes[data.kind](data, tokenizer, settings)


__all__ = ["Task", "TaskSettings", "build_task", "settings_for_model"]

"""Task names accepted by tools/evaluate.py --tasks: the local demo tasks, the paper's 12 datasets,
and user folders written as TYPE:PATH (e.g. sequence_classification:/data/my_task)."""

from __future__ import annotations

from pathlib import Path

from megamlm.eval import austen_tasks, local_data, order_tasks
from megamlm.eval.examples import TASK_KINDS, TaskData
from megamlm.eval.paper_datasets import PAPER_DATASETS, load_paper_dataset
from megamlm.eval.readers import TaskDataError, read_task_folder

AUSTEN_TASKS = {
    "austen-novel": austen_tasks.austen_novel,
    "austen-qa": austen_tasks.austen_qa,
    "austen-qa-speakers": austen_tasks.austen_qa_speakers,
    "austen-retrieval": austen_tasks.austen_retrieval,
    "austen-retrieval-small": austen_tasks.austen_retrieval_small,
}
"""Built from the corpus shipped in the package (megamlm/assets/austen/austen.jsonl.gz)."""
LOCAL_TASKS = {
    "rt-sentiment": local_data.rt_sentiment,
    "brown-genre": local_data.brown_genre,
    "brown-pos": local_data.brown_pos,
    **order_tasks.ORDER_TASKS,
    **AUSTEN_TASKS,
}
"""Runnable without downloads: the Austen tasks, and those read from the shared data folder (--data-dir): three
Brown and sentiment tasks and the order and agreement tasks a bag of words cannot solve (order_tasks.py)."""


def task_display_name(spec: str) -> str:
    """Name used in result paths and tables: the spec itself, or the folder name of TYPE:PATH."""
    if spec in LOCAL_TASKS or spec in PAPER_DATASETS:
        return spec
    _, _, path = spec.partition(":")
    return Path(path).name or spec


def check_task_spec(spec: str) -> None:
    """Cheap check of a --tasks entry (no data is read)."""
    if spec in LOCAL_TASKS or spec in PAPER_DATASETS:
        return
    kind, sep, path = spec.partition(":")
    if sep and kind in TASK_KINDS and path:
        return
    raise TaskDataError(
        f"unknown task {spec!r}; use a local task ({', '.join(LOCAL_TASKS)}), one of the paper's datasets "
        f"({', '.join(PAPER_DATASETS)}), or a folder of your own as TYPE:PATH with TYPE one of {', '.join(TASK_KINDS)}")


def load_task(spec: str, data_dir: str | Path | None = None, hf_datasets_dir: str | Path | None = None,
              retrieval_corpus: str = "judged") -> TaskData:
    check_task_spec(spec)
    if spec in AUSTEN_TASKS:
        return AUSTEN_TASKS[spec]()
    if spec in LOCAL_TASKS:
        return LOCAL_TASKS[spec](Path(data_dir) if data_dir else local_data.default_data_dir())
    if spec in PAPER_DATASETS:
        return load_paper_dataset(spec, hf_datasets_dir, retrieval_corpus)
    kind, _, path = spec.partition(":")
    return read_task_folder(kind, path, name=task_display_name(spec))

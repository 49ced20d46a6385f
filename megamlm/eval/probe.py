"""The frozen-feature linear probe (``tools/evaluate.py --probe linear``): how much of a task a model's frozen
representations already hold, without fine-tuning it.

For every (model, attention mode, task): the final layer's hidden states, mean-pooled over a text's non-padding
tokens (token classification: over each word's sub-tokens), are the features (``probe_features.py``); scikit-learn's
``StandardScaler`` then ``LogisticRegression`` (L2, lbfgs, multinomial, ``max_iter`` 1,000) is fitted on train for
each C of a small grid (1e-3, 1e-2, 0.1, 1, 10); the C with the best validation score (ties: the smaller C, the
stronger regularisation) is scored on test with the task's metric (accuracy; tagging accuracy or entity F1 for
token classification, words cut off by ``max_length`` counted as wrong; a validation or test label that the train
examples lack is never predicted, so counted as wrong too). Beside every row: the majority-class score
(the most frequent train label everywhere), and, per model shape and attention mode, a random-init model of that
shape (``frozen.random_init``) as its own row. Question answering and retrieval are not probed: a linear probe needs
one label per text or word, and spans and rankings have none.

One JSON file per row (``<output>/probe/<model>/<attention>/<task>.json``, written atomically; a rerun skips
finished rows and refuses rows made with other settings), its per-example validation and test predictions beside it
(``<task>.predictions.json``, the format fine-tuning runs keep, so ``paired.compare_runs`` compares two rows on the
same examples), then ``probe_results.md`` and ``probe_results.csv``.
"""

from __future__ import annotations

import csv
import io
import math
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from megamlm.errors import UserError
from megamlm.eval import metrics
from megamlm.eval.examples import SPLITS, TaskData
from megamlm.eval.frozen import ATTENTIONS, FrozenModel, ProbeModel, load_frozen, model_shape
from megamlm.eval.paired import read_predictions
from megamlm.eval.probe_features import pooled_features, word_features
from megamlm.eval.registry import task_display_name
from megamlm.eval.results import fingerprint, read_result, write_json_atomic, write_text_atomic
from megamlm.eval.tasks import TaskSettings
from megamlm.eval.tasks.sequence_classification import SequenceClassification
from megamlm.eval.tasks.token_classification import TokenClassification
from megamlm.extras import require

PROBES = ("linear",)
C_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
MAX_ITER = 1000
POOLING = "mean of the final layer's states (after the final norm) over non-padding tokens"
NOT_PROBED = {
    "question_answering": "its answers are spans of each input, not labels from a fixed set",
    "retrieval": "it ranks documents by similarity, there is no label per input",
}
"""Task kinds the linear probe does not score, and why."""
RANDOM_INIT = "random-init"
TABLES = ("probe_results.md", "probe_results.csv")


class ProbeError(UserError, ValueError):
    """A probe that cannot run as asked; the message names the fix."""


@dataclass(frozen=True)
class ProbeSettings:
    max_length: int = 128
    """Tokens per input (longer inputs are cut)."""
    batch_size: int = 32
    """Inputs per forward pass."""
    c_grid: tuple[float, ...] = C_GRID
    """Inverse L2 strengths tried on validation."""
    device: str = "cpu"

    def record(self) -> dict:
        """What determines a row's result besides the model and the task's examples."""
        return {"probe": "linear", "pooling": POOLING, "max_length": self.max_length, "c_grid": list(self.c_grid),
                "max_iter": MAX_ITER, "scaler": "StandardScaler"}


@dataclass
class SplitRows:
    """One split as the probe sees it: a feature row per example (or per word), its label, and the task's metric of
    a list of predictions (one per row), in percent."""

    features: np.ndarray
    labels: list[str]
    score: Callable[[list[str]], float]
    examples: int
    kept: Callable[[list[str]], dict]
    """Per-example predictions and score parts of a list of predictions, in the format fine-tuning runs keep
    (``paired.compare_runs`` reads both): one entry per example (a word-level task's: per sentence)."""


@dataclass
class ProbePlan:
    models: list[ProbeModel]
    tasks: dict[str, TaskData]
    """Task spec -> its examples (already cut to the plan's sizes)."""
    output: Path
    settings: ProbeSettings = field(default_factory=ProbeSettings)
    tables: Path | None = None
    """Folder of probe_results.md/.csv (default: output)."""

    def row_path(self, model: ProbeModel, spec: str) -> Path:
        return row_folder(self.output, model.name, model.attention) / f"{task_display_name(spec)}.json"

    def row_settings(self, model: ProbeModel, spec: str) -> dict:
        data = self.tasks[spec]
        return {"model_path": str(model.path), "random_init": model.random_init, "attention": model.attention,
                "task": spec, "examples": {s: len(data.splits[s]) for s in SPLITS}, **self.settings.record()}


def check_probe_tasks(tasks: dict[str, TaskData]) -> None:
    for spec, data in tasks.items():
        if data.kind in NOT_PROBED:
            raise ProbeError(f"task {spec} is {data.kind.replace('_', ' ')}, which the linear probe does not score "
                             f"({NOT_PROBED[data.kind]}); drop it from --tasks or fine-tune without --probe")


def with_random_baselines(models: list[ProbeModel]) -> list[ProbeModel]:
    """``models`` plus one random-init row per model shape and attention mode (named ``random-init``, or
    ``random-init-<model>`` when the models have several shapes), taking the first such model's tokenizer."""
    shapes: dict[str, ProbeModel] = {}
    for m in models:
        if not m.random_init:
            shapes.setdefault(repr(model_shape(m.path)), m)
    attentions = [a for a in ATTENTIONS if any(m.attention == a for m in models)]
    baselines = [ProbeModel(RANDOM_INIT if len(shapes) == 1 else f"{RANDOM_INIT}-{first.name}", first.path, a, True)
                 for first in shapes.values() for a in attentions]
    return models + [b for b in baselines if b not in models]


def _task(data: TaskData, tokenizer, settings: ProbeSettings):
    task_settings = TaskSettings(max_length=settings.max_length, eurobert_inputs=False, unseen_labels=True)
    cls = SequenceClassification if data.kind == "sequence_classification" else TokenClassification
    return cls(data, tokenizer, task_settings)


def task_rows(data: TaskData, frozen: FrozenModel, causal: bool, settings: ProbeSettings) -> dict[str, SplitRows]:
    """Features, labels and scorer of every split of ``data`` under ``frozen`` in one attention mode."""
    task = _task(data, frozen.tokenizer, settings)
    rows = {}
    for split in SPLITS:
        examples = data.splits[split]
        if data.kind == "sequence_classification":
            features = pooled_features(frozen, task.encode_split(split), causal, settings.batch_size, settings.device)
            gold = [e.label for e in examples]
            rows[split] = SplitRows(features, gold, lambda p, g=gold: 100.0 * metrics.accuracy(p, g), len(examples),
                                    lambda p, g=gold: {"aggregate": metrics.MEAN, "ids": list(range(len(g))),
                                                       "predictions": list(p),
                                                       "parts": [[100.0 * (a == b)] for a, b in zip(p, g)]})
            continue
        words = word_features(frozen, task.encode_split(split), causal, settings.batch_size, settings.device)
        where = [(s, w) for s, sentence in enumerate(words) for w in sorted(sentence)]
        features = np.stack([words[s][w] for s, w in where]) if where else np.zeros((0, frozen.model.args.hidden_size))
        score, kept = _word_scorers(task, examples, where)
        rows[split] = SplitRows(features, [examples[s].tags[w] for s, w in where], score, len(examples), kept)
    return rows


def _word_scorers(task: TokenClassification, sentences: list, where: list[tuple[int, int]]):
    """The task's metric of per-word predictions, and its per-sentence parts; words no prediction reached get the
    task's fallback tag."""
    gold = [s.tags for s in sentences]

    def tags_of(predictions: list[str]) -> list[list[str]]:
        tags = [[task.fallback_tag] * len(s.tokens) for s in sentences]
        for (s, w), tag in zip(where, predictions):
            tags[s][w] = tag
        return tags

    def score(predictions: list[str]) -> float:
        if task.uses_spans:
            return 100.0 * metrics.span_f1(tags_of(predictions), gold)["f1"]
        return 100.0 * metrics.tagging_accuracy(tags_of(predictions), gold)

    def kept(predictions: list[str]) -> dict:
        tags = tags_of(predictions)
        aggregate, parts = metrics.tagging_parts(tags, gold, task.uses_spans)
        return {"aggregate": aggregate, "ids": list(range(len(sentences))), "predictions": tags, "parts": parts}
    return score, kept


def fit_linear_probe(rows: dict[str, SplitRows], c_grid: tuple[float, ...] = C_GRID) -> dict:
    """Standardised features, L2 logistic regression for each C; the best on validation scored on test."""
    require("sklearn", "the linear probe (tools/evaluate.py --probe linear)")
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train, validation, test = (rows[s] for s in SPLITS)
    if len(set(train.labels)) < 2:
        raise ProbeError(f"the probe's train split has {len(set(train.labels))} label(s); it needs two or more "
                         "(raise --max-train-examples)")
    by_c, best = {}, None
    for c in sorted(c_grid):
        probe = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=MAX_ITER))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            probe.fit(train.features, train.labels)
        converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
        predicted_validation = [str(label) for label in probe.predict(validation.features)]
        by_c[repr(c)] = validation.score(predicted_validation)
        if best is None or by_c[repr(c)] > best[1]:
            best = (c, by_c[repr(c)], probe, converged, predicted_validation)
    c, score, probe, converged, predicted_validation = best
    majority = Counter(train.labels).most_common(1)[0][0]
    predicted = {"validation": predicted_validation, "test": [str(label) for label in probe.predict(test.features)]}
    return {"c": c, "validation": score, "test": test.score(predicted["test"]),
            "kept": {s: rows[s].kept(predicted[s]) for s in predicted},
            "validation_by_c": by_c, "converged": converged,
            "majority": {s: rows[s].score([majority] * len(rows[s].labels)) for s in ("validation", "test")},
            "examples": {s: rows[s].examples for s in SPLITS}, "rows": {s: len(rows[s].labels) for s in SPLITS}}


def check_probe_plan(plan: ProbePlan) -> None:
    """Every refusal before any model is loaded: scikit-learn, task kinds, names, rows made with other settings."""
    require("sklearn", "the linear probe (tools/evaluate.py --probe linear)")
    check_probe_tasks(plan.tasks)
    rows = [(m.name, m.attention) for m in plan.models]
    if len(set(rows)) != len(rows):
        raise ProbeError(f"two probe rows share a model name and attention in {rows}; name each model once")
    for model in plan.models:
        for spec in plan.tasks:
            old = read_result(plan.row_path(model, spec))
            if old is not None and old.get("fingerprint") != fingerprint(plan.row_settings(model, spec)):
                raise ProbeError(f"{plan.row_path(model, spec)} was made with other settings ({old.get('settings')}); "
                                 "use another --output folder to keep both, or delete that file")


def run_probe(plan: ProbePlan, log=print) -> list[dict]:
    """Score every (model, task) row that has no finished result, then write the tables; returns every row."""
    check_probe_plan(plan)
    results = []
    for model in plan.models:
        pending = [s for s in plan.tasks if read_result(plan.row_path(model, s)) is None]
        frozen = load_frozen(model) if pending else None
        for spec in plan.tasks:
            if spec in pending:
                _score_row(plan, model, spec, frozen, log)
            results.append(read_result(plan.row_path(model, spec)))
        del frozen
    write_tables(Path(plan.tables or plan.output), results, plan.settings)
    return results


def _score_row(plan: ProbePlan, model: ProbeModel, spec: str, frozen: FrozenModel, log) -> None:
    start = time.perf_counter()
    rows = task_rows(plan.tasks[spec], frozen, model.causal, plan.settings)
    extracted = time.perf_counter()
    fitted = fit_linear_probe(rows, plan.settings.c_grid)
    kept = fitted.pop("kept")
    settings = plan.row_settings(model, spec)
    data = plan.tasks[spec]
    metric = _metric(data, rows)
    # The per-example predictions first: the row's result is what marks it finished.
    write_json_atomic(predictions_path(plan.row_path(model, spec)), {
        "model": model.name, "attention": model.attention, "task": task_display_name(spec), "seed": None,
        "metric": metric, "fingerprint": fingerprint(settings), **kept})
    result = {"status": "finished", "model": model.name, "attention": model.attention, "random_init": model.random_init,
              "model_input": str(model.path), "task": task_display_name(spec), "kind": data.kind,
              "metric": metric, "hidden_size": int(rows["train"].features.shape[1]), **fitted,
              "predictions_path": predictions_path(plan.row_path(model, spec)).name,
              "seconds": {"features": extracted - start, "fit": time.perf_counter() - extracted},
              "settings": settings, "fingerprint": fingerprint(settings)}
    write_json_atomic(plan.row_path(model, spec), result)
    log(f"probe {model.name} ({model.attention}) on {result['task']}: val {fitted['validation']:.2f} test "
        f"{fitted['test']:.2f} (C={fitted['c']:g}; majority {fitted['majority']['test']:.2f}; "
        f"{extracted - start:.1f} s features)")


def row_folder(output: Path, model: str, attention: str) -> Path:
    return Path(output) / "probe" / model / attention


def predictions_path(row_path: Path) -> Path:
    """Where a probe row keeps its per-example validation and test predictions: beside its result."""
    return row_path.with_name(f"{row_path.stem}.predictions.json")


def kept_predictions(output: Path, result: dict) -> dict:
    """The per-example predictions a finished row of the probe written to ``output`` kept (``paired.compare_runs``
    compares two of them)."""
    path = row_folder(output, result["model"], result["attention"]) / result["predictions_path"]
    kept = read_predictions(path)
    if kept is None:
        raise ProbeError(f"{path} is missing or unreadable; rerun the probe of {result['model']} on {result['task']}")
    if kept.get("fingerprint") != result.get("fingerprint"):  # another setting's predictions, not this row's
        raise ProbeError(f"{path} was written with other settings than its row's result; rerun the probe of "
                         f"{result['model']} on {result['task']}")
    return kept


def _metric(data: TaskData, rows: dict[str, SplitRows]) -> str:
    if data.kind == "sequence_classification":
        return "accuracy"
    return "span_f1" if metrics.is_bio_tagset(set(rows["train"].labels)) else "accuracy"


def informative(results: list[dict], lexical: dict[str, float] | None = None) -> dict[str, bool]:
    """Per task, decided on validation scores before any test score is read (issue 45): does some trained row's
    validation score beat the best random-init row, the majority class and (``lexical``: task -> the best lexical
    baseline's validation score, eval/baselines.py) the best lexical baseline on validation by more than two
    binomial standard errors of that score?"""
    verdicts = {}
    for task in sorted({r["task"] for r in results}):
        rows = [r for r in results if r["task"] == task]
        trained = [r for r in rows if not r["random_init"]]
        if not trained:
            continue
        best = max(trained, key=lambda r: r["validation"])
        floor = max([r["validation"] for r in rows if r["random_init"]] + [best["majority"]["validation"]]
                    + ([lexical[task]] if lexical and task in lexical else []))
        p, n = best["validation"] / 100.0, max(best["rows"]["validation"], 1)
        verdicts[task] = best["validation"] - floor > 200.0 * math.sqrt(max(p * (1 - p), 1e-12) / n)
    return verdicts


def markdown_tables(results: list[dict]) -> str:
    """The per-row table, then test scores with one row per (model, attention) and one column per task."""
    lines = ["| model | attention | task | metric | C | val | test | majority (test) | train / val / test |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        sizes = " / ".join(str(r["rows"][s]) for s in SPLITS)
        lines.append(f"| {r['model']} | {r['attention']} | {r['task']} | {r['metric']} | {r['c']:g} | "
                     f"{r['validation']:.2f} | {r['test']:.2f} | {r['majority']['test']:.2f} | {sizes} |")
    tasks = list(dict.fromkeys(r["task"] for r in results))
    verdicts = informative(results)
    lines += ["", "Test scores (the last column is the mean over the tasks):", "",
              "| model | attention | " + " | ".join(tasks) + " | mean |", "|---|---|" + "---|" * (len(tasks) + 1)]
    for key in dict.fromkeys((r["model"], r["attention"]) for r in results):
        cells = {r["task"]: r["test"] for r in results if (r["model"], r["attention"]) == key}
        shown = [f"{cells[t]:.2f}" if t in cells else "–" for t in tasks]
        mean = f"{np.mean([cells[t] for t in tasks]):.2f}" if len(cells) == len(tasks) else "–"
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(shown) + f" | {mean} |")
    majority = {r["task"]: r["majority"]["test"] for r in results}
    lines.append("| majority class | – | " + " | ".join(f"{majority[t]:.2f}" for t in tasks) + " | – |")
    lines += ["", "Informative, on validation (a trained row beats random init and the majority class by more than two "
                  "standard errors): " + ", ".join(f"{t} {'yes' if v else 'no'}" for t, v in verdicts.items())]
    return "\n".join(lines) + "\n"


def write_tables(folder: Path, results: list[dict], settings: ProbeSettings) -> list[Path]:
    head = (f"# Linear-probe results\n\nFeatures: {POOLING}, inputs cut at {settings.max_length} tokens; probe: "
            f"StandardScaler + LogisticRegression (L2, lbfgs, max_iter {MAX_ITER}), C in "
            f"{', '.join(f'{c:g}' for c in settings.c_grid)} chosen on validation, scored on test.\n\n")
    buffer = io.StringIO()
    fields = ["model", "attention", "random_init", "task", "metric", "c", "validation", "test", "majority_test",
              "train_rows", "validation_rows", "test_rows", "converged", "model_input"]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in results:
        writer.writerow({**{k: r[k] for k in fields if k in r}, "majority_test": r["majority"]["test"],
                         **{f"{s}_rows": r["rows"][s] for s in SPLITS}})
    paths = [folder / name for name in TABLES]
    write_text_atomic(paths[0], head + markdown_tables(results))
    write_text_atomic(paths[1], buffer.getvalue())
    return paths


__all__ = ["C_GRID", "PROBES", "ProbeError", "ProbePlan", "ProbeSettings", "check_probe_tasks",
           "fit_linear_probe", "run_probe", "with_random_baselines"]

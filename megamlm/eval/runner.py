"""The protocol: every (model, task, learning rate, seed) is one fine-tuning run with its own result
file; finished runs are skipped; runs are spread over worker processes and devices; everything a user
can get wrong is checked in the main process before the first run starts."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
import random
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from megamlm.errors import UserError
from megamlm.eval import lexical
from megamlm.eval.aggregate import collect, per_lr, summarize
from megamlm.eval.baseline_store import baseline_path, read_baseline_file, read_baselines, write_baselines
from megamlm.eval.baselines import QA_RULES
from megamlm.eval.examples import RetrievalSplit, TaskData
from megamlm.eval.finetune import PRECISIONS, Hyperparameters, run_finetuning
from megamlm.eval.model_io import load_encoder, load_tokenizer
from megamlm.eval.model_source import ModelEntry
from megamlm.eval.paired import paired_comparisons, paired_table
from megamlm.eval.registry import check_task_spec, load_task, task_display_name
from megamlm.eval.report import write_report
from megamlm.eval.results import (
    RunKey,
    fingerprint,
    read_result,
    write_json_atomic,
    write_text_atomic,
)
from megamlm.eval.tasks import TaskSettings, build_task

PAPER_LRS = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4)
PAPER_SEEDS = (0, 1, 2, 3, 4)


class PlanError(UserError, ValueError):
    """An evaluation that cannot start as asked; the message names the fix."""


@dataclass
class EvalPlan:
    models: list[ModelEntry]
    tasks: list[str]
    output: Path
    lrs: tuple[float, ...] = PAPER_LRS
    seeds: tuple[int, ...] = PAPER_SEEDS
    hyperparameters: Hyperparameters = field(default_factory=Hyperparameters)
    settings: TaskSettings = field(default_factory=TaskSettings)
    max_train_examples: int = 0
    """Use at most this many train examples (retrieval: queries), a fixed random subset; 0 = all."""
    max_eval_examples: int = 0
    """Same for validation and test (retrieval: queries; the corpus is kept whole)."""
    data_dir: str | None = None
    hf_datasets_dir: str | None = None
    retrieval_corpus: str = "judged"
    """The paper's datasets: judged (EncodEval's corpus: the documents judged for validation or test) or full."""
    num_workers: int = 1
    devices: tuple[str, ...] = ("cpu",)
    baselines: bool = False
    """Also compute each task's trivial baselines (megamlm.eval.baselines) into <output>/baselines."""
    model_seeds: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Fine-tuning seeds of particular models instead of ``seeds`` (the random-init baseline's
    --random-init-seeds)."""
    pairs: list[tuple[str, str]] = field(default_factory=list)
    """(A, B) model pairs compared on the same test examples (``paired.py``) in results.md."""

    def keys(self) -> list[RunKey]:
        return [RunKey(m.name, task_display_name(t), lr, seed)
                for m in self.models for t in self.tasks for lr in self.lrs
                for seed in self.model_seeds.get(m.name, self.seeds)]

    def run_settings(self, model: ModelEntry, task: str) -> dict:
        """Everything except LR and seed that determines a run's result (its fingerprint)."""
        hp = {k: v for k, v in self.hyperparameters.to_dict().items() if k not in ("lr", "seed")}
        return {"model_path": str(model.hf_path), "task": task, "hyperparameters": hp,
                "task_settings": dataclasses.asdict(self.settings), "max_train_examples": self.max_train_examples,
                "max_eval_examples": self.max_eval_examples, "retrieval_corpus": self.retrieval_corpus}

    def baseline_settings(self, task: str) -> dict:
        """What determines a task's trivial baselines (their fingerprint)."""
        return {"task": task, "max_train_examples": self.max_train_examples,
                "max_eval_examples": self.max_eval_examples, "retrieval_corpus": self.retrieval_corpus,
                "qa_rules": list(QA_RULES), "lexical": lexical.grid_settings()}


def _subset(items: list, limit: int) -> list:
    if not limit or len(items) <= limit:
        return items
    chosen = sorted(random.Random(0).sample(range(len(items)), limit))
    return [items[i] for i in chosen]


def limit_examples(data: TaskData, max_train: int, max_eval: int) -> TaskData:
    splits = {}
    for split, content in data.splits.items():
        limit = max_train if split == "train" else max_eval
        if isinstance(content, RetrievalSplit):
            queries = _subset(list(content.queries), limit)
            splits[split] = RetrievalSplit({q: content.queries[q] for q in queries}, content.corpus,
                                           {q: content.qrels[q] for q in queries if q in content.qrels})
        else:
            splits[split] = _subset(content, limit)
    return dataclasses.replace(data, splits=splits)


def load_plan_task(plan: EvalPlan, spec: str) -> TaskData:
    data = load_task(spec, plan.data_dir, plan.hf_datasets_dir, plan.retrieval_corpus)
    return limit_examples(data, plan.max_train_examples, plan.max_eval_examples)


def check_plan(plan: EvalPlan, log=print) -> dict[str, TaskData]:
    """All user errors, before any run: options, task names, data, labels, tokenizers, old results."""
    if not plan.lrs or any(lr <= 0 for lr in plan.lrs):
        raise PlanError(f"learning rates must be positive numbers, got {list(plan.lrs)}; e.g. --lrs 1e-5,2e-5,5e-5")
    if not plan.seeds:
        raise PlanError("no seeds given; e.g. --seeds 0,1,2,3,4")
    hp = plan.hyperparameters
    if (hp.batch_size < 1 or hp.micro_batch_size < 1
            or (hp.max_steps is not None and (hp.max_steps == 0 or hp.max_steps < -1))
            or hp.epochs <= 0 or not 0 <= hp.warmup_ratio < 1):
        raise PlanError(f"need --batch-size >= 1, --micro-batch-size >= 1, --max-steps >= 1 or -1 (epochs only), "
                        f"--epochs > 0 and 0 <= --warmup-ratio < 1 (got {hp.batch_size}, {hp.micro_batch_size}, "
                        f"{hp.max_steps}, {hp.epochs}, {hp.warmup_ratio})")
    if hp.precision not in PRECISIONS:
        raise PlanError(f"unknown --precision {hp.precision!r}; use one of {', '.join(PRECISIONS)}")
    if plan.settings.max_length is not None and plan.settings.max_length < 8:
        raise PlanError(f"--max-length {plan.settings.max_length} is too short; give at least 8 tokens or leave it "
                        f"unset for the protocol's length (99% of the model's positions)")
    if plan.num_workers < 1:
        raise PlanError("--num-workers must be at least 1")
    for spec in plan.tasks:
        check_task_spec(spec)
    names = [task_display_name(t) for t in plan.tasks]
    if len(set(names)) != len(names):
        raise PlanError(f"two tasks share a name in {plan.tasks}; give user task folders different names")
    tokenizers = {m.name: load_tokenizer(m.hf_path) for m in plan.models}
    tasks = {}
    for spec in plan.tasks:
        log(f"loading task {spec}")
        tasks[spec] = load_plan_task(plan, spec)
        for model in plan.models:
            build_task(tasks[spec], tokenizers[model.name], plan.settings, model.hf_path)  # validates data and labels
    for model in plan.models:
        for spec in plan.tasks:
            expected = fingerprint(plan.run_settings(model, spec))
            for key in plan.keys():
                if key.model != model.name or key.task != task_display_name(spec):
                    continue
                result = read_result(plan.output / key.relative_path())
                if result is not None and result.get("fingerprint") != expected:
                    raise PlanError(f"{plan.output / key.relative_path()} was made with other settings "
                                    f"({result.get('settings')}); use another --output folder to keep both, "
                                    f"or delete that folder's runs/{key.model}/{key.task}")
    for spec in plan.tasks if plan.baselines else ():
        stored = read_baseline_file(plan.output, task_display_name(spec))
        if stored is not None and stored.get("fingerprint") != fingerprint(plan.baseline_settings(spec)):
            raise PlanError(f"{baseline_path(plan.output, task_display_name(spec))} was made with other settings "
                            f"({stored.get('settings')}); use another --output folder to keep both, or delete it")
    return tasks


def compute_baselines(plan: EvalPlan, tasks: dict[str, TaskData], log=print) -> None:
    """The trivial baselines of every task that has none stored yet (they are deterministic: stored ones are kept)."""
    for spec in plan.tasks:
        name = task_display_name(spec)
        if read_baseline_file(plan.output, name) is None:
            started = time.perf_counter()
            path = write_baselines(plan.output, name, tasks[spec], plan.baseline_settings(spec))
            log(f"trivial baselines of {name}: {path} ({time.perf_counter() - started:.1f} s)")


class _Worker:
    """Runs a list of keys in one process, caching loaded tasks and tokenizers between runs."""

    def __init__(self, plan: EvalPlan, device: str, worker_id: int, tasks: dict[str, TaskData] | None = None):
        self.plan, self.device, self.worker_id = plan, device, worker_id
        self.task_data = dict(tasks or {})
        self.tasks: dict[tuple[str, str], object] = {}

    def task(self, model: ModelEntry, spec: str):
        if (model.name, spec) not in self.tasks:
            if spec not in self.task_data:
                self.task_data[spec] = load_plan_task(self.plan, spec)
            self.tasks[(model.name, spec)] = build_task(self.task_data[spec], load_tokenizer(model.hf_path),
                                                        self.plan.settings, model.hf_path)
        return self.tasks[(model.name, spec)]

    def run(self, key: RunKey) -> tuple[RunKey, str, str]:
        model = next(m for m in self.plan.models if m.name == key.model)
        spec = next(t for t in self.plan.tasks if task_display_name(t) == key.task)
        path = self.plan.output / key.relative_path()
        error_path = path.with_suffix(".error.txt")
        try:
            task = self.task(model, spec)
            hp = dataclasses.replace(self.plan.hyperparameters, lr=key.lr, seed=key.seed)
            outcome = run_finetuning(task, lambda: load_encoder(model.hf_path), hp, torch.device(self.device))
        except Exception:
            write_text_atomic(error_path, traceback.format_exc())
            return key, "failed", f"see {error_path}"
        settings = self.plan.run_settings(model, spec)
        kept = {split: outcome[split].pop("predictions") for split in ("validation", "test")
                if "predictions" in outcome.get(split, {})}
        write_json_atomic(self.plan.output / key.predictions_path(), {
            "model": model.name, "task": key.task, "lr": key.lr, "seed": key.seed, "metric": task.metric,
            "fingerprint": fingerprint(settings), **kept})
        result = {"status": "finished", "model": model.name, "model_input": str(model.path),
                  "task": key.task, "task_spec": spec, "kind": task.kind, "family": task.family,
                  "metric": task.metric, "lr": key.lr, "seed": key.seed, "device": self.device,
                  "settings": settings, "fingerprint": fingerprint(settings), "finished_at": time.time(), **outcome}
        write_json_atomic(path, result)
        if error_path.exists():
            error_path.unlink()
        message = (f"val {outcome['validation']['score']:.2f} test {outcome['test']['score']:.2f} "
                   f"({outcome['seconds']:.1f} s{', diverged' if outcome['diverged_at_step'] is not None else ''})")
        return key, "finished", message


def _worker_main(plan: EvalPlan, keys: list[RunKey], device: str, worker_id: int, threads: int) -> list:
    torch.set_num_threads(threads)
    worker = _Worker(plan, device, worker_id)
    outcomes = []
    for key in keys:
        outcome = worker.run(key)
        print(f"[worker {worker_id} {device}] {key.model}/{key.task} lr={key.lr:g} seed={key.seed}: "
              f"{outcome[1]} {outcome[2]}", flush=True)
        outcomes.append(outcome)
    return outcomes


def execute(plan: EvalPlan, tasks: dict[str, TaskData] | None = None, log=print) -> dict[str, list[RunKey]]:
    """Run every planned run that has no finished result; returns keys by outcome."""
    keys = plan.keys()
    pending = [k for k in keys if read_result(plan.output / k.relative_path()) is None]
    report = {"skipped": [k for k in keys if k not in pending], "finished": [], "failed": []}
    log(f"{len(keys)} runs planned, {len(report['skipped'])} already finished, {len(pending)} to run")
    if not pending:
        return report
    workers = min(plan.num_workers, len(pending))
    if workers == 1:
        worker = _Worker(plan, plan.devices[0], 0, tasks)
        for i, key in enumerate(pending):
            key, status, message = worker.run(key)
            log(f"[{i + 1}/{len(pending)}] {key.model}/{key.task} lr={key.lr:g} seed={key.seed}: {status} {message}")
            report[status].append(key)
        return report
    threads = max(1, (os.cpu_count() or 1) // workers)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(_worker_main, plan, pending[i::workers], plan.devices[i % len(plan.devices)], i, threads)
                   for i in range(workers)]
        for future in concurrent.futures.as_completed(futures):
            for key, status, _ in future.result():
                report[status].append(key)
    return report


OUTPUT_ENTRIES = ("runs", "hf_exports", "baselines", "results.md", "results.csv", "baselines.csv", "scores_per_lr.csv",
                  "score_per_model.png", "score_vs_lr.png", "probe", "probe_results.md", "probe_results.csv")
"""What tools/evaluate.py writes into --output: a folder holding one of them is one it wrote (and resumes)."""


def check_output_folder(output: Path, force: bool = False) -> None:
    """--output is new, empty, or an earlier evaluation's folder (rerunning resumes it: finished runs are skipped);
    a folder holding only other files is someone else's and refused unless ``force``."""
    output = Path(output)
    blocker = next((p for p in (output, *output.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise PlanError(f"--output {output}: {blocker} is a file, not a folder; choose a folder for the results")
    if not output.is_dir() or force:
        return
    entries = sorted(p.name for p in output.iterdir())
    if entries and not set(entries) & set(OUTPUT_ENTRIES):
        raise PlanError(f"--output {output} holds files tools/evaluate.py did not write ({', '.join(entries[:3])}"
                        f"{', ...' if len(entries) > 3 else ''}); choose a new or empty folder, or pass --force to "
                        "write into it anyway")


def evaluate(plan: EvalPlan, plots: bool = True, log=print, tables: Path | None = None) -> dict:
    """Check, run what is missing, then aggregate everything finished into tables and figures (in ``tables``,
    default the plan's output folder)."""
    tasks = check_plan(plan, log=log)
    if plan.baselines:
        compute_baselines(plan, tasks, log=log)
    report = execute(plan, tasks, log=log)
    results = collect(plan.output, plan.keys())
    summaries = summarize(results, plan.keys())
    if tables is not None:
        Path(tables).mkdir(parents=True, exist_ok=True)
    baselines = read_baselines(plan.output, [task_display_name(t) for t in plan.tasks]) if plan.baselines else []
    seeds = {m.name: plan.model_seeds.get(m.name, plan.seeds) for m in plan.models}
    paired = paired_comparisons(plan.output, summaries, plan.pairs, seeds) if plan.pairs else []
    written = write_report(Path(tables or plan.output), summaries, per_lr(results), plots=plots, baselines=baselines,
                           paired=paired_table(paired))
    log(f"{len(report['finished'])} runs finished now, {len(report['skipped'])} skipped (finished before), "
        f"{len(report['failed'])} failed; wrote {', '.join(str(p) for p in written)}")
    return {**report, "summaries": summaries, "written": written}

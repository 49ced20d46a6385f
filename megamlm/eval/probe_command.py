"""``tools/evaluate.py --probe linear``: its flags, the fine-tuning flags it refuses, and the command itself
(models and attention modes -> rows with random-init baselines -> tasks cut to size -> ``probe.run_probe``)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from megamlm.eval.frozen import model_shape, probe_models
from megamlm.eval.model_io import MAX_LENGTH_FRACTION
from megamlm.eval.model_source import parse_model_specs
from megamlm.eval.probe import (
    C_GRID,
    PROBES,
    TABLES,
    ProbeError,
    ProbePlan,
    ProbeSettings,
    run_probe,
    with_random_baselines,
)
from megamlm.eval.registry import check_task_spec, load_task
from megamlm.eval.runner import check_output_folder, limit_examples
from megamlm.extras import require

PROBE_MAX_LENGTH = 512
"""--max-length protocol under --probe: 512 tokens, or 99% of the shortest model's positions where less."""

PROBE_ONLY_FLAGS = {"--probe-attention": "probe_attention", "--probe-c-grid": "probe_c_grid"}
"""Flags that only the probe reads (refused without --probe)."""
FINETUNING_FLAGS = {
    "--lrs": "lrs", "--seeds": "seeds", "--batch-size": "batch_size", "--micro-batch-size": "micro_batch_size",
    "--max-steps": "max_steps", "--epochs": "epochs", "--warmup-ratio": "warmup_ratio", "--beta1": "beta1",
    "--beta2": "beta2", "--eps": "eps", "--weight-decay": "weight_decay", "--max-grad-norm": "max_grad_norm",
    "--precision": "precision", "--max-query-length": "max_query_length", "--doc-stride": "doc_stride",
    "--max-answer-length": "max_answer_length", "--no-answer-threshold": "no_answer_threshold",
    "--temperature": "temperature", "--classifier-pooling": "classifier_pooling",
    "--retrieval-corpus": "retrieval_corpus", "--num-workers": "num_workers", "--export-arch": "export_arch",
    "--no-plots": "no_plots",
}
"""Flags of fine-tuning that the probe has no use for (refused with --probe)."""


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def add_probe_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--probe", choices=PROBES,
                        help="score frozen models with a probe instead of fine-tuning them: linear = mean-pooled "
                             "final-layer states, StandardScaler + logistic regression, C chosen on validation, "
                             "test scored with the task's metric, beside a random-init model of the same shape "
                             "(sequence and token classification tasks)")
    parser.add_argument("--probe-attention", default="bidirectional",
                        help="--probe: attention the models run with: causal, bidirectional, or causal,bidirectional "
                             "for a row of each (the same weights; a decoder as trained is causal)")
    parser.add_argument("--probe-c-grid", type=_floats, default=C_GRID,
                        help="--probe: comma-separated inverse L2 strengths tried on validation")


def given_flags(args, parser: argparse.ArgumentParser, flags: dict[str, str]) -> list[str]:
    """The ``flags`` (flag -> dest) whose parsed value is not the parser's default (as parsed: a string default goes
    through the flag's type)."""
    defaults = parser.parse_args(["--model", "m=x", "--tasks", "t", "--output", "o"])
    return [flag for flag, dest in flags.items() if getattr(args, dest) != getattr(defaults, dest)]


def probe_command(args, parser: argparse.ArgumentParser, log=print) -> int:
    """Run the probe of tools/evaluate.py's parsed ``args``; user errors raise (the caller prints one line)."""
    refused = given_flags(args, parser, FINETUNING_FLAGS)
    if refused:
        raise ProbeError(f"{refused[0]} is a fine-tuning setting, which --probe {args.probe} does not use; drop it "
                         "(the probe fits a logistic regression for each C of --probe-c-grid)")
    if not args.probe_c_grid or any(not math.isfinite(c) or c <= 0 for c in args.probe_c_grid):
        raise ProbeError(f"--probe-c-grid {list(args.probe_c_grid)}: give positive numbers, e.g. 0.01,0.1,1")
    if args.max_length is not None and args.max_length < 8:
        raise ProbeError(f"--max-length {args.max_length} is too short; give at least 8 tokens")
    if args.eval_batch_size < 1 or args.max_train_examples < 0 or args.max_eval_examples < 0:
        raise ProbeError("--eval-batch-size must be at least 1 and --max-train-examples, --max-eval-examples at least "
                         f"0 (got {args.eval_batch_size}, {args.max_train_examples}, {args.max_eval_examples})")
    specs = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not specs:
        raise ProbeError("no task given; pass --tasks, e.g. --tasks austen-novel,rt-sentiment")
    require("sklearn", f"--probe {args.probe} (its logistic regression)")
    for spec in specs:
        check_task_spec(spec)
    check_output_folder(args.output, args.force)
    attentions = [a.strip() for a in args.probe_attention.split(",") if a.strip()]
    models = with_random_baselines(probe_models(parse_model_specs(args.model), attentions, args.checkpoints, log))
    max_length = args.max_length or min([PROBE_MAX_LENGTH] + [
        round(MAX_LENGTH_FRACTION * model_shape(m.path).max_seq_length) for m in models])
    tasks = {}
    for spec in specs:
        log(f"loading task {spec}")
        tasks[spec] = limit_examples(load_task(spec, args.data_dir, args.hf_datasets_dir),
                                     args.max_train_examples, args.max_eval_examples)
    device = (args.devices.split(",")[0].strip() if args.devices
              else "cuda:0" if torch.cuda.is_available() else "cpu")
    plan = ProbePlan(models, tasks, Path(args.output),
                     ProbeSettings(max_length, args.eval_batch_size, tuple(args.probe_c_grid), device),
                     Path(args.tables) if args.tables else None)
    results = run_probe(plan, log)
    tables = Path(plan.tables or plan.output)
    log(f"{len(results)} probe rows; wrote {', '.join(str(tables / name) for name in TABLES)}")
    return 0

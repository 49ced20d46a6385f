"""Fine-tune and score encoders with the paper's protocol (LR grid x seeds, best LR on validation,
test mean and 95% CI over seeds), one result file per run; rerunning skips finished runs (an --output
folder holding only files of something else is refused unless --force).

    python tools/evaluate.py --model mlm=hf/mlm,clm=hf/clm --tasks austen-qa,austen-retrieval --output evals/x
    python tools/evaluate.py --model mlm=runs/mlm --tasks sst2,squad --output evals/y  # every checkpoint of a run

Tasks: local (austen-novel, austen-qa, austen-qa-speakers, austen-retrieval, austen-retrieval-small from
the packaged corpus; rt-sentiment, brown-genre, brown-pos from --data-dir), the paper's 12 datasets (sst2 qqp
mnli conll2003 ontonotes uner squad squad_v2 record msmarco nq mldr, loaded with Hugging Face datasets:
downloaded and cached when online, from the cache with HF_HUB_OFFLINE=1, or from --hf-datasets-dir copies),
or your own folder as TYPE:PATH. Writes results.md, results.csv, scores_per_lr.csv, score_per_model.png
and score_vs_lr.png.

    python tools/evaluate.py --probe linear --probe-attention causal,bidirectional --model src=ckpt/smollm2 \
        --tasks austen-novel,rt-sentiment --max-train-examples 1000 --max-eval-examples 500 --output evals/probe

--probe linear scores frozen models instead of fine-tuning them: features are the final layer's hidden states
mean-pooled over each text's non-padding tokens (token classification: over each word's sub-tokens); a
StandardScaler + scikit-learn LogisticRegression (L2) is fitted on train for C in --probe-c-grid, the C best on
validation is scored on test with the task's metric. A random-init model of each model's shape (megamlm's own
initialisation, seed 0) is probed beside them as row random-init, and the majority class is shown per task.
Models are read into megamlm's Transformer (megamlm checkpoints or run folders, Hugging Face folders or .gguf
files of the families tools/convert_from_hf.py imports), so --probe-attention runs the same weights causally
or bidirectionally. Question answering and retrieval are not probed (no label per text or word). Writes
probe/<model>/<attention>/<task>.json per row, probe_results.md and probe_results.csv.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.env_args import command_line  # noqa: E402
from megamlm.errors import UserError, exit_line  # noqa: E402
from megamlm.eval.examples import TASK_KINDS  # noqa: E402
from megamlm.eval.finetune import PRECISIONS, Hyperparameters  # noqa: E402
from megamlm.eval.heads import POOLINGS  # noqa: E402
from megamlm.eval.model_source import CHECKPOINT_CHOICES, MODEL_NAME, parse_model_specs, resolve_models  # noqa: E402
from megamlm.eval.mteb_run import mteb_command  # noqa: E402
from megamlm.eval.paper_datasets import PAPER_DATASETS, RETRIEVAL_CORPORA  # noqa: E402
from megamlm.eval.probe_command import PROBE_ONLY_FLAGS, add_probe_flags, given_flags, probe_command  # noqa: E402
from megamlm.eval.random_init import DEFAULT_NAME, RANDOM_INIT_SEED, random_init_model  # noqa: E402
from megamlm.eval.registry import LOCAL_TASKS  # noqa: E402
from megamlm.eval.runner import (  # noqa: E402
    PAPER_LRS,
    PAPER_SEEDS,
    EvalPlan,
    PlanError,
    check_output_folder,
    evaluate,
)
from megamlm.eval.tasks import TaskSettings  # noqa: E402
from megamlm.extras import require  # noqa: E402


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _int_or_protocol(text: str) -> int | None:
    """An integer, or None for "protocol" (the value the protocol derives per task or model)."""
    return None if text == "protocol" else int(text)


class _DefaultOnce(argparse.HelpFormatter):
    """Appends "(default: X)" to a flag's help unless the help already says what its default is, or it has none."""

    def _get_help_string(self, action):
        text, default = action.help or "", action.default
        if "default" in text or default is None or default is False or default is argparse.SUPPRESS \
                or not action.option_strings:
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (tuple, list)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


def _task_epilog() -> str:
    return (f"tasks: local, runnable offline: {', '.join(LOCAL_TASKS)}; the paper's datasets (Hugging Face Hub, "
            f"needs megamlm[eval]): {', '.join(PAPER_DATASETS)}; or TYPE:PATH, TYPE one of {', '.join(TASK_KINDS)}")


def build_parser() -> argparse.ArgumentParser:
    hp, ts = Hyperparameters(), TaskSettings()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=_DefaultOnce,
                                prog="evaluate.py", usage="%(prog)s --model NAME=PATH (--tasks TASKS | --mteb TASKS) "
                                                          "--output DIR [options]",
                                epilog=_task_epilog(), allow_abbrev=False)
    p.add_argument("--model", action="append", required=True,
                   help="NAME=PATH (repeatable or comma-separated); PATH is a Hugging Face folder, a megamlm "
                        "checkpoint, or a megamlm run folder (see --checkpoints)")
    p.add_argument("--checkpoints", choices=CHECKPOINT_CHOICES, default="all",
                   help="for a run folder given as --model: evaluate every whole checkpoint (models NAME-stepN) "
                        "or only the newest (model NAME)")
    p.add_argument("--tasks", help="comma-separated task names or TYPE:PATH folders (listed below)")
    p.add_argument("--mteb", metavar="TASKS",
                   help="score the models as embedders on mteb's tasks instead (comma-separated mteb names, or the "
                        "bundled AustenNovelClustering, offline), loaded in sentence-transformers with their model "
                        "card's pooling; writes OUTPUT/mteb_results.md and mteb's files under OUTPUT/mteb "
                        "(needs megamlm[mteb])")
    p.add_argument("--output", required=True, type=Path, help="folder for run results, tables and figures")
    p.add_argument("--lrs", type=_floats, default=PAPER_LRS, help="comma-separated learning-rate grid")
    p.add_argument("--seeds", type=_ints, default=PAPER_SEEDS, help="comma-separated seeds")
    p.add_argument("--batch-size", type=int, default=hp.batch_size, help="examples per optimizer step")
    p.add_argument("--micro-batch-size", type=int, default=hp.micro_batch_size,
                   help="examples per forward/backward (gradients accumulate to --batch-size); retrieval: the "
                        "mini-batch of the cached ranking loss")
    p.add_argument("--max-steps", type=_int_or_protocol, default="protocol",
                   help="optimizer steps per run, winning over --epochs; -1 = --epochs only; protocol = 1000, "
                        "one epoch for token classification")
    p.add_argument("--epochs", type=float, default=hp.epochs, help="passes over train when --max-steps is -1")
    p.add_argument("--warmup-ratio", type=float, default=hp.warmup_ratio, help="linear warmup fraction, then linear "
                                                                               "decay")
    p.add_argument("--beta1", type=float, default=hp.beta1, help="AdamW first-moment decay")
    p.add_argument("--beta2", type=float, default=hp.beta2, help="AdamW second-moment decay")
    p.add_argument("--eps", type=float, default=hp.eps, help="AdamW epsilon")
    p.add_argument("--weight-decay", type=float, default=hp.weight_decay, help="AdamW decay of matrices")
    p.add_argument("--max-grad-norm", type=float, default=hp.max_grad_norm, help="clipping; 0 = off")
    p.add_argument("--precision", choices=PRECISIONS, default=hp.precision,
                   help="auto = bf16 autocast on CUDA (as the paper), fp32 on CPU")
    p.add_argument("--max-length", type=_int_or_protocol, default="protocol",
                   help="longest input in tokens; protocol = 99%% of the model's max_position_embeddings (--probe: "
                        "512, or 99%% of the shortest model's positions where less)")
    p.add_argument("--max-query-length", type=int, default=ts.max_query_length, help="QA question tokens")
    p.add_argument("--doc-stride", type=int, default=ts.doc_stride,
                   help="QA window overlap in tokens (default: 128, or half the room a window leaves for context "
                        "where less)")
    p.add_argument("--max-answer-length", type=int, default=ts.max_answer_length, help="QA answer tokens")
    p.add_argument("--no-answer-threshold", type=float, default=ts.no_answer_threshold,
                   help="QA: answer nothing when null score > best span score + this")
    p.add_argument("--temperature", type=float, default=ts.temperature,
                   help="retrieval ranking-loss temperature (0.05 = sentence-transformers' scale 20)")
    p.add_argument("--classifier-pooling", choices=POOLINGS, default=ts.classifier_pooling,
                   help="sequence classification head pooling (default mean, as the paper reports; late is "
                        "EuroBERT's own)")
    p.add_argument("--retrieval-corpus", choices=RETRIEVAL_CORPORA, default="judged",
                   help="the paper's retrieval sets: judged = the documents judged for validation or test "
                        "(EncodEval's corpus), full = the whole corpus")
    p.add_argument("--eval-batch-size", type=int, default=ts.eval_batch_size,
                   help="examples per forward pass when scoring validation and test")
    p.add_argument("--max-train-examples", type=int, default=0, help="fixed random subset of train; 0 = all")
    p.add_argument("--max-eval-examples", type=int, default=0, help="fixed random subset of validation/test; 0 = all")
    p.add_argument("--data-dir", help="folder of the local tasks' data (default: ../shared/data beside the repo)")
    p.add_argument("--hf-datasets-dir", help="folder of save_to_disk copies of the paper's datasets, made by "
                                             "tools/fetch_eval_datasets.py --save-to (default: Hugging Face "
                                             "datasets, online or from its cache with HF_HUB_OFFLINE=1)")
    p.add_argument("--num-workers", type=int, default=1, help="processes running fine-tuning runs in parallel")
    p.add_argument("--devices", help="comma-separated devices given to workers in turn "
                                     "(default: every CUDA device, else cpu)")
    p.add_argument("--export-arch", default=None, choices=["eurobert", "gemma3_encoder", "llama"],
                   help="Hugging Face architecture for exporting megamlm checkpoints given as --model (default: the "
                        "model's encoder export: EuroBERT, or a bidirectional Gemma 3 for a model continued from "
                        "Gemma 3)")
    p.add_argument("--tables", type=Path, help="folder for the tables and figures of this command's models (default: "
                                            "--output); a study's SLURM job per run writes its own here, so jobs "
                                            "sharing --output do not rewrite each other's results.md")
    p.add_argument("--random-init-baseline", nargs="?", const=DEFAULT_NAME, metavar="NAME",
                   help=f"also evaluate a model of the given models' shape and tokenizer with freshly initialised "
                        f"weights (seed {RANDOM_INIT_SEED}), as model NAME (default name: {DEFAULT_NAME}) through the "
                        "same fine-tuning protocol, and compute each task's trivial baselines without training "
                        "(rows baseline:NAME; stored in OUTPUT/baselines)")
    p.add_argument("--random-init-seeds", type=_ints, metavar="SEEDS",
                   help="fine-tuning seeds of the random-init model (default: --seeds): several give its score a "
                        "spread where the models have one fine-tuning seed each")
    p.add_argument("--no-plots", action="store_true", help="write tables only")
    p.add_argument("--paired", action="append", default=[], metavar="A:B",
                   help="compare models A and B on the same test examples in results.md (repeatable): each at its "
                        "best LR, per fine-tuning seed, McNemar's exact test for accuracy and a paired permutation "
                        "test for other scores, from the per-example predictions every run keeps beside its result")
    add_probe_flags(p)
    p.add_argument("--force", action="store_true",
                   help="write into an --output folder that holds files of something else (an earlier evaluation's "
                        "folder is resumed without it)")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        argv = command_line("evaluate", argv)
    except UserError as error:
        return exit_line(error)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.probe and args.paired:
            raise PlanError("--paired compares fine-tuned runs' per-example predictions, which the linear probe does "
                            "not keep; drop --paired or --probe")
        if args.mteb:
            return mteb_command(args)
        if not args.tasks:
            raise PlanError("no task given; pass --tasks (fine-tuning or --probe) or --mteb TASKS")
        if args.probe:
            return probe_command(args, parser)
        given = given_flags(args, parser, PROBE_ONLY_FLAGS)
        if given:
            raise PlanError(f"{given[0]} sets the linear probe; add --probe linear, or drop {given[0]} to fine-tune")
    except (UserError, OSError) as error:
        return exit_line(error)
    if args.devices:
        devices = tuple(d.strip() for d in args.devices.split(",") if d.strip())
    else:
        devices = tuple(f"cuda:{i}" for i in range(torch.cuda.device_count())) or ("cpu",)
    try:
        if args.random_init_seeds and args.random_init_baseline is None:
            raise PlanError("--random-init-seeds sets the random-init model's fine-tuning seeds; add "
                            "--random-init-baseline, or drop --random-init-seeds")
        if args.random_init_baseline is not None:  # the trivial baselines' lexical ranking and counts
            require("sklearn", "--random-init-baseline (the trivial baselines)")
        check_output_folder(args.output, args.force)
        specs = parse_model_specs(args.model)
        name = args.random_init_baseline
        if name is not None and (name in {n for n, _ in specs} or not MODEL_NAME.match(name) or set(name) == {"."}):
            # before resolve_models, which exports run folders and checkpoints
            raise PlanError(f"--random-init-baseline {name!r}: give a name that no --model has, of letters, "
                            "digits and ._+-")
        models = [entry for name, path in specs
                  for entry in resolve_models(name, path, args.output / "hf_exports", args.export_arch,
                                              args.checkpoints)]
        if args.random_init_baseline is not None:
            name = args.random_init_baseline
            if name in {m.name for m in models}:  # a run folder's checkpoints are named NAME-stepN
                raise PlanError(f"--random-init-baseline {name!r}: give a name that no --model has, of letters, "
                                "digits and ._+-")
            models.append(random_init_model(models, name, args.output / "hf_exports"))
        pairs = [tuple(pair.split(":")) for pair in args.paired]
        names = {m.name for m in models}
        for pair, given in zip(pairs, args.paired):
            unknown = [n for n in pair if n not in names]
            if len(pair) != 2 or unknown or pair[0] == pair[1]:
                raise PlanError(f"--paired {given!r}: give two different evaluated models as A:B (models: "
                                f"{', '.join(sorted(names))})")
        plan = EvalPlan(
            models=models, tasks=[t.strip() for t in args.tasks.split(",") if t.strip()], output=args.output,
            lrs=args.lrs, seeds=args.seeds,
            hyperparameters=Hyperparameters(
                batch_size=args.batch_size, micro_batch_size=args.micro_batch_size, max_steps=args.max_steps,
                epochs=args.epochs, warmup_ratio=args.warmup_ratio, beta1=args.beta1, beta2=args.beta2, eps=args.eps,
                weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm, precision=args.precision),
            settings=TaskSettings(
                max_length=args.max_length, max_query_length=args.max_query_length, doc_stride=args.doc_stride,
                max_answer_length=args.max_answer_length, no_answer_threshold=args.no_answer_threshold,
                temperature=args.temperature, classifier_pooling=args.classifier_pooling,
                eval_batch_size=args.eval_batch_size),
            max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples,
            data_dir=args.data_dir, hf_datasets_dir=args.hf_datasets_dir, retrieval_corpus=args.retrieval_corpus,
            num_workers=args.num_workers,
            devices=devices, baselines=args.random_init_baseline is not None,
            model_seeds={args.random_init_baseline: args.random_init_seeds} if args.random_init_seeds else {},
            pairs=pairs)
        if not plan.tasks:
            raise PlanError("no task given; pass --tasks, e.g. --tasks rt-sentiment,brown-pos")
        outcome = evaluate(plan, plots=not args.no_plots, tables=args.tables)
    except (UserError, OSError) as error:
        return exit_line(error)
    if outcome["failed"]:
        print(f"error: {len(outcome['failed'])} runs failed (tracebacks in the .error.txt files under "
              f"{args.output / 'runs'}); rerun the same command to retry only those", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

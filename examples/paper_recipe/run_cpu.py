"""The paper's comparison at CPU scale, from one command:

    python examples/paper_recipe/run_cpu.py --workdir /tmp/paper_recipe

1. pretrain the `tiny` preset with MLM, CLM and CLM-then-MLM (switch 0.25) on the bundled Austen corpus,
   with one seed, so all three see the identical sample sequence (pretrain.py);
2. with --cpt: continue SmolLM2-135M (../shared/models) with MLM (examples/cpt_smollm2.py's steps) and
   evaluate it too (135M parameters: slow on a CPU, so opt-in);
3. export every checkpoint as a EuroBERT folder (megamlm.hf; CLM models too: fine-tuning is bidirectional);
4. fine-tune and score all of them on the local tasks with a reduced grid (megamlm.eval, as tools/evaluate.py);
5. write RESULTS.md with the table, the two figures and the measured times beside this script.

Every stage skips what an earlier launch finished, so the same command resumes after an interruption.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from megamlm.env_args import command_line  # noqa: E402

OBJECTIVES = {"mlm": ["--objective", "mlm"], "clm": ["--objective", "clm"],
              "clm_then_mlm": ["--objective", "clm_then_mlm", "--switch", "0.25"]}
LOCAL_TASKS = "rt-sentiment,brown-genre,brown-pos,austen-qa,austen-retrieval"


def _floats(text):
    return tuple(float(x) for x in text.split(","))


def _ints(text):
    return tuple(int(x) for x in text.split(","))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workdir", required=True, type=Path, help="checkpoints, exports and run results")
    p.add_argument("--results", type=Path, default=HERE, help="folder for RESULTS.md and its figures")
    p.add_argument("--device", default="cpu", help="device for pretraining and fine-tuning")
    p.add_argument("--train-iters", type=int, default=40, help="pretraining steps of each tiny model")
    p.add_argument("--seed", type=int, default=1234, help="pretraining seed (weights, sample order, masks)")
    p.add_argument("--tasks", default="rt-sentiment,brown-pos,austen-qa",
                   help=f"local tasks to fine-tune on (all: {LOCAL_TASKS})")
    p.add_argument("--lrs", type=_floats, default=(1e-4, 5e-4), help="reduced LR grid (the paper's top end)")
    p.add_argument("--seeds", type=_ints, default=(0, 1))
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=128,
                   help="SmolLM2 import: positions kept (fine-tuning inputs: 99%% of the model's positions, the protocol)")
    p.add_argument("--max-train-examples", type=int, default=128)
    p.add_argument("--max-eval-examples", type=int, default=50)
    p.add_argument("--cpt", action="store_true", help="add the SmolLM2 continued-pretraining model (slow on CPU)")
    p.add_argument("--cpt-steps", type=int, default=20, help="MLM steps of SmolLM2 continued pretraining")
    p.add_argument("--cpt-tasks", default="rt-sentiment,brown-pos", help="tasks for the 135M model (CPU-heavy)")
    p.add_argument("--cpt-lrs", type=_floats, default=(5e-5,))
    p.add_argument("--cpt-max-steps", type=int, default=20)
    p.add_argument("--cpt-batch-size", type=int, default=8)
    return p.parse_args(command_line("run_cpu", argv))


def pretrain(name: str, args, log_dir: Path) -> dict:
    save = args.workdir / "pretrain" / name
    pointer = save / "latest_checkpointed_iteration.txt"
    log_path = log_dir / f"pretrain_{name}.log"
    ran = False
    if pointer.exists() and pointer.read_text().strip() == str(args.train_iters) and log_path.exists():
        print(f"pretrain {name}: finished before", flush=True)
    else:
        ran = True
        command = [sys.executable, str(REPO / "pretrain.py"), "--model", "tiny", *OBJECTIVES[name],
                   "--train-iters", str(args.train_iters), "--seed", str(args.seed), "--save", str(save),
                   "--device", args.device, "--log-interval", "10"]
        print("$", " ".join(command), flush=True)
        partial = log_path.with_suffix(".partial")
        with open(partial, "w") as log:  # streamed: progress shows while it runs, the log stays
            process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for line in process.stdout:
                sys.stdout.write(line)
                log.write(line)
            returncode = process.wait()
        if returncode != 0:
            raise SystemExit(f"pretrain.py ({name}) failed with exit code {returncode}; its log is {partial}")
        partial.replace(log_path)
    text = log_path.read_text()
    losses = [(int(s), o, float(l)) for s, o, l in re.findall(r"step (\d+)/\d+ \| objective (\w+) \| loss ([0-9.]+)", text)]
    return {"save": str(save), "losses": losses, "ran": ran}


def continued_pretraining(args, log_dir: Path) -> Path:
    """SmolLM2-135M -> megamlm checkpoint -> MLM steps on Austen, with examples/cpt_smollm2.py's helpers."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cpt_smollm2", REPO / "examples" / "cpt_smollm2.py")
    cpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cpt)
    from megamlm.hf import import_hf

    work = args.workdir / "cpt_smollm2"
    save = work / "cpt"
    if (save / "latest_checkpointed_iteration.txt").exists():
        print("continued pretraining: finished before", flush=True)
        return save
    if not next(cpt.MODEL_DIR.glob("*.gguf"), None):
        raise SystemExit(f"no SmolLM2 GGUF in {cpt.MODEL_DIR} (see ../shared/ASSETS.md); leave out --cpt")
    ckpt = import_hf(cpt.MODEL_DIR, work / "imported", force=True, max_seq_length=args.max_length)
    cpt.tokenize_corpus(ckpt, work / "data" / "austen_smollm2", 300)
    outcome = cpt.continued_pretraining(ckpt, work / "data" / "austen_smollm2", save, args.cpt_steps, 64)
    (log_dir / "cpt_smollm2.json").write_text(json.dumps(outcome["losses"]))
    return save


def evaluation_plan(models, tasks, lrs, max_steps, batch_size, args):
    from megamlm.eval.finetune import Hyperparameters
    from megamlm.eval.runner import EvalPlan
    from megamlm.eval.tasks import TaskSettings

    # The protocol's defaults (megamlm/eval/README.md) except the sizes reduced for a CPU: LR grid, seeds,
    # steps, batch size, examples; QA windows short enough for a 128-position model.
    return EvalPlan(models=models, tasks=tasks.split(","), output=args.workdir / "eval", lrs=lrs, seeds=args.seeds,
                    hyperparameters=Hyperparameters(batch_size=batch_size, max_steps=max_steps),
                    settings=TaskSettings(doc_stride=32, max_query_length=32),
                    max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples,
                    devices=(args.device,))


def write_results(args, pretraining: dict, plans, timings: dict, argv=None) -> Path:
    from megamlm.eval.aggregate import collect, per_lr, summarize
    from megamlm.eval.report import markdown_table, write_report

    keys = [k for plan in plans for k in plan.keys()]
    results = collect(args.workdir / "eval", keys)
    summaries = summarize(results, keys)
    write_report(args.workdir / "eval", summaries, per_lr(results))
    args.results.mkdir(parents=True, exist_ok=True)
    for figure in ("score_per_model.png", "score_vs_lr.png"):
        shutil.copyfile(args.workdir / "eval" / figure, args.results / figure)
    loss_lines = []
    for name, record in pretraining.items():
        by_objective: dict[str, list] = {}
        for step, objective, loss in record["losses"]:
            by_objective.setdefault(objective, []).append((step, loss))
        parts = [f"{o} loss {v[0][1]:.2f} (step {v[0][0]}) -> {v[-1][1]:.2f} (step {v[-1][0]})" for o, v in by_objective.items()]
        loss_lines.append(f"| {name} | " + "; ".join(parts) + " |")
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    text = f"""# Paper recipe at CPU scale: results

Written by `python examples/paper_recipe/run_cpu.py {" ".join(sys.argv[1:]) if argv is None else " ".join(argv)}`
(this file is regenerated by each run).

## What ran

- Pretraining: `tiny` preset (1.8M parameters without the LM head), {args.train_iters} steps each, seed {args.seed},
  bundled Austen corpus; MLM, CLM and CLM-then-MLM (switch 0.25) see the identical sample sequence.
- Continued pretraining: {"left out (no --cpt)" if not args.cpt else f"SmolLM2-135M-Instruct + {args.cpt_steps} MLM steps (model `smollm2_cpt_mlm`)"}.
- Export: every checkpoint as a EuroBERT folder; all models are fine-tuned with bidirectional attention.
- Fine-tuning (the EncodEval protocol of megamlm/eval/README.md, reduced in size): LRs {list(args.lrs)} x seeds
  {list(args.seeds)}, {args.max_steps} steps of batch {args.batch_size} (micro-batches of 4), transformers' linear
  schedule with 10% warmup, AdamW (0.9, 0.95, eps 1e-5, wd 0.1); at most {args.max_train_examples} train and
  {args.max_eval_examples} validation/test examples per task (fixed subsets); inputs up to 99% of each model's
  positions; EuroBERT's classification head (late pooling). Best LR on validation; test mean ± 95% t-interval over seeds.
  {"" if not args.cpt else f"SmolLM2 (135M parameters, CPU-heavy): tasks {args.cpt_tasks}, LRs {list(args.cpt_lrs)}, {args.cpt_max_steps} steps of batch {args.cpt_batch_size}."}

Pretraining losses (first and last logged step per objective):

| model | loss |
|---|---|
{chr(10).join(loss_lines)}

## Fine-tuning results

{markdown_table(summaries)}
![test score per model](score_per_model.png)

![test score against learning rate](score_vs_lr.png)

## Time

Measured on this run's machine ({os.cpu_count()} CPU cores, {platform.processor() or platform.machine()},
load average {", ".join(f"{x:.1f}" if isinstance(x, float) else str(x) for x in load)} at the end; device {args.device}):

| stage | seconds |
|---|---|
{chr(10).join(f"| {k} | {v:.0f} |" for k, v in timings.items())}

At this scale the tasks mostly measure how far a model gets above the majority class in a few dozen
fine-tuning steps; differences between objectives are within the confidence intervals and say nothing
about the paper's question. The point of this run is that the whole pipeline runs, end to end, from one
command; `slurm/` holds the same recipe at the paper's size.
"""
    path = args.results / "RESULTS.md"
    path.write_text(text)
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    from megamlm.eval.model_source import resolve_model
    from megamlm.eval.runner import evaluate

    args.workdir.mkdir(parents=True, exist_ok=True)
    log_dir = args.workdir / "logs"
    log_dir.mkdir(exist_ok=True)
    # Stage times persist across launches: a stage that an earlier launch finished keeps its measured time.
    timings_path = args.workdir / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    mark = [time.perf_counter()]

    def lap(name, did_work=True):
        now = time.perf_counter()
        if did_work or name not in timings:
            timings[name] = now - mark[0]
        mark[0] = now
        timings_path.write_text(json.dumps(timings, indent=1))
        print(f"--- {name}: {timings[name]:.0f} s", flush=True)

    pretraining = {}
    for name in OBJECTIVES:
        pretraining[name] = pretrain(name, args, log_dir)
        lap(f"pretrain {name}", pretraining[name]["ran"])
    exports = args.workdir / "hf"
    fresh = [name for name in OBJECTIVES if not (exports / name / "config.json").is_file()]
    models = [resolve_model(name, Path(pretraining[name]["save"]), exports) for name in OBJECTIVES]
    lap("export tiny models", bool(fresh))
    plans = [evaluation_plan(models, args.tasks, args.lrs, args.max_steps, args.batch_size, args)]
    outcome = evaluate(plans[0])
    lap("fine-tune tiny models", bool(outcome["finished"]))
    if args.cpt:
        ran = not (args.workdir / "cpt_smollm2" / "cpt" / "latest_checkpointed_iteration.txt").exists()
        cpt_save = continued_pretraining(args, log_dir)
        lap("SmolLM2 import + continued pretraining", ran)
        smollm = [resolve_model("smollm2_cpt_mlm", cpt_save, exports)]
        plans.append(evaluation_plan(smollm, args.cpt_tasks, args.cpt_lrs, args.cpt_max_steps, args.cpt_batch_size, args))
        outcome = evaluate(plans[1])
        lap("fine-tune SmolLM2", bool(outcome["finished"]))
    timings.pop("total", None)
    timings["total"] = sum(timings.values())
    print("wrote", write_results(args, pretraining, plans, timings, argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())

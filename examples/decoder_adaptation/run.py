"""A decoder adapted into an encoder on a CPU, scored by a frozen linear probe (issue 34, item 5; rerun under issue
45's rules: several adaptation seeds, whole test sets, paired tests).

    python examples/decoder_adaptation/run.py --model SmolLM2-135M-Instruct.Q4_1.gguf --workdir /tmp/adapt \
        --report examples/decoder_adaptation/REPORT.md

Stages, each timed (wall and CPU seconds): import the decoder (--model; REPORT.md's: SmolLM2-135M-Instruct, Q4_1
GGUF, dequantized to float32 on load) as a megamlm checkpoint; tokenize the Brown corpus's train files (adaptation data)
and validation files (held-out loss); for each adaptation seed (--seeds), train bidirectional + MNTP and
bidirectional + MLM with pretrain.py --init-from, the same flags but --objective (so the same samples in the same
order, the same masks, steps and tokens); probe the decoder causal (as is), bidirectional (untrained), every MNTP
and MLM model and a random-init model of the same shape, all bidirectional but the first, each keeping its
per-example predictions on the same test examples (the whole test split by default); merge the better of MNTP and
MLM (mean probe validation score over the tasks and seeds; its first seed's model) linearly with its source
(tools/merge_checkpoints.py, --merge-weight for the adapted model, the rest for the source) and probe it; score
held-out MLM, MNTP and CLM loss of every model; write the report (settings, tables, the tasks informative on
validation, paired tests of MNTP against MLM per seed, timings, command). The sizes are flags;
examples/decoder_adaptation/REPORT.md says what its run took.
Everything is written under temporary names first; bad input is refused in one line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()

from megamlm.errors import UserError, exit_line  # noqa: E402

DEFAULT_DATA = REPO / ".." / "shared" / "data"
DEFAULT_REPORT = REPO / "examples" / "decoder_adaptation" / "REPORT.md"
TASKS = "austen-novel,rt-sentiment"


class AdaptError(UserError, ValueError):
    """Bad input of this example; one line names the fix."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", type=Path, required=True,
                   help="decoder: a .gguf file or a Hugging Face folder (REPORT.md's: SmolLM2-135M-Instruct, Q4_1)")
    p.add_argument("--workdir", type=Path, required=True, help="new or empty folder for checkpoints, data and probes")
    p.add_argument("--report", type=Path, default=DEFAULT_REPORT, help="the markdown report to write")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder holding brown/ and sentiment/")
    p.add_argument("--steps", type=int, default=30, help="training steps of each of MNTP and MLM")
    p.add_argument("--seq-length", type=int, default=128, help="tokens per training sample and held-out window")
    p.add_argument("--batch-size", type=int, default=4, help="samples per step")
    p.add_argument("--lr", type=float, default=1e-4, help="peak LR (10%% warmup, WSD decay over the last 20%%)")
    p.add_argument("--tasks", default=TASKS, help="probe tasks (tools/evaluate.py's sequence/token classification)")
    p.add_argument("--probe-train", type=int, default=128, help="probe train examples per task")
    p.add_argument("--probe-eval", type=int, default=256, help="probe validation examples per task")
    p.add_argument("--probe-test", type=int, default=0,
                   help="probe test examples per task; 0: the whole test split (what the paired tests need)")
    p.add_argument("--probe-max-length", type=int, default=48, help="tokens per probe input")
    p.add_argument("--heldout-windows", type=int, default=16, help="held-out windows of --seq-length for the losses")
    p.add_argument("--merge-weight", type=float, default=0.5, help="weight of the adapted model in the merge")
    p.add_argument("--seeds", default="1,2,3",
                   help="adaptation seeds (sample order, masks): MNTP and MLM are trained once per seed")
    p.add_argument("--force", action="store_true", help="replace a non-empty --workdir and an existing --report")
    return p


def check_args(args) -> None:
    """Every refusal, before any work."""
    from megamlm.eval.registry import check_task_spec
    from megamlm.extras import require

    if not (args.model.is_file() and args.model.suffix == ".gguf") and not (args.model / "config.json").is_file():
        raise AdaptError(f"--model {args.model}: not a .gguf file or a Hugging Face folder; pass one")
    for name in ("brown/brown.jsonl", "brown/brown_pos.jsonl", "sentiment/rt_snippets.jsonl"):
        if not (args.data_dir / name).is_file():
            raise AdaptError(f"--data-dir {args.data_dir} has no {name}; pass the shared data folder")
    sizes = {"--steps": (args.steps, 2), "--probe-test": (args.probe_test or 4, 4),
             "--seq-length": (args.seq_length, 16), "--batch-size": (args.batch_size, 1),
             "--probe-train": (args.probe_train, 8), "--probe-eval": (args.probe_eval, 4),
             "--probe-max-length": (args.probe_max_length, 8), "--heldout-windows": (args.heldout_windows, 1)}
    for flag, (value, least) in sizes.items():
        if value < least:
            raise AdaptError(f"{flag} {value} is too small; give at least {least}")
    if not 0 < args.merge_weight < 1 or args.lr <= 0:
        raise AdaptError(f"--merge-weight must lie in (0, 1) and --lr be positive (got {args.merge_weight}, {args.lr})")
    for spec in args.tasks.split(","):
        check_task_spec(spec.strip())
    if len(args.seeds) != len(set(args.seeds)) or not args.seeds:
        raise AdaptError(f"--seeds {','.join(map(str, args.seeds))}: give distinct seeds, e.g. 1,2,3")
    if args.workdir.exists() and (not args.workdir.is_dir() or any(args.workdir.iterdir())) and not args.force:
        raise AdaptError(f"--workdir {args.workdir} exists and is not an empty folder; choose a new one or pass "
                         "--force")
    if args.report.exists() and not args.force:
        raise AdaptError(f"--report {args.report} exists; pass --force to replace it or choose another path")
    require("sklearn", "the linear probe")


class Stages:
    """Wall and CPU seconds (this process and its children) of each named stage."""

    def __init__(self):
        self.rows: list[tuple[str, float, float]] = []

    @staticmethod
    def _cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def run(self, name: str, work, *args):
        wall, cpu = time.perf_counter(), self._cpu()
        print(f"=== {name}", flush=True)
        out = work(*args)
        self.rows.append((name, time.perf_counter() - wall, self._cpu() - cpu))
        print(f"=== {name}: {self.rows[-1][1]:.1f} s wall, {self.rows[-1][2]:.1f} s CPU", flush=True)
        return out


def import_decoder(model: Path, target: Path) -> Path:
    from cpt_hf_decoder import load_transformers_model

    from megamlm.hf import import_hf
    from megamlm.hf.hf_source import open_source

    if open_source(model).gguf_file:  # dequantize once; the import reuses what transformers loaded
        return import_hf(model, target, hf_state=load_transformers_model(model).state_dict())
    return import_hf(model, target)


def brown_documents(data_dir: Path, split: str) -> list[str]:
    with open(data_dir / "brown" / "brown.jsonl", encoding="utf-8") as f:
        return [row["text"] for row in map(json.loads, filter(str.strip, f)) if row["split"] == split]


def tokenize(ckpt: Path, data_dir: Path, work: Path, args) -> dict:
    """Brown train files -> the training corpus (Megatron .bin/.idx); validation files -> held-out windows."""
    import numpy as np

    from megamlm.data import IndexedDatasetWriter, best_dtype, load_tokenizer
    from megamlm.eval.heldout import token_windows

    tokenizer = load_tokenizer(ckpt / "tokenizer")
    tokens = 0
    with IndexedDatasetWriter(work / "data" / "brown_train", best_dtype(tokenizer.vocab_size)) as writer:
        for ids in tokenizer.encode_batch(brown_documents(data_dir, "train")):
            writer.add_document(ids + [tokenizer.eos_id])
            tokens += len(ids) + 1
    windows = token_windows(tokenizer.encode_batch(brown_documents(data_dir, "validation")), tokenizer.eos_id,
                            args.seq_length, args.heldout_windows)
    np.save(work / "data" / "heldout.npy", windows)
    return {"train_tokens": tokens, "heldout_tokens": int(windows.size)}


def train(ckpt: Path, work: Path, objective: str, seed: int, args) -> list[str]:
    from adaptation_report import adapted

    from megamlm.hf.importer import pretrain_flags
    from megamlm.hf.megamlm_checkpoint import read_record

    command = [sys.executable, str(REPO / "pretrain.py"), *pretrain_flags(read_record(ckpt).model_args, ckpt),
               "--data-path", str(work / "data" / "brown_train"), "--seq-length", str(args.seq_length),
               "--objective", objective, "--train-iters", str(args.steps), "--micro-batch-size", str(args.batch_size),
               "--global-batch-size", str(args.batch_size), "--lr", str(args.lr),
               "--lr-warmup-iters", str(max(args.steps // 10, 1)), "--lr-wsd-decay-iters", str(max(args.steps // 5, 1)),
               "--weight-decay", "0.0", "--seed", str(seed), "--device", "cpu", "--log-interval", "5",
               "--save", str(work / adapted(objective, seed))]
    log = work / f"train_{adapted(objective, seed)}.log"
    with open(log, "w", encoding="utf-8") as f:
        status = subprocess.run(command, cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode
    if status != 0:
        raise SystemExit(f"pretrain.py --objective {objective} --seed {seed} failed (exit {status}); see {log}")
    return command


def probe_tasks(args) -> dict:
    """Each task cut to --probe-train train and --probe-eval validation examples, and --probe-test test examples
    (0: all of them), the same fixed subsets for every row."""
    import dataclasses

    from megamlm.eval.registry import load_task
    from megamlm.eval.runner import limit_examples

    tasks = {}
    for spec in args.tasks.split(","):
        full = load_task(spec, args.data_dir)
        cut = limit_examples(full, args.probe_train, args.probe_eval)
        test = limit_examples(full, args.probe_train, args.probe_test).splits["test"] if args.probe_test else \
            full.splits["test"]
        tasks[spec] = dataclasses.replace(cut, splits={**cut.splits, "test": test})
    return tasks


def probe(rows, args, work: Path) -> list[dict]:
    from megamlm.eval.probe import ProbePlan, ProbeSettings, run_probe

    plan = ProbePlan(rows, probe_tasks(args), work / "probe", ProbeSettings(max_length=args.probe_max_length))
    return run_probe(plan)


def lexical_baselines(args) -> dict[str, list[dict]]:
    """Each probed task's trivial and lexical baselines (eval/baselines.py) on the probe's own examples: learned on
    its train examples, chosen on its validation examples, scored on its test examples."""
    from dataclasses import asdict

    from megamlm.eval.baselines import trivial_baselines

    return {spec: [{**asdict(b), "validation": b.validation["score"], "test": b.test["score"]}
                   for b in trivial_baselines(data) if b.name != "majority"]
            for spec, data in probe_tasks(args).items()}


def merge(better: Path, source: Path, target: Path, weight: float) -> list[str]:
    command = [sys.executable, str(REPO / "tools" / "merge_checkpoints.py"), "--input", str(better), str(source),
               "--weights", f"{weight:g},{1 - weight:g}", "--output", str(target)]
    subprocess.run(command, cwd=REPO, check=True)
    return command


def losses(models: dict[str, Path], ckpt: Path, work: Path, args) -> dict[str, dict[str, float]]:
    import numpy as np

    from megamlm.config import Config
    from megamlm.data import load_tokenizer
    from megamlm.eval.frozen import random_init
    from megamlm.eval.heldout import heldout_losses
    from megamlm.hf.megamlm_checkpoint import load_model, read_record
    from megamlm.training.resolved_run import masking_spec_for

    windows = np.load(work / "data" / "heldout.npy")
    masking = masking_spec_for(Config(), load_tokenizer(ckpt / "tokenizer"))
    out = {}
    for name, path in models.items():
        model = random_init(read_record(ckpt).model_args) if path is None else load_model(read_record(path))
        out[name] = heldout_losses(model, windows, masking, args.seeds[0])
        print(f"held-out loss of {name}: {out[name]}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.tasks = ",".join(t.strip() for t in args.tasks.split(",") if t.strip())
    try:
        try:
            args.seeds = [int(seed) for seed in args.seeds.split(",") if seed.strip()]
        except ValueError:
            raise AdaptError(f"--seeds {args.seeds!r} is not a list of integers; give e.g. 1,2,3") from None
        check_args(args)
    except (UserError, OSError) as error:
        return exit_line(error)
    from adaptation_report import adapted, write_report

    from megamlm.eval.frozen import ProbeModel

    work = args.workdir
    if work.exists() and args.force:
        import shutil

        shutil.rmtree(work)
    (work / "data").mkdir(parents=True)
    stages, facts = Stages(), {"argv": sys.argv[1:] if argv is None else argv, "load_at_start": os.getloadavg()[0]}
    ckpt = stages.run("import", import_decoder, args.model, work / "decoder")
    facts["data"] = stages.run("tokenize", tokenize, ckpt, args.data_dir, work, args)
    for seed in args.seeds:  # one seed's pair after the other: a stop leaves whole pairs
        for objective in ("mntp", "mlm"):
            command = stages.run(f"train {adapted(objective, seed)}", train, ckpt, work, objective, seed, args)
            facts.setdefault("train_command", command)
    rows = [ProbeModel("decoder", ckpt, "causal"), ProbeModel("decoder", ckpt, "bidirectional"),
            ProbeModel("random-init", ckpt, "bidirectional", True),
            *[ProbeModel(adapted(o, seed), work / adapted(o, seed)) for seed in args.seeds for o in ("mntp", "mlm")]]
    results = stages.run(f"probe ({len(rows)} rows)", probe, rows, args, work)
    facts["baselines"] = stages.run("lexical baselines", lexical_baselines, args)
    tasks = len(args.tasks.split(","))
    mean_val = {o: sum(r["validation"] for r in results if r["model"] in {adapted(o, s) for s in args.seeds})
                / (tasks * len(args.seeds)) for o in ("mntp", "mlm")}
    better = "mntp" if mean_val["mntp"] >= mean_val["mlm"] else "mlm"
    source, merged = adapted(better, args.seeds[0]), f"{adapted(better, args.seeds[0])}+decoder"
    facts.update(better=better, merged_from=source, mean_validation=mean_val,
                 merge_command=stages.run("merge", merge, work / source, ckpt, work / "merged", args.merge_weight))
    results = stages.run("probe (merged)", probe, [*rows, ProbeModel(merged, work / "merged")], args, work)
    scored = {"decoder": ckpt, "random-init": None, **{row.name: row.path for row in rows[3:]},
              merged: work / "merged"}
    facts["losses"] = stages.run("held-out loss", losses, scored, ckpt, work, args)
    facts["load_at_end"] = os.getloadavg()[0]
    path = write_report(args, results, facts, stages.rows, merged, work / "probe")
    print(f"wrote {path}; total {sum(r[1] for r in stages.rows):.0f} s wall", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The miniature's pilot (issue 32), one command: for each candidate setting, train the smaller BPE it names on the
bundled Austen corpus, print the unigram entropy of the validation tokens, pretrain the MLM-only and CLM-then-MLM
arms for a short budget, print their validation MLM loss curves against that entropy (target: the MLM-only arm ends
at least 0.5 nats under it), then fine-tune each arm and a random-init model of the same shape and tokenizer on one
task per family and print whether each task is informative.

    python tools/pilot_miniature.py --output runs/pilot --candidate vocab=2048,lr=3e-3 --candidate vocab=8192
    python tools/pilot_miniature.py --output runs/pilot --candidate vocab=2048 --no-finetune   # losses only

A candidate is KEY=VALUE pairs over the committed miniature's settings (megamlm/study/planning/pilot.py: vocab, layers,
hidden, ffn, heads, groups, seq, batch, lr, mask, steps, clm). Everything goes under --output: tokenizers/,
runs/<candidate>/<arm>/ (pretrain.py --save folders), evals/<candidate>/ (tools/evaluate.py output) and pilot.md,
the figures printed at the end. A second launch reuses finished runs and evaluations. Losses and scores do not
depend on the machine's load; only the time does.
"""

from __future__ import annotations

import argparse
import csv
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from megamlm.errors import UserError, exit_line  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TASKS = "austen-novel,brown-pos,austen-qa-speakers,austen-retrieval-small"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--output", required=True, help="folder for everything the pilot writes")
    parser.add_argument("--candidate", action="append", default=[],
                        help="KEY=VALUE,... (repeatable; default: the committed miniature's settings)")
    parser.add_argument("--arms", default="mlm,clm_then_mlm", help="pretrained arms (mlm, clm_then_mlm)")
    parser.add_argument("--seed", type=int, default=1, help="pretraining seed (default: 1)")
    parser.add_argument("--eval-points", type=int, default=10, help="validations per arm (default: 10)")
    parser.add_argument("--eval-iters", type=int, default=4, help="validation batches each time (default: 4)")
    parser.add_argument("--no-finetune", action="store_true", help="pretraining and losses only")
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help=f"fine-tuning tasks (default: {DEFAULT_TASKS})")
    parser.add_argument("--finetune-steps", type=int, default=100, help="fine-tuning steps (default: 100)")
    parser.add_argument("--finetune-lrs", default="1e-3,3e-3", help="fine-tuning LR grid (default: 1e-3,3e-3)")
    parser.add_argument("--finetune-seeds", default="0", help="fine-tuning seeds (default: 0)")
    parser.add_argument("--max-train-examples", type=int, default=2000, help="(default: 2000)")
    parser.add_argument("--max-eval-examples", type=int, default=200, help="(default: 200)")
    parser.add_argument("--margin", type=float, default=5.0,
                        help="points the best arm must lead the random-init model by to call a task informative "
                             "(default: 5)")
    return parser.parse_args(argv)


def run(command: list[str], log: Path) -> None:
    """One subprocess, its output to ``log``; a failure is one error naming the log."""
    with open(log, "w", encoding="utf-8") as f:
        status = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, cwd=REPO).returncode
    if status:
        raise PilotFailure(f"{Path(command[1]).name} failed (exit {status}); its output is in {log}")


class PilotFailure(UserError):
    """A step of the pilot that failed; the message names its log."""


def tokenizer_for(vocab: int, output: Path) -> Path:
    from megamlm.data.embedded import CORPUS_FILE, SHIPPED_TOKENIZERS

    if vocab in SHIPPED_TOKENIZERS:
        return SHIPPED_TOKENIZERS[vocab]
    path = output / "tokenizers" / f"tokenizer-{vocab}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        run([sys.executable, str(REPO / "tools" / "train_tokenizer.py"), "--input", str(CORPUS_FILE),
             "--output", str(path), "--vocab-size", str(vocab)], output / "tokenizers" / f"train-{vocab}.log")
    return path


def pretrain(candidate, arm: str, data: tuple[str, Path], output: Path, args) -> Path:
    from megamlm.study.planning.pilot import pretrain_flags

    save = output / "runs" / candidate.slug / arm
    steps = 1 if arm == "random" else candidate.steps
    marker = save / "latest_checkpointed_iteration.txt"
    if marker.is_file() and marker.read_text().strip() == str(steps):
        return save
    save.mkdir(parents=True, exist_ok=True)
    interval = max(1, steps // max(1, args.eval_points))
    run([sys.executable, str(REPO / "pretrain.py"), *pretrain_flags(candidate, arm, args.seed),
         "--data-path", data[0], "--tokenizer-model", str(data[1]), "--save", str(save),
         "--eval-interval", str(interval), "--eval-iters", str(args.eval_iters), "--log-interval", str(interval)],
        save.parent / f"{arm}.log")
    return save


def curve(save: Path) -> list[tuple[int, float, float]]:
    from megamlm.training.metrics_file import read_metrics

    return [(r["step"], r["mlm_loss"], r["mlm_accuracy"]) for r in read_metrics(save, "validation")]


def finetune(candidate, runs: dict[str, Path], output: Path, args) -> dict[str, dict[str, float]]:
    folder = output / "evals" / candidate.slug
    folder.mkdir(parents=True, exist_ok=True)
    models = ",".join(f"{arm}={path}" for arm, path in runs.items())
    run([sys.executable, str(REPO / "tools" / "evaluate.py"), "--model", models, "--checkpoints", "latest",
         "--tasks", args.tasks, "--output", str(folder), "--lrs", args.finetune_lrs, "--seeds", args.finetune_seeds,
         "--max-steps", str(args.finetune_steps), "--batch-size", "16", "--micro-batch-size", "16",
         "--max-train-examples", str(args.max_train_examples), "--max-eval-examples", str(args.max_eval_examples),
         "--max-query-length", str(min(64, candidate.seq // 2))],  # QA windows keep room for context
        output / "evals" / f"{candidate.slug}.log")
    scores: dict[str, dict[str, float]] = {}
    with open(folder / "results.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            scores.setdefault(row["task"], {})[row["model"]] = float(row["test_mean"])
    return scores


def pilot(candidates, args, output: Path, say) -> None:
    from megamlm.data import load_tokenizer, prepare_embedded_corpus
    from megamlm.data.unigram import split_unigram
    from megamlm.study.planning.pilot import TARGET_GAP, LossVerdict, task_verdicts

    arms = [a for a in args.arms.split(",") if a]
    for candidate in candidates:
        tokenizer_file = tokenizer_for(candidate.vocab, output)
        prefix, _ = prepare_embedded_corpus(output / "cache", tokenizer_file)
        figures = split_unigram(prefix, [969, 30, 1], load_tokenizer(str(tokenizer_file)))
        say(f"\n## {candidate.name}\n\nvocabulary {candidate.vocab}: {figures.tokens:,} validation tokens (special "
            f"tokens left out), unigram entropy {figures.entropy:.3f} nats (training unigram on them: "
            f"{figures.train_cross_entropy:.3f})\n")
        say("| arm | validation MLM loss (step: loss / accuracy) | final | under the entropy | target "
            f"(>= {TARGET_GAP}) |\n|---|---|---|---|---|")
        runs = {}
        for arm in [*arms, *([] if args.no_finetune else ["random"])]:
            runs[arm] = pretrain(candidate, arm, (prefix, tokenizer_file), output, args)
            if arm == "random":
                continue
            points = curve(runs[arm])
            verdict = LossVerdict(points[-1][1], figures.entropy)
            met = "met" if verdict.meets_target else "not met"
            say(f"| {arm} | " + ", ".join(f"{s}: {loss:.3f} / {acc:.3f}" for s, loss, acc in points)
                + f" | {verdict.final_loss:.3f} | {verdict.gap:+.3f} | {met} |")
        if args.no_finetune:
            continue
        scores = finetune(candidate, runs, output, args)
        say(f"\nFine-tuning ({args.finetune_steps} steps, LRs {args.finetune_lrs}, seeds {args.finetune_seeds}; "
            f"test mean at the best validation LR):\n\n| task | " + " | ".join(runs)
            + " | best arm - random | informative |\n|---|" + "---|" * (len(runs) + 2))
        for task, (best, lead, informative) in task_verdicts(scores, args.margin).items():
            cells = " | ".join(f"{scores[task].get(m, float('nan')):.2f}" for m in runs)
            mark = "yes" if informative else "no"
            say(f"| {task} | {cells} | {best} {lead:+.2f} | {mark} (margin {args.margin:g}) |")


def check_evaluation_flags(args) -> None:
    """The fine-tuning flags, before any tokenizer, cache or run is built: --margin a finite number of points >= 0,
    every task one tools/evaluate.py knows, the LR grid finite positive numbers, the seeds integers."""
    from megamlm.eval.registry import check_task_spec

    if not math.isfinite(args.margin) or args.margin < 0:
        raise PilotFailure(f"--margin {args.margin}: give a finite number of score points >= 0, e.g. 5")
    tasks = [task.strip() for task in args.tasks.split(",") if task.strip()]
    if not tasks:
        raise PilotFailure(f"--tasks {args.tasks!r}: name at least one task, e.g. {DEFAULT_TASKS}")
    for task in tasks:
        check_task_spec(task)
    grids = (("--finetune-lrs", args.finetune_lrs, float, "positive numbers, e.g. 1e-3,3e-3"),
             ("--finetune-seeds", args.finetune_seeds, int, "integers, e.g. 0,1"))
    for flag, text, kind, expected in grids:
        try:
            values = [kind(part) for part in text.split(",") if part.strip()]
        except ValueError:
            values = []
        if not values or (kind is float and not all(math.isfinite(v) and v > 0 for v in values)):
            raise PilotFailure(f"{flag} {text}: give comma-separated {expected}")
    if args.max_train_examples < 0 or args.max_eval_examples < 0:
        raise PilotFailure("--max-train-examples and --max-eval-examples must be >= 0")


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        from megamlm.study.planning.pilot import DEFAULTS, parse_candidate

        candidates = [parse_candidate(text) for text in args.candidate] or [DEFAULTS]
        unknown = sorted(set(a for a in args.arms.split(",") if a) - {"mlm", "clm_then_mlm"})
        if unknown:
            raise PilotFailure(f"--arms {args.arms}: unknown {', '.join(unknown)}; use mlm and/or clm_then_mlm")
        counts = {"--eval-points": args.eval_points, "--eval-iters": args.eval_iters,
                  "--finetune-steps": args.finetune_steps}
        for flag, value in counts.items():
            if value < 1:
                raise PilotFailure(f"{flag} {value}: must be at least 1")
        check_evaluation_flags(args)
        output = Path(args.output).resolve()   # its tools run from the repository root
        output.mkdir(parents=True, exist_ok=True)
        lines = []

        def say(text: str) -> None:
            print(text, flush=True)
            lines.append(text)

        pilot(candidates, args, output, say)
        tmp = output / "pilot.md.tmp"
        tmp.write_text("# Miniature pilot\n" + "\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(output / "pilot.md")
    except (UserError, OSError) as error:
        return exit_line(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())

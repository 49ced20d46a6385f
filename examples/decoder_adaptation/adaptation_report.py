"""The markdown report of examples/decoder_adaptation/run.py: settings, the probe and loss table, stage timings and
the command, written to a temporary name and renamed into place."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from megamlm.eval.metrics import holm
from megamlm.eval.paired import Paired, compare_runs
from megamlm.eval.probe import C_GRID, MAX_ITER, POOLING, informative, kept_predictions
from megamlm.eval.results import write_text_atomic

FIXED_ROWS = (("decoder", "causal", "the decoder as is (causal)"),
              ("decoder", "bidirectional", "the decoder, bidirectional, untrained"))
OBJECTIVES = {"mntp": "MNTP", "mlm": "MLM"}
LEVEL = 0.05


def adapted(objective: str, seed: int) -> str:
    """The name of the model adapted with ``objective`` from ``seed``: its folder, log and probe rows (run.py)."""
    return f"{objective}-s{seed}"


def _cells(results: list[dict], name: str, attention: str = "bidirectional") -> dict[str, dict]:
    return {r["task"]: r for r in results if r["model"] == name and r["attention"] == attention}


def _score_line(label: str, attention: str, tests: list[float], vals: list[float], loss: dict) -> str:
    shown = [f"{loss[o]:.3f}" if o in loss else "–" for o in ("mlm", "mntp", "clm")]
    return (f"| {label} | {attention} | " + " | ".join(f"{t:.2f}" for t in tests)
            + f" | {sum(tests) / len(tests):.2f} | {sum(vals) / len(vals):.2f} | " + " | ".join(shown) + " |")


def _table(args, results: list[dict], facts: dict, merged: str, tasks: list[str]) -> list[str]:
    head = ("| model | attention | " + " | ".join(f"{t} (test)" for t in tasks)
            + " | mean test | mean val | held-out MLM loss | held-out MNTP loss | held-out CLM loss |")
    lines = [head, "|---|---|" + "---|" * (len(tasks) + 5)]

    def row(name: str, attention: str, label: str) -> None:
        cells = _cells(results, name, attention)
        if len(cells) == len(tasks):
            lines.append(_score_line(f"{label} (`{name}`)", attention, [cells[t]["test"] for t in tasks],
                                     [cells[t]["validation"] for t in tasks], facts["losses"].get(name, {})))

    for name, attention, label in FIXED_ROWS:
        row(name, attention, label)
    for objective, shown in OBJECTIVES.items():
        names = [adapted(objective, seed) for seed in args.seeds]
        for seed, name in zip(args.seeds, names):
            row(name, "bidirectional", f"bidirectional + {shown}, seed {seed}")
        per_task = [[_cells(results, n)[t] for n in names] for t in tasks]
        losses = [facts["losses"].get(n, {}) for n in names]
        mean_loss = {o: sum(x[o] for x in losses) / len(losses) for o in ("mlm", "mntp", "clm")
                     if all(o in x for x in losses)}
        lines.append(_score_line(f"**{shown}, mean of {len(names)} seeds**", "bidirectional",
                                 [sum(c["test"] for c in cells) / len(cells) for cells in per_task],
                                 [sum(c["validation"] for c in cells) / len(cells) for cells in per_task], mean_loss))
    row(merged, "bidirectional", f"{facts['merged_from']} merged with its source")
    row("random-init", "bidirectional", "random init of the same shape (baseline)")
    majority = {r["task"]: r["majority"]["test"] for r in results}
    lines.append("| majority class | – | " + " | ".join(f"{majority[t]:.2f}" for t in tasks) + " | – | – | – | – | – |")
    names = list(dict.fromkeys(b["name"] for rows in facts["baselines"].values() for b in rows))
    for name in names:
        found = {t: next((b for b in facts["baselines"].get(t, []) if b["name"] == name), None) for t in tasks}
        cells = [f"{found[t]['test']:.2f}" if found[t] else "–" for t in tasks]
        vals = [found[t]["validation"] for t in tasks if found[t]]
        lines.append(f"| lexical baseline `{name}` (no model) | – | " + " | ".join(cells) + " | – | "
                     + (f"{sum(vals) / len(vals):.2f}" if len(vals) == len(tasks) else "–") + " | – | – | – |")
    return lines


def best_lexical(facts: dict) -> dict[str, float]:
    """Task -> the best lexical baseline's validation score (the informative rule's floor beside random init)."""
    return {task: max(b["validation"] for b in rows) for task, rows in facts["baselines"].items() if rows}


def lexical_lines(facts: dict) -> list[str]:
    """What each lexical baseline is, as chosen on validation on the probe's examples."""
    return [f"- `{b['name']}` on {task}: validation {b['validation']:.2f}, test {b['test']:.2f}; {b['description']}."
            for task, rows in facts["baselines"].items() for b in rows]


def paired_family(results: list[dict], probe_output: Path, pairs: list[tuple[str, str]], tasks: list[str],
                  b_attention: str = "bidirectional") -> list[tuple[Paired, float]]:
    """Each (a, b) on each task, compared on the same test examples (McNemar for accuracy, a paired permutation
    otherwise), with Holm's adjustment over the whole family; ``b`` read in ``b_attention``."""
    compared = []
    for task in tasks:
        for a, b in pairs:
            kept = [kept_predictions(probe_output, _cells(results, name, attention)[task])
                    for name, attention in ((a, "bidirectional"), (b, b_attention))]
            compared.append(compare_runs(*kept))
    adjusted = holm([c.p_value for c in compared]) if compared else []
    return list(zip(compared, adjusted))


def _paired_lines(family: list[tuple[Paired, float]], seeds: dict[str, int]) -> list[str]:
    lines = ["| A − B | task | adaptation seed | test examples | A | B | A − B | test | p | Holm p | detail |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    for c, adjusted in family:
        lines.append(f"| {c.a} − {c.b} | {c.task} | {seeds.get(c.a, '–')} | {c.examples} | {c.score_a:.2f} | "
                     f"{c.score_b:.2f} | {c.difference:+.2f} | {c.test} | {c.p_value:.4f} | {adjusted:.4f} | "
                     f"{c.detail or '–'} |")
    return lines


def recipe_verdict(family: list[tuple[Paired, float]], task: str, a: str, b: str) -> str:
    """The pre-registered rule for two recipes on one task: one is ahead only where every adaptation seed's paired
    test is significant after Holm and points the same way; otherwise no difference is shown."""
    rows = [(c, adjusted) for c, adjusted in family if c.task == task]
    if rows and all(adjusted < LEVEL and c.difference > 0 for c, adjusted in rows):
        return f"{a} ahead on every seed (each Holm-adjusted p < {LEVEL})"
    if rows and all(adjusted < LEVEL and c.difference < 0 for c, adjusted in rows):
        return f"{b} ahead on every seed (each Holm-adjusted p < {LEVEL})"
    ahead = sum(c.difference > 0 for c, _ in rows)
    significant = sum(adjusted < LEVEL for _, adjusted in rows)
    return (f"no difference shown ({a} ahead on {ahead} of {len(rows)} seeds, {significant} of {len(rows)} paired "
            f"tests significant after Holm)")


def _comparisons(args, results: list[dict], tasks: list[str], verdicts: dict[str, bool], probe_output: Path
                 ) -> list[str]:
    seeds = {adapted(o, s): s for s in args.seeds for o in OBJECTIVES}
    informative_tasks = [t for t in tasks if verdicts.get(t)]
    head = ["Informative tasks, decided on validation before any test score is read (some trained row beats the "
            "random-init row, the majority class and the best lexical baseline on validation by more than two "
            "binomial standard errors): "
            + ", ".join(f"{t}: {'yes' if verdicts.get(t) else 'no'}" for t in tasks) + ". The comparisons below use "
            "the informative ones only.", ""]
    if not informative_tasks:
        return head + ["No task is informative at these sizes: the recipes cannot be compared here."]
    recipes = paired_family(results, probe_output, [(adapted("mntp", s), adapted("mlm", s)) for s in args.seeds],
                            informative_tasks)
    against_source = paired_family(results, probe_output, [(adapted(o, s), "decoder") for s in args.seeds
                                                           for o in OBJECTIVES], informative_tasks)
    against_causal = paired_family(results, probe_output, [(adapted(o, s), "decoder") for s in args.seeds
                                                           for o in OBJECTIVES], informative_tasks, "causal")
    floor = 2 / 2 ** len(args.seeds)
    lines = head + [
        "### MNTP against MLM, per adaptation seed", "",
        "Each seed's MNTP and MLM models saw the same samples in the same order with the same masks; each pair is "
        "compared on the same test examples (accuracy: McNemar's exact test of the examples one model gets right "
        "and the other wrong), Holm over every row of this table.", "",
        *_paired_lines(recipes, seeds), "",
        f"Rule, fixed before the run: a recipe is ahead on a task only where every seed's paired test is significant "
        f"after Holm and points the same way. A test over the {len(args.seeds)} seeds themselves (a sign-flip of "
        f"the per-seed differences) cannot go below p = {floor:g} two-sided, so with {len(args.seeds)} seeds the "
        "recipes' difference over adaptation seeds is not testable; the per-seed tests say whether two models of one "
        "seed differ on these examples, and agreement over seeds is what the rule asks for.", "",
        *[f"- **{t}**: {recipe_verdict(recipes, t, 'MNTP', 'MLM')}." for t in informative_tasks], "",
        "### Each adapted model against the untouched decoder (bidirectional)", "",
        "Does adaptation change what a probe reads at all? Same test, Holm over every row of this table.", "",
        *_paired_lines(against_source, seeds), "",
        "### Each adapted model against the untouched decoder as it is (causal)", "",
        "Is the adapted encoder better than the decoder read as it was trained (causal attention, the same probe)? "
        "Same test, Holm over every row of this table; the same rule as for the recipes: adaptation is ahead of "
        "the causal decoder on a task only where every seed of a recipe is significantly ahead.", "",
        *_paired_lines(against_causal, seeds), "",
        *_causal_verdicts(against_causal, informative_tasks)]
    return lines


def _causal_verdicts(family: list[tuple[Paired, float]], tasks: list[str]) -> list[str]:
    """Per task and recipe, the recipe rule's verdict against the causal decoder."""
    return [f"- **{task}**, {shown}: "
            + recipe_verdict([(c, p) for c, p in family if c.a.startswith(objective + "-")], task, shown,
                             "the causal decoder") + "."
            for task in tasks for objective, shown in OBJECTIVES.items()]


REPO = Path(__file__).resolve().parents[2]
PLACES = "Paths: WORKDIR is --workdir, DATA_DIR --data-dir, MODEL_DIR the folder of --model (REPORT_DIR: of --report " \
         "outside the repository); commands run from the repository root."


def machine_free(text: str, args) -> str:
    """``text`` without this machine's paths: --workdir, --data-dir and the folder of --model by the names ``PLACES``
    gives them, the repository root as ``.``, the longest path first."""
    places = [(Path(args.workdir), "WORKDIR"), (Path(args.data_dir), "DATA_DIR"),
              (Path(args.model).parent, "MODEL_DIR"), (REPO, ".")]
    if not Path(args.report).resolve().is_relative_to(REPO):
        places.append((Path(args.report).parent, "REPORT_DIR"))
    spellings = sorted({(str(form), name) for path, name in places
                        for form in (path, path.absolute(), path.resolve()) if str(form) not in (".", "/")},
                       key=lambda pair: -len(pair[0]))
    for spelling, name in spellings:
        # whole path components only: --workdir /tmp/adapt must not turn /tmp/adapt_REPORT.md into WORKDIR_REPORT.md
        text = re.sub(re.escape(spelling) + r"(?![\w.-])", lambda _, name=name: name, text)
    return text


def write_report(args, results: list[dict], facts: dict, stages: list[tuple[str, float, float]], merged: str,
                 probe_output: Path) -> Path:
    tasks = list(dict.fromkeys(r["task"] for r in results))
    sizes = {r["task"]: r["rows"] for r in results if r["model"] == "decoder"}
    total_wall, total_cpu = sum(s[1] for s in stages), sum(s[2] for s in stages)
    lines = [
        "# Decoder -> encoder adaptation on a CPU, scored by a frozen linear probe", "",
        # a text block, not a command to run as written: its paths are the names PLACES gives
        "Command:", "", "```text", f"python examples/decoder_adaptation/run.py {shlex.join(facts['argv'])}", "```", "",
        PLACES, "",
        f"Measured on {os.cpu_count()} CPU cores: {total_wall / 60:.1f} minutes wall (the stages below); load "
        f"average over the last minute {facts['load_at_start']:.2f} at the start and {facts['load_at_end']:.2f} at "
        "the end (this run alone keeps it near the core count).", "",
        "## Settings", "",
        f"- Model: `{args.model.name}`"
        + (" (SmolLM2-135M-Instruct, 4-bit Q4_1 GGUF weights **dequantized to float32 on load**: the quantization "
           "error is in every row)" if args.model.suffix == ".gguf" else "")
        + "; imported with tools/convert_from_hf.py's importer (a mask token added, the vocabulary padded to a "
          "multiple of 128).",
        f"- Adaptation data: the Brown corpus's train files ({facts['data']['train_tokens']:,} tokens); "
        f"{args.steps} steps x {args.batch_size} samples x {args.seq_length} tokens = "
        f"{args.steps * args.batch_size * args.seq_length:,} tokens per objective and seed. Adaptation seeds "
        f"{', '.join(map(str, args.seeds))}: for each, the MNTP and MLM runs have the same flags but `--objective` "
        "(seed, data, order of samples, masks (mask ratio 0.4, all [MASK]), steps, LR), so they see the same "
        "samples in the same order; the seeds differ in sample order and masks. "
        f"LR {args.lr:g}, warmup {max(args.steps // 10, 1)} steps, "
        f"WSD decay over the last {max(args.steps // 5, 1)}, AdamW, no weight decay, fp32 on the CPU.",
        f"- Merge: the better of MNTP and MLM by mean probe validation score over tasks and seeds (MNTP "
        f"{facts['mean_validation']['mntp']:.2f}, MLM {facts['mean_validation']['mlm']:.2f}: **{facts['better']}**; "
        f"its seed-{args.seeds[0]} model, `{facts['merged_from']}`) merged linearly with the imported decoder, "
        f"weights {args.merge_weight:g} (adapted), "
        f"{1 - args.merge_weight:g} (source), by tools/merge_checkpoints.py with "
        f"{shlex.join(facts['merge_command'][facts['merge_command'].index('--weights'):])}.",
        f"- Probe (tools/evaluate.py `--probe linear`): features are the {POOLING}; inputs cut at "
        f"{args.probe_max_length} tokens; StandardScaler + scikit-learn LogisticRegression (L2, lbfgs, max_iter "
        f"{MAX_ITER}), C in {', '.join(f'{c:g}' for c in C_GRID)} chosen on validation, the test score at that C "
        f"(accuracy; brown-pos: tagging accuracy over words, a word's feature the mean of its sub-tokens). Examples "
        f"per task: {args.probe_train} train, {args.probe_eval} validation (fixed random subsets), "
        f"{'every test example' if not args.probe_test else f'{args.probe_test} test (a fixed random subset)'}; "
        "rows per split: " + "; ".join(f"{t} {v}" for t, v in sizes.items()) + ". Every row keeps its per-example "
        "test predictions (the paired tests below). Random init: megamlm's own initialisation, seed 0.",
        f"- Held-out loss: {args.heldout_windows} windows of {args.seq_length} tokens of the Brown validation files, "
        "masked as a run's validation masks them (the same masks for every model, mask ratio 0.4); MLM and MNTP "
        "bidirectional, CLM causal; mean over predicted tokens.", "",
        "## Results", "", *_table(args, results, facts, merged, tasks), "",
        "Lexical baselines (eval/baselines.py, no model; trained on the probe's train examples and chosen on its "
        "validation examples as the probe's C is):", "", *lexical_lines(facts), "",
        "## Comparisons on the same test examples", "",
        *_comparisons(args, results, tasks, informative(results, best_lexical(facts)), probe_output), "",
        "## Wall time of each stage", "",
        "| stage | wall s | CPU s (this process and its children) |", "|---|---|---|",
        *[f"| {name} | {wall:.1f} | {cpu:.1f} |" for name, wall, cpu in stages],
        f"| total | {total_wall:.1f} | {total_cpu:.1f} |", "",
        "Training command (MLM: the same with `--objective mlm` and its own `--save`; the other seeds: their own "
        "`--seed` and `--save`):", "",
        # The interpreter and the clone's path are this machine's: the command as run from the repository root.
        "```text", shlex.join(["python", Path(facts["train_command"][1]).name, *facts["train_command"][2:]]),
        "```", "",
    ]
    write_text_atomic(Path(args.report), machine_free("\n".join(lines), args))
    return Path(args.report)

"""The markdown report of examples/decoder_adaptation/run.py: settings, the probe and loss table, stage timings and
the command, written to a temporary name and renamed into place."""

from __future__ import annotations

import shlex
from pathlib import Path

from megamlm.eval.probe import C_GRID, MAX_ITER, POOLING, informative
from megamlm.eval.results import write_text_atomic

ROWS = (("decoder", "causal", "the decoder as is (causal)"),
        ("decoder", "bidirectional", "the decoder, bidirectional, untrained"),
        ("mntp", "bidirectional", "bidirectional + MNTP"),
        ("mlm", "bidirectional", "bidirectional + MLM"),
        (None, "bidirectional", "the better of MNTP/MLM merged with its source"),
        ("random-init", "bidirectional", "random init of the same shape (baseline)"))


def _table(args, results: list[dict], facts: dict, merged: str) -> list[str]:
    tasks = list(dict.fromkeys(r["task"] for r in results))
    head = ("| model | attention | " + " | ".join(f"{t} (test)" for t in tasks)
            + " | mean test | mean val | held-out MLM loss | held-out MNTP loss | held-out CLM loss |")
    lines = [head, "|---|---|" + "---|" * (len(tasks) + 5)]
    for name, attention, label in ROWS:
        name = name or merged
        cells = {r["task"]: r for r in results if r["model"] == name and r["attention"] == attention}
        if len(cells) != len(tasks):
            continue
        tests = [cells[t]["test"] for t in tasks]
        vals = [cells[t]["validation"] for t in tasks]
        loss = facts["losses"].get(name, {})
        shown = [f"{loss[o]:.3f}" if o in loss else "–" for o in ("mlm", "mntp", "clm")]
        lines.append(f"| {label} (`{name}`) | {attention} | " + " | ".join(f"{t:.2f}" for t in tests)
                     + f" | {sum(tests) / len(tests):.2f} | {sum(vals) / len(vals):.2f} | " + " | ".join(shown) + " |")
    majority = {r["task"]: r["majority"]["test"] for r in results}
    lines.append("| majority class | – | " + " | ".join(f"{majority[t]:.2f}" for t in tasks) + " | – | – | – | – | – |")
    verdicts = informative(results)
    lines += ["", "Informative tasks (some trained row beats the random-init row and the majority class by more than "
                  "two binomial standard errors of its test score): "
              + ", ".join(f"{t}: {'yes' if v else 'no'}" for t, v in verdicts.items()) + "."]
    return lines


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
        text = text.replace(spelling, name)
    return text


def write_report(args, results: list[dict], facts: dict, stages: list[tuple[str, float, float]], merged: str) -> Path:
    sizes = next(iter(results))["rows"]
    total_wall, total_cpu = sum(s[1] for s in stages), sum(s[2] for s in stages)
    lines = [
        "# Decoder -> encoder adaptation on a CPU, scored by a frozen linear probe", "",
        # a text block, not a command to run as written: its paths are the names PLACES gives
        "Command:", "", "```text", f"python examples/decoder_adaptation/run.py {shlex.join(facts['argv'])}", "```", "",
        PLACES, "",
        "## Settings", "",
        f"- Model: `{args.model.name}`"
        + (" (SmolLM2-135M-Instruct, 4-bit Q4_1 GGUF weights **dequantized to float32 on load**: the quantization "
           "error is in every row)" if args.model.suffix == ".gguf" else "")
        + "; imported with tools/convert_from_hf.py's importer (a mask token added, the vocabulary padded to a "
          "multiple of 128).",
        f"- Adaptation data: the Brown corpus's train files ({facts['data']['train_tokens']:,} tokens); "
        f"{args.steps} steps x {args.batch_size} samples x {args.seq_length} tokens = "
        f"{args.steps * args.batch_size * args.seq_length:,} tokens per objective. MNTP and MLM runs have the same "
        "flags but `--objective` (seed, data, order of samples, masks (mask ratio 0.4, all [MASK]), steps, LR), so "
        f"they see the same samples in the same order. LR {args.lr:g}, warmup {max(args.steps // 10, 1)} steps, "
        f"WSD decay over the last {max(args.steps // 5, 1)}, AdamW, no weight decay, fp32 on the CPU.",
        f"- Merge: the better of MNTP and MLM by mean probe validation score (MNTP "
        f"{facts['mean_validation']['mntp']:.2f}, MLM {facts['mean_validation']['mlm']:.2f}: **{facts['better']}**) "
        f"merged linearly with the imported decoder, weights {args.merge_weight:g} (adapted), "
        f"{1 - args.merge_weight:g} (source), by tools/merge_checkpoints.py with "
        f"{shlex.join(facts['merge_command'][facts['merge_command'].index('--weights'):])}.",
        f"- Probe (tools/evaluate.py `--probe linear`): features are the {POOLING}; inputs cut at "
        f"{args.probe_max_length} tokens; StandardScaler + scikit-learn LogisticRegression (L2, lbfgs, max_iter "
        f"{MAX_ITER}), C in {', '.join(f'{c:g}' for c in C_GRID)} chosen on validation, the test score at that C "
        f"(accuracy; brown-pos: tagging accuracy over words, a word's feature the mean of its sub-tokens). Examples "
        f"per task: {args.probe_train} train, {args.probe_eval} validation, {args.probe_eval} test (fixed random "
        f"subsets; brown-pos rows are words: {sizes}). Random init: megamlm's own initialisation, seed 0.",
        f"- Held-out loss: {args.heldout_windows} windows of {args.seq_length} tokens of the Brown validation files, "
        "masked as a run's validation masks them (the same masks for every model, mask ratio 0.4); MLM and MNTP "
        "bidirectional, CLM causal; mean over predicted tokens.", "",
        "## Results", "", *_table(args, results, facts, merged), "",
        "## Wall time of each stage", "",
        "| stage | wall s | CPU s (this process and its children) |", "|---|---|---|",
        *[f"| {name} | {wall:.1f} | {cpu:.1f} |" for name, wall, cpu in stages],
        f"| total | {total_wall:.1f} | {total_cpu:.1f} |", "",
        "Training command (MLM: the same with `--objective mlm` and its own `--save`):", "",
        # The interpreter and the clone's path are this machine's: the command as run from the repository root.
        "```text", shlex.join(["python", Path(facts["train_command"][1]).name, *facts["train_command"][2:]]),
        "```", "",
    ]
    write_text_atomic(Path(args.report), machine_free("\n".join(lines), args))
    return Path(args.report)

"""The plan as a Markdown table: one row per run, then the totals against running every model from scratch."""

from __future__ import annotations

from megamlm.study.planning.cost import Throughput, run_cost, totals
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.prefixes import run_schedule


def _hours(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def _tokens(value: int) -> str:
    return f"{value / 1e9:,.1f}B" if value >= 1e8 else f"{value / 1e6:,.2f}M"


def plan_table(plan: Plan, throughput: Throughput) -> str:
    marked = plan.marks_paper_runs
    lines = [f"Plan of study `{plan.study.name}`: {len(plan.runs)} runs under `{plan.root}`.", ""]
    if marked:
        paper = sum(run.reproduces_paper for run in plan.runs)
        scaled = (f" (here scaled by --scale {plan.study.scale:g}: the paper's arms at a fraction of its steps, "
                  "not its models)") if plan.study.is_rehearsal else ""
        extend = (f"; {len(plan.runs) - paper} extend it with models it did not train (`extension`)"
                  if paper < len(plan.runs) else "")
        count = f"All {paper} runs" if paper == len(plan.runs) else f"{paper} of the {len(plan.runs)} runs"
        lines += [f"{count} reproduce models the paper trained (arXiv 2507.00994; `yes`){scaled}{extend}.", ""]
    lines += ["| run |" + (" paper's model? |" if marked else "")
              + " starts from | schedule | trains steps | tokens | GPU-hours | "
              "kept checkpoints |", "|---|" + ("---|" if marked else "") + "---|---|---:|---:|---:|---|"]
    for run in plan.runs:
        start = run.origin("scratch", "{parent} @ {step:,}", "{parent} (continued)")
        cost = run_cost(run, throughput)
        first = run.branch_step + 1
        trained = f"{first:,}-{run.train_iters:,}" if run.steps_trained else "none"
        kept = ", ".join(f"{s:,}" for s in run.save_at) or "-"
        origin = (" yes |" if run.reproduces_paper else " extension |") if marked else ""
        lines.append(f"| {run.name} |{origin} {start} | {run_schedule(run)} | {trained} ({cost.steps:,}) | "
                     f"{_tokens(cost.tokens)} | {_hours(cost.gpu_hours)} | {kept} |")
    t = totals(plan, throughput)
    lines += ["", "| | steps | tokens | GPU-hours |", "|---|---:|---:|---:|",
              f"| this plan | {t.plan.steps:,} | {_tokens(t.plan.tokens)} | {_hours(t.plan.gpu_hours)} |",
              f"| every model from scratch | {t.independent.steps:,} | {_tokens(t.independent.tokens)} | "
              f"{_hours(t.independent.gpu_hours)} |",
              f"| saved | {t.independent.steps - t.plan.steps:,} | {_tokens(t.independent.tokens - t.plan.tokens)} "
              f"| {_hours(None if t.plan.gpu_hours is None else t.independent.gpu_hours - t.plan.gpu_hours)} "
              f"({t.saving_fraction:.0%}) |", ""]
    if throughput.sources:
        lines.append("GPU-hours from " + "; ".join(throughput.sources) + " (training only: no validation, "
                     "checkpointing, evaluation or queueing).")
    else:
        lines.append("GPU-hours: give --tokens-per-second N (or SIZE=N), --benchmark FILE, or cost in the study file.")
    return "\n".join(lines) + "\n"

"""The report's paired comparisons on the same test examples (``eval/paired.py``): where two arms have a single
pretraining seed each (the paper's models), the descriptive table can only compare them over fine-tuning seeds;
their kept per-example predictions compare them on the same test examples, each at its best LR, per fine-tuning
seed, McNemar's exact test for accuracy and a paired permutation test otherwise. Descriptive like the tables
beside it: it says whether two fine-tuned models differ on these examples, not whether their recipes would over
other pretraining seeds."""

from __future__ import annotations

from pathlib import Path

from megamlm.eval.aggregate import TaskSummary
from megamlm.eval.paired import paired_comparisons, paired_table
from megamlm.study.evidence.scores import models_at
from megamlm.study.planning.arms import arms
from megamlm.study.planning.plan import Plan


def single_seed_pairs(plan: Plan) -> list[tuple[str, str]]:
    """(final model of arm A, of arm B) for every pair of arms with one pretraining seed each."""
    finals = [models[0][1] for arm in arms(plan) if len(models := models_at(plan, arm)) == 1]
    return [(a, b) for i, a in enumerate(finals) for b in finals[i + 1:]]


def paired_section(plan: Plan, summaries: list[TaskSummary], rehearsal: bool = False) -> str:
    """The section, or "" where no two arms have a single pretraining seed or no predictions were kept."""
    e = plan.study.evaluation
    pairs = single_seed_pairs(plan)
    if rehearsal or e is None or not pairs:
        return ""
    seeds = {name: tuple(e.seeds) for pair in pairs for name in pair}
    table = paired_table(paired_comparisons(Path(plan.root) / "eval", summaries, pairs, seeds))
    return table.replace("## Paired comparisons", "### Paired comparisons", 1)

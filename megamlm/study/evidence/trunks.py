"""Which models are one unit of a claim's test: models that share a trunk (the splits branched from one CLM run, a
run's continuations, its early checkpoints) share the weights of that run up to where they branch, so they are
not independent replicates; the unit of independence is the seed of the trunk (``decision.unit_sample``)."""

from __future__ import annotations

from megamlm.study.planning.plan import Plan
from megamlm.study.running.commands import all_evaluated_models


def trunks(plan: Plan) -> dict[str, tuple[str, int]]:
    """model name -> (the run its trunk starts from scratch, that run's seed): models with the same trunk share
    the weights of its run up to where they branch (splits, continuations, early checkpoints of one run)."""
    def root(name: str) -> str:
        run = plan.run(name)
        return root(run.parent) if run.parent else name
    out = {}
    for model in all_evaluated_models(plan):
        first = root(model.run)
        out[model.name] = (first, plan.run(first).seed)
    return out

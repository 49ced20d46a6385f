"""A paper's claims answered from a study's scores: for each claim of its table (``study.claims_table``), one
pre-registered test (``decision.py``: an exact permutation test over the pretrained models' labels, Holm's
correction over the claims, intervals at the level of each claim's Holm step) on the models' scores averaged as
the paper averages over the informative tasks, a verdict, and what in the study's setting could explain a
departure. Tasks marked uninformative (``Evidence.excluded``) are left out of every claim test; the stability
claim needs the random-init model's scores (``Evidence.random_init``). The per-family differences under each
claim are descriptive."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from megamlm.eval.metrics import SIGNIFICANCE
from megamlm.model.config import PRESETS
from megamlm.study.evidence.decision import AGAINST, FAVOUR, ClaimSample, decide, interval
from megamlm.study.evidence.permutation import smallest_p
from megamlm.study.evidence.scores import Scores, evaluated_steps_of, models_at
from megamlm.study.evidence.statistics import Sample
from megamlm.study.planning.arms import Arm, arm_of_run, arms
from megamlm.study.planning.claims_table import KIND_NAMES, ClaimSpec, ClaimsTable, load_claims
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.schema import StudyError

SUPPORTED, CONTRADICTED, UNDECIDED = "supported", "contradicted", "not distinguishable at this scale"
NO_BASELINE, NO_TASK = "not testable (no random-init baseline)", "not testable (no informative task)"


def not_testable(seeds: int) -> str:
    return f"not testable with {seeds} seed{'s' if seeds != 1 else ''}"


@dataclass(frozen=True)
class Evidence:
    """What the claims take besides the scores."""
    excluded: Mapping[str, str] = field(default_factory=dict)
    """Tasks left out of every claim test, each with why (e.g. "uninformative: no arm beats the random-init
    model"); default: none, every task is informative."""
    random_init: Mapping[str, float] | None = None
    """Per task, the score of a random-init model of the same shape fine-tuned with the same protocol (test mean
    at its best LR): the baseline of the stability claim's measure; None: that claim is not testable."""


@dataclass
class Side:
    """The pretrained models one side of a claim compares: (pretraining seed, model name)."""
    models: list[tuple[int, str]]


@dataclass
class Claim:
    key: str
    statement: str
    setting: str
    """What in this study's setting could explain a departure from the paper (filled from its settings)."""
    absent: str = ""
    """Why the study cannot ask this claim (no arms for it); empty when it can."""
    matches: bool = False
    margin: float = 0.0
    what: str = ""
    """The compared arms: "A − B" (their models pooled on each side)."""
    described: list[str] = field(default_factory=list)
    """Per compared pair and family, the difference of means: descriptive, untested."""
    sample: ClaimSample | None = None
    untestable: str = ""
    """Why the claim has no test although it is asked (too few seeds, no baseline, no informative task)."""
    difference: float = math.nan
    p_value: float = math.nan
    adjusted: float = math.nan
    decision: int = 0
    level: float = math.nan
    bounds: tuple[float, float] = (math.nan, math.nan)

    @property
    def null(self) -> float:
        return -self.margin if self.matches else 0.0

    def verdict(self) -> str:
        if self.untestable:
            return self.untestable
        return SUPPORTED if self.decision == FAVOUR else CONTRADICTED if self.decision == AGAINST else UNDECIDED


def _tokens(value: float) -> str:
    return f"{value / 1e9:,.1f}B" if value >= 1e8 else f"{value / 1e6:,.2f}M"


def _setting(plan: Plan, arm: Arm) -> dict:
    """The study's facts a claim's setting can name, from one compared arm (all share size, budget and mask)."""
    run = arm.runs[0]
    preset = PRESETS[run.size]
    e = plan.study.evaluation
    ft_steps = (e.hyperparameters.max_steps if e else None) or "the protocol's"
    return {"size": run.size, "layers": preset["num_layers"], "hidden": preset["hidden_size"],
            "steps": run.train_iters, "tokens_per_step": run.tokens_per_step,
            "tokens": _tokens(run.tokens_per_step * run.train_iters),
            "lrs": ", ".join(f"{lr:g}" for lr in (e.lrs if e else [])), "n_lrs": len(e.lrs) if e else 0,
            "n_ft_seeds": len(e.seeds) if e else 0, "ft_steps": ft_steps,
            "ft_examples": (e.max_train_examples or "all") if e else "all", "seeds": len(arm.runs)}


def _validation_facts(validation: dict[str, dict[str, Sample]] | None, arms_: list[Arm]) -> str:
    """The final validation MLM accuracy and loss (means over pretraining seeds) of the arms that train with MLM,
    where the study measured them: how far along its MLM curve each arm ended."""
    parts, seen = [], set()
    for arm in arms_:
        if arm.label in seen:  # an MLM arm beside several of its splits is named once
            continue
        seen.add(arm.label)
        metrics = (validation or {}).get(arm.label, {})
        accuracy, loss = metrics.get("mlm_accuracy"), metrics.get("mlm_loss")
        if arm.kind != "clm" and accuracy and accuracy.pretraining and loss and loss.pretraining:
            parts.append(f"{arm.label} {statistics.fmean(accuracy.pretraining):.3f} "
                         f"({statistics.fmean(loss.pretraining):.2f})")
    if not parts:
        return ""
    return (" Final validation MLM accuracy (and MLM loss) here, means over pretraining seeds: "
            + "; ".join(parts) + ".")


def _fill(table: ClaimsTable, spec: ClaimSpec, plan: Plan, arm: Arm, **extra) -> str:
    values = {**_setting(plan, arm), **{f"paper_{k}": v for k, v in table.facts.items()}, **extra}
    try:
        return spec.setting.format(**values)
    except (KeyError, IndexError, ValueError) as err:
        raise StudyError(f"claims table: the setting of claim {spec.key} names {err}, which is neither a fact of "
                         f"the table nor one of the study's ({', '.join(sorted(values))}); fix that name") from None


def _arm_pairs(plan: Plan, spec: ClaimSpec) -> list[tuple[Arm, Arm]]:
    """(a arm, b arm) of each size, budget and mask ratio with both: every ``a`` arm against the first ``b``."""
    groups: dict[tuple, dict[str, list[Arm]]] = defaultdict(lambda: defaultdict(list))
    for arm in arms(plan):
        if arm.kind != "continuation":
            groups[arm.group][arm.kind].append(arm)
    return [(a, g[spec.b][0]) for g in groups.values() if g[spec.b] for a in g[spec.a]]


def _continuation_pairs(plan: Plan, spec: ClaimSpec) -> list[tuple[Arm, Arm, int]]:
    """(continuation of an ``a`` parent, of a ``b`` parent, steps) with the same parents' group and steps."""
    by_parent: dict[tuple, dict[str, Arm]] = defaultdict(dict)
    by_run = arm_of_run(plan)
    for arm in arms(plan):
        if arm.kind == "continuation" and arm.runs[0].objective == spec.objective:
            parent = by_run[arm.runs[0].continues]
            by_parent[(parent.group, arm.runs[0].train_iters)][parent.kind] = arm
    return [(g[spec.a], g[spec.b], steps) for (_, steps), g in by_parent.items() if spec.a in g and spec.b in g]


def _pairs_and_models(plan: Plan, spec: ClaimSpec) -> tuple[list[tuple[Arm, Arm, int | None]], dict]:
    """The compared (a arm, b arm, step: None for the final models) and the claim's setting facts; an empty list
    and {"absent": why} where the study has no arms for the claim."""
    a_name, b_name = KIND_NAMES[spec.a], KIND_NAMES[spec.b]
    if spec.compare == "continuation":
        cpt = _continuation_pairs(plan, spec)
        if not cpt:
            return [], {"absent": f"no {KIND_NAMES[spec.objective]} continuations of both {a_name} and {b_name} "
                                  "arms with the same steps"}
        parent = arm_of_run(plan)[cpt[0][1].runs[0].continues]
        return [(a, b, None) for a, b, _ in cpt], {"arm": parent,
                                                    "cpt": ", ".join(sorted({f"{s:,}" for *_, s in cpt}))}
    pairs = _arm_pairs(plan, spec)
    if not pairs:
        return [], {"absent": f"no {' and '.join(sorted((a_name, b_name)))} arm of one size, budget and mask ratio"}
    facts: dict = {"arm": pairs[0][1]}
    if spec.compare == "final":
        splits = [arm for pair in pairs for arm in pair if arm.kind == "clm_then_mlm"]
        facts["mlm_phase"] = ", ".join(f"{p:,}" for p in sorted({s.runs[0].train_iters - s.runs[0].switch_step
                                                                   for s in splits}))
        return [(a, b, None) for a, b in pairs], facts
    if spec.compare == "early":
        early = []
        for a, b in pairs:
            steps = sorted(set(evaluated_steps_of(plan, a)) & set(evaluated_steps_of(plan, b)))
            steps = [s for s in steps if s < a.runs[0].train_iters]
            if steps:
                early.append((a, b, steps[0]))
        if not early:
            return [], {"absent": "no checkpoint of both arms evaluated before the end (evaluation.checkpoint_steps)"}
        facts.update(early=early[0][2], early_tokens=_tokens(early[0][2] * early[0][0].runs[0].tokens_per_step))
        return early, facts
    e = plan.study.evaluation
    if e is None or len(e.lrs) < 2:
        return [], {"absent": "a single fine-tuning learning rate"}
    return [(a, b, None) for a, b in pairs], facts


def _measure(scores: Scores, tasks: list[str], evidence: Evidence, stability: bool):
    """model name -> the value a claim compares: its score averaged over ``tasks`` as the paper averages, or
    (stability) its relative stability loss over them."""
    if stability:
        return lambda name: scores.relative_stability_loss(name, tasks, evidence.random_init or {})
    return lambda name: scores.claim_score(name, tasks)


def _values(scores: Scores, models: list[tuple[int, str]], value) -> tuple[list[float], set[int]]:
    found = [(seed, v) for seed, name in models if (v := value(name)) is not None]
    return [v for _, v in found], {seed for seed, _ in found}


def _answer(table: ClaimsTable, spec: ClaimSpec, plan: Plan, scores: Scores, validation,
            evidence: Evidence) -> Claim:
    """One claim: its pooled sides' values, the descriptive per-family differences, and its setting."""
    claim = Claim(spec.key, spec.statement, "", matches=spec.matches, margin=spec.margin)
    pairs, facts = _pairs_and_models(plan, spec)
    if not pairs:
        claim.absent = facts["absent"]
        return claim
    arm = facts.pop("arm")
    claim.setting = _fill(table, spec, plan, arm, **facts)
    if spec.validation_facts:
        claim.setting += _validation_facts(validation, [arm for a, b, _ in pairs for arm in (b, a)])
    tasks = [t for t in sorted(scores.family_of) if t not in evidence.excluded]
    stability = spec.compare == "stability"
    value = _measure(scores, tasks, evidence, stability)
    sides: list[dict[str, tuple[int, str]]] = [{}, {}]
    for a, b, step in pairs:
        ma, mb = models_at(plan, a, step), models_at(plan, b, step)
        sides[0].update({name: (seed, name) for seed, name in ma})
        sides[1].update({name: (seed, name) for seed, name in mb})
        at = f" at step {step:,}" if step is not None else ""
        what = f"relative stability loss {b.label} − {a.label}" if stability else f"{a.label} − {b.label}{at}"
        for family in scores.families:
            ts = [t for t in tasks if scores.family_of[t] == family]
            if stability and not evidence.random_init:
                continue
            of_family = _measure(scores, ts, evidence, stability)
            va, vb = (_values(scores, m, of_family)[0] for m in ((mb, ma) if stability else (ma, mb)))
            if ts and va and vb:
                claim.described.append(f"{what}, {family}: {statistics.fmean(va) - statistics.fmean(vb):+.2f}")
    a_side, b_side = (list(side.values()) for side in sides)
    if stability:
        a_side, b_side = b_side, a_side  # b's loss − a's: > 0 where a loses less
    claim.what = (f"relative stability loss {' + '.join(sorted({b.label for _, b, _ in pairs}))} − "
                  f"{' + '.join(sorted({a.label for a, _, _ in pairs}))}" if stability else
                  f"{' + '.join(sorted({a.label for a, _, _ in pairs}))} − "
                  f"{' + '.join(sorted({b.label for _, b, _ in pairs}))}"
                  + (f" at step {pairs[0][2]:,}" if pairs[0][2] is not None else ""))
    if not tasks:
        claim.untestable = NO_TASK
        return claim
    if stability and not evidence.random_init:
        claim.untestable = NO_BASELINE
        return claim
    (va, seeds_a), (vb, seeds_b) = _values(scores, a_side, value), _values(scores, b_side, value)
    if not va or not vb:
        claim.absent = "no scores yet: no model of both sides has a score on every informative task"
        return claim
    claim.sample = ClaimSample(np.array(va), np.array(vb), claim.null)
    if not claim.sample.testable:
        claim.untestable = not_testable(len(seeds_a | seeds_b))
    return claim


def study_claims(plan: Plan) -> ClaimsTable | None:
    """The claims table the study names (its ``claims`` key), or None."""
    study = plan.study
    return load_claims(study.resolve(study.claims)) if study.claims else None


def claims(plan: Plan, scores: Scores, validation: dict[str, dict[str, Sample]] | None = None,
           table: ClaimsTable | None = None, evidence: Evidence | None = None) -> list[Claim]:
    """The claims of ``table`` (default: the study's), each with its test decided, Holm over the testable claims.
    ``validation`` (arm label -> metric -> values, the report's final validation table) adds the MLM-trained arms'
    final validation MLM accuracy to the settings that ask for it."""
    table = table or study_claims(plan)
    evidence = evidence or Evidence()
    found = [_answer(table, spec, plan, scores, validation, evidence) for spec in table.claims] if table else []
    tested = [c for c in found if c.sample is not None and not c.untestable]
    if tested:
        decided = decide([c.sample for c in tested])
        for i, c in enumerate(tested):
            c.difference, c.p_value = float(decided.difference[i]), float(decided.p_value[i])
            c.adjusted, c.decision = float(decided.adjusted[i]), int(decided.decision[i])
            c.level = float(decided.level[i])
            c.bounds = interval(c.sample, c.level)
    for c in found:
        if c.sample is not None and c.untestable:
            c.difference = float(c.sample.a.mean() - c.sample.b.mean())
    return found


def smallest_p_of(claim: Claim) -> float:
    return smallest_p(claim.sample.a.size, claim.sample.b.size) if claim.sample is not None else math.nan


def significant(claim: Claim) -> bool:
    return claim.adjusted < SIGNIFICANCE

"""A paper's claims answered from a study's scores: for each claim of its table (``study.claims_table``), one
pre-registered test (``decision.py``: the models averaged per seed of their trunk, the unit of independence; an
exact permutation test over the seed means, or a sign-flip test where a trunk has models on both sides; Holm's
correction over the claims, intervals at the level of each claim's Holm step) on the models' scores averaged as
the paper averages over the informative tasks, a verdict with the scale it was reached at, and what in the
study's setting could explain a departure. Tasks not shown informative (``Evidence.excluded``) are left out of
every claim test; the stability claim needs a grid of at least ``rules.STABILITY_MIN_LRS`` LRs whose best is inside
it. The per-family differences under each claim are descriptive."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from megamlm.model.config import PRESETS
from megamlm.study.evidence.decision import AGAINST, FAVOUR, ClaimSample, at_floor, decide, interval, unit_sample
from megamlm.study.evidence.rules import LEVEL, STABILITY_MIN_LRS
from megamlm.study.evidence.scores import Scores, evaluated_steps_of, models_at, stability_grid
from megamlm.study.evidence.statistics import Sample
from megamlm.study.evidence.trunks import trunks
from megamlm.study.planning.arms import Arm, arm_of_run, arms
from megamlm.study.planning.claims_table import KIND_NAMES, ClaimSpec, ClaimsTable, load_claims
from megamlm.study.planning.cost import tokens_trained
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.schema import StudyError

SUPPORTED, CONTRADICTED, UNDECIDED = "supported", "contradicted", "not distinguishable at this scale"
NO_TASK = "not testable (no informative task)"


def not_testable(seeds: int) -> str:
    return f"not testable with {seeds} seed{'s' if seeds != 1 else ''}"


@dataclass(frozen=True)
class Evidence:
    """What the claims take besides the scores."""
    excluded: Mapping[str, str] = field(default_factory=dict)
    """Tasks left out of every claim test, each with why (e.g. "uninformative: no arm beats the random-init
    model"); default: none, every task is informative."""
    informative_margin: float | None = None
    """The margin the informative rule used (the study file's), for the report's statement of it."""


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
    scale: str = ""
    """The scale the verdict was reached at: "at 1.43M tokens, 4 layers, 5 seeds"."""
    floor: bool = False
    """Its test reaches its Holm step's level only with its most extreme arrangement (``decision.at_floor``)."""
    best_lrs: list[str] = field(default_factory=list)
    """Stability: where each compared arm's best LR sits in the grid, per task."""

    @property
    def null(self) -> float:
        return -self.margin if self.matches else 0.0

    def verdict(self) -> str:
        if self.untestable:
            return self.untestable
        return SUPPORTED if self.decision == FAVOUR else CONTRADICTED if self.decision == AGAINST else UNDECIDED

    def scaled_verdict(self) -> str:
        """The verdict with its scale in front: "at 1.43M tokens, 4 layers, 5 seeds: supported"."""
        return f"{self.scale}: {self.verdict()}" if self.scale else self.verdict()


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
            "tokens": _tokens(tokens_trained(run, 0, run.train_iters)),
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
        facts.update(early=early[0][2], early_tokens=_tokens(tokens_trained(early[0][0].runs[0], 0, early[0][2])))
        return early, facts
    e = plan.study.evaluation
    if e is None or len(e.lrs) < STABILITY_MIN_LRS:
        n = len(e.lrs) if e else 0
        return [], {"absent": f"{n} fine-tuning learning rate{'s' if n != 1 else ''}: the stability claim needs a "
                              f"grid of at least {STABILITY_MIN_LRS} with its best LR inside it"}
    return [(a, b, None) for a, b in pairs], facts


def _measure(scores: Scores, tasks: list[str], stability: bool):
    """model name -> the value a claim compares: its score averaged over ``tasks`` as the paper averages, or
    (stability) its stability loss over them (absolute points)."""
    if stability:
        return lambda name: scores.averaged(tasks, lambda task: scores.task_stability_loss(name, task))
    return lambda name: scores.claim_score(name, tasks)


def _values(models: list[str], value) -> tuple[list[float], list[str]]:
    found = [(name, v) for name in models if (v := value(name)) is not None]
    return [v for _, v in found], [name for name, _ in found]


def _tokens_of(plan: Plan, pairs: list[tuple[Arm, Arm, int | None]], compare: str) -> str:
    """The compared models' pretraining tokens (early: at the checkpoint; a continuation: its parent's plus its
    own)."""
    a, _, step = pairs[0]
    run = a.runs[0]
    if compare == "continuation":
        parent = plan.run(run.continues)
        return (f"{_tokens(tokens_trained(parent, 0, parent.train_iters))} + "
                f"{_tokens(tokens_trained(run, run.branch_step, run.train_iters))} continued")
    return _tokens(tokens_trained(run, 0, step if step is not None else run.train_iters))


def _seeds_text(sample: ClaimSample) -> str:
    n_a, n_b = sample.a.shape[-1], sample.b.shape[-1]
    if sample.paired:
        return f"{n_a} paired seed{'s' if n_a != 1 else ''}"
    return f"{n_a} seeds" if n_a == n_b else f"{n_a} against {n_b} seeds"


def _answer(table: ClaimsTable, spec: ClaimSpec, plan: Plan, scores: Scores, validation,
            evidence: Evidence, trunk_of: dict[str, tuple[str, int]]) -> Claim:
    """One claim: its sides' seed means, the descriptive per-family differences, its setting and its scale."""
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
    value = _measure(scores, tasks, stability)
    sides: list[dict[str, None]] = [{}, {}]
    for a, b, step in pairs:
        ma, mb = [m for _, m in models_at(plan, a, step)], [m for _, m in models_at(plan, b, step)]
        sides[0].update(dict.fromkeys(ma))
        sides[1].update(dict.fromkeys(mb))
        at = f" at step {step:,}" if step is not None else ""
        what = f"stability loss {b.label} − {a.label}" if stability else f"{a.label} − {b.label}{at}"
        for family in scores.families:
            ts = [t for t in tasks if scores.family_of[t] == family]
            of_family = _measure(scores, ts, stability)
            va, vb = (_values(m, of_family)[0] for m in ((mb, ma) if stability else (ma, mb)))
            if ts and va and vb:
                claim.described.append(f"{what}, {family}: {statistics.fmean(va) - statistics.fmean(vb):+.2f}")
    a_side, b_side = (list(side) for side in sides)
    if stability:
        a_side, b_side = b_side, a_side  # b's loss − a's: > 0 where a loses less
    claim.what = (f"stability loss {' + '.join(sorted({b.label for _, b, _ in pairs}))} − "
                  f"{' + '.join(sorted({a.label for a, _, _ in pairs}))}" if stability else
                  f"{' + '.join(sorted({a.label for a, _, _ in pairs}))} − "
                  f"{' + '.join(sorted({b.label for _, b, _ in pairs}))}"
                  + (f" at step {pairs[0][2]:,}" if pairs[0][2] is not None else ""))
    if not tasks:
        claim.untestable = NO_TASK
        return claim
    (va, names_a), (vb, names_b) = _values(a_side, value), _values(b_side, value)
    if not va or not vb:
        claim.absent = "no scores yet: no model of both sides has a score on every informative task"
        return claim
    paired = bool({trunk_of[n][0] for n in names_a} & {trunk_of[n][0] for n in names_b})
    claim.sample = unit_sample(va, [trunk_of[n][1] for n in names_a], vb, [trunk_of[n][1] for n in names_b],
                               claim.null, paired)
    preset = PRESETS[arm.runs[0].size]
    claim.scale = (f"at {_tokens_of(plan, pairs, spec.compare)} tokens, {preset['num_layers']} layers, "
                   f"{_seeds_text(claim.sample)}")
    if stability:
        compared = {arm.label: arm for a, b, _ in pairs for arm in (a, b)}.values()
        claim.best_lrs, edges = stability_grid(plan, scores, compared, tasks)
        if edges:
            claim.untestable = (f"not testable (best LR at the grid's edge for {'; '.join(edges)}: the loss on the "
                                "other side of it is unmeasured; widen the grid)")
            return claim
    if claim.sample.a.shape[-1] == 0 or not claim.sample.testable:
        claim.untestable = not_testable(len(set(claim.sample.seeds[0]) | set(claim.sample.seeds[1])))
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
    trunk_of = trunks(plan)
    found = ([_answer(table, spec, plan, scores, validation, evidence, trunk_of) for spec in table.claims]
             if table else [])
    tested = [c for c in found if c.sample is not None and not c.untestable]
    if tested:
        decided = decide([c.sample for c in tested])
        for i, c in enumerate(tested):
            c.difference, c.p_value = float(decided.difference[i]), float(decided.p_value[i])
            c.adjusted, c.decision = float(decided.adjusted[i]), int(decided.decision[i])
            c.level = float(decided.level[i])
            c.bounds = interval(c.sample, c.level)
            c.floor = at_floor(c.sample, c.level)
    for c in found:
        if c.sample is not None and c.untestable and c.sample.a.size and c.sample.b.size:
            c.difference = float(c.sample.test()[0])
    return found


def smallest_p_of(claim: Claim) -> float:
    return claim.sample.smallest_p if claim.sample is not None else math.nan


def significant(claim: Claim) -> bool:
    return claim.adjusted < LEVEL

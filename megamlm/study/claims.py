"""A paper's claims answered from a study's scores: for each claim of its table (``study.claims_table``), the
tests its comparison makes (signed: > 0 is the paper's direction), Welch's test with Holm's correction over the
section's tests, a verdict, and what in the study's setting could explain a departure."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from megamlm.eval.metrics import SIGNIFICANCE, Comparison, compare, holm
from megamlm.model.config import PRESETS
from megamlm.study.arms import Arm, arm_of_run, arms
from megamlm.study.claims_table import KIND_NAMES, ClaimSpec, ClaimsTable, load_claims
from megamlm.study.plan import Plan
from megamlm.study.schema import StudyError
from megamlm.study.scores import Scores, evaluated_steps_of, family_samples, stability
from megamlm.study.statistics import PRETRAINING_SEEDS, Sample, p_text, sample_values, test_basis

SUPPORTED, CONTRADICTED, MIXED, UNDECIDED = ("supported", "contradicted", "mixed",
                                             "not distinguishable at this scale")
@dataclass
class Test:
    """One comparison of a claim: ``difference`` is signed so that > 0 is the paper's direction."""
    what: str
    family: str
    basis: str
    comparison: Comparison
    adjusted: float = math.nan


@dataclass
class Claim:
    key: str
    statement: str
    tests: list[Test]
    setting: str
    """What in this study's setting could explain a departure from the paper (filled from its settings)."""
    absent: str = ""
    """Why the study cannot ask this claim (no arms for it); empty when it can."""
    matches: bool = False
    """A claim of "matches or beats": a difference that is not distinguishable is consistent with it."""

    def verdict(self) -> str:
        tested = [t for t in self.tests if t.comparison.tested]
        favour = any(t.adjusted < SIGNIFICANCE and t.comparison.difference > 0 for t in tested)
        against = any(t.adjusted < SIGNIFICANCE and t.comparison.difference < 0 for t in tested)
        if favour and against:
            return MIXED
        return SUPPORTED if favour else CONTRADICTED if against else UNDECIDED


def _tokens(value: float) -> str:
    return f"{value / 1e9:,.1f}B" if value >= 1e8 else f"{value / 1e6:,.2f}M"


def _pair(a: dict[str, Sample], b: dict[str, Sample], what: str, family: str) -> Test | None:
    """mean(a) - mean(b) on one family, over the basis the two arms allow."""
    if family not in a or family not in b:
        return None
    basis = test_basis(a, b)
    va, vb = sample_values(a[family], basis), sample_values(b[family], basis)
    if not va or not vb:
        return None
    return Test(what, family, basis, compare(va, vb))


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
            "ft_examples": (e.max_train_examples or "all") if e else "all", "seeds": len(plan.study.seeds)}


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


def _differences(plan: Plan, scores: Scores, a: Arm, b: Arm, what: str, step: int | None = None) -> list[Test]:
    sa, sb = family_samples(plan, scores, a, step), family_samples(plan, scores, b, step)
    return [t for f in scores.families if (t := _pair(sa, sb, what, f))]


def _answer(table: ClaimsTable, spec: ClaimSpec, plan: Plan, scores: Scores, validation) -> Claim:
    """One claim's tests and setting (empty, with the reason, where the study has no arms to ask it)."""
    a_name, b_name = KIND_NAMES[spec.a], KIND_NAMES[spec.b]
    none = f"no {' and '.join(sorted((a_name, b_name)))} arm of one size, budget and mask ratio"
    tests: list[Test] = []
    if spec.compare == "continuation":
        cpt = _continuation_pairs(plan, spec)
        for from_a, from_b, _ in cpt:
            tests += _differences(plan, scores, from_a, from_b, f"{from_a.label} − {from_b.label}")
        if not cpt:
            return Claim(spec.key, spec.statement, tests, "", f"no {KIND_NAMES[spec.objective]} continuations of "
                         f"both {a_name} and {b_name} arms with the same steps", spec.matches)
        parent = arm_of_run(plan)[cpt[0][1].runs[0].continues]
        steps = ", ".join(sorted({f"{s:,}" for *_, s in cpt}))
        return Claim(spec.key, spec.statement, tests, _fill(table, spec, plan, parent, cpt=steps), "", spec.matches)
    pairs = _arm_pairs(plan, spec)
    if not pairs:
        return Claim(spec.key, spec.statement, tests, "", none, spec.matches)
    extra: dict = {}
    if spec.compare == "final":
        for a, b in pairs:
            tests += _differences(plan, scores, a, b, f"{a.label} − {b.label}")
        splits = [arm for pair in pairs for arm in pair if arm.kind == "clm_then_mlm"]
        extra["mlm_phase"] = ", ".join(f"{p:,}" for p in sorted({s.runs[0].train_iters - s.runs[0].switch_step
                                                                   for s in splits}))
    elif spec.compare == "early":
        early = None
        for a, b in pairs:
            steps = sorted(set(evaluated_steps_of(plan, a)) & set(evaluated_steps_of(plan, b)))
            steps = [s for s in steps if s < a.runs[0].train_iters]
            if steps:
                early = steps[0]
                tests += _differences(plan, scores, a, b, f"{a.label} − {b.label} at step {early:,}", early)
        if early is None:
            return Claim(spec.key, spec.statement, tests, "", "no checkpoint of both arms evaluated before the end "
                         "(evaluation.checkpoint_steps)", spec.matches)
        extra = {"early": early, "early_tokens": _tokens(early * pairs[0][0].runs[0].tokens_per_step)}
    else:  # stability: b's loss minus a's, > 0 when a loses less away from its best LR
        losses = stability(plan, scores)
        for a, b in pairs:
            for family in scores.families:
                la, lb = losses.get(a.label, {}).get(family), losses.get(b.label, {}).get(family)
                if la and lb:
                    tests.append(Test(f"stability loss {b.label} − {a.label}", family, PRETRAINING_SEEDS,
                                      compare(lb, la)))
        e = plan.study.evaluation
        if e is None or len(e.lrs) < 2:
            return Claim(spec.key, spec.statement, tests, _fill(table, spec, plan, pairs[0][1]),
                         "a single fine-tuning learning rate", spec.matches)
    setting = _fill(table, spec, plan, pairs[0][1], **extra)
    if spec.validation_facts:
        setting += _validation_facts(validation, [arm for a, b in pairs for arm in (b, a)])
    return Claim(spec.key, spec.statement, tests, setting, "", spec.matches)


def study_claims(plan: Plan) -> ClaimsTable | None:
    """The claims table the study names (its ``claims`` key), or None."""
    study = plan.study
    return load_claims(study.resolve(study.claims)) if study.claims else None


def claims(plan: Plan, scores: Scores, validation: dict[str, dict[str, Sample]] | None = None,
           table: ClaimsTable | None = None) -> list[Claim]:
    """The claims of ``table`` (default: the study's), each with its tests, Holm-adjusted together over every test
    of the section. ``validation`` (arm label -> metric -> values, the report's final validation table) adds the
    MLM-trained arms' final validation MLM accuracy to the settings that ask for it."""
    table = table or study_claims(plan)
    found = [_answer(table, spec, plan, scores, validation) for spec in table.claims] if table else []
    every = [t for c in found for t in c.tests]
    adjusted = holm([t.comparison.p_value for t in every]) if every else []
    for test, p in zip(every, adjusted):
        test.adjusted = p
    return found


def _test_line(t: Test, rehearsal: bool) -> str:
    c = t.comparison
    if rehearsal:
        return f"{t.what}, {t.family}: {c.difference:+.2f}"
    if not c.tested:
        why = "fewer than 2 values in an arm" if min(c.n_a, c.n_b) < 2 else "no spread in either arm"
        return f"{t.what}, {t.family}: {c.difference:+.2f} (n/a: {why})"
    mark = " **significant**" if t.adjusted < SIGNIFICANCE else ""
    return (f"{t.what}, {t.family}: {c.difference:+.2f} [{c.difference - c.half_width:+.2f}, "
            f"{c.difference + c.half_width:+.2f}], {p_text(t.adjusted)}{mark} (over {t.basis})")


def claims_section(plan: Plan, scores: Scores, rehearsal: bool = False,
                   validation: dict[str, dict[str, Sample]] | None = None) -> str:
    """The section answering the study's claims table with the numbers; in a rehearsal, the differences only."""
    table = study_claims(plan)
    found = claims(plan, scores, validation, table)
    if not any(c.tests for c in found):
        return ""
    n = sum(len(c.tests) for c in found)
    if rehearsal:
        head = ("Each claim of the paper with the differences this rehearsal measured (signed so that > 0 is the "
                "paper's direction), untested: a rehearsal of the pipeline answers none of them.")
    else:
        head = (f"Each claim of the paper ({table.paper}), tested on the downstream scores per task family "
                "(test mean at the best LR, averaged over the family's tasks). Each line: the difference of means "
                "signed so that > 0 is the paper's direction, its 95% interval (Welch-Satterthwaite), the p-value "
                f"of Welch's two-sided t-test adjusted with Holm's method over the section's {n} tests; "
                f"**significant** = adjusted p < {SIGNIFICANCE}. A claim is *supported* where some test is "
                "significant in the paper's direction and none against it, *contradicted* where some is "
                "significant against it and none for it, *mixed* where both, and *not distinguishable at this "
                "scale* where none is. The stability loss is the test score at the best LR minus the mean at the "
                "grid's other LRs.")
    lines = [head, ""]
    for claim in found:
        title = f"**({claim.key}) {claim.statement}**"
        if claim.absent or not claim.tests:
            lines += [f"- {title}: not asked by this study ({claim.absent or 'no scores yet'}).", ""]
            continue
        verdict = "" if rehearsal else f": {claim.verdict()}"
        lines.append(f"- {title}{verdict}.")
        lines += [f"  - {_test_line(t, rehearsal)}" for t in claim.tests]
        if not rehearsal and claim.verdict() != SUPPORTED:
            lines.append(f"  - What in this setting could explain it: {claim.setting}")
            if claim.matches and claim.verdict() == UNDECIDED:
                lines.append("  - Not distinguishable is consistent with \"matches\", which a difference test "
                             "cannot establish on its own.")
        lines.append("")
    return "\n".join(lines)

"""The paper's claims (arXiv 2507.00994), each answered from a study's scores with Welch's test and Holm's
correction over the section's tests."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from megamlm.eval.metrics import SIGNIFICANCE, Comparison, compare, holm
from megamlm.model.config import PRESETS
from megamlm.study.arms import Arm, arm_of_run, arms
from megamlm.study.plan import Plan
from megamlm.study.scores import Scores, evaluated_steps_of, family_samples, stability
from megamlm.study.statistics import PRETRAINING_SEEDS, Sample, p_text, sample_values, test_basis

SUPPORTED, CONTRADICTED, MIXED, UNDECIDED = ("supported", "contradicted", "mixed",
                                             "not distinguishable at this scale")
PAPER = {"sizes": "210m, 610m and 1b parameters (12-26 layers, hidden 768-1,728)", "steps": 42_000,
         "tokens_per_step": 1_152 * 2_048, "early_steps": 5_000, "ft_lrs": 6, "ft_seeds": 5,
         "ft_steps": "1,000 steps (token classification: one epoch)", "cpt_steps": "2,000 to 22,000"}


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
    run = arm.runs[0]
    preset = PRESETS[run.size]
    e = plan.study.evaluation
    ft_steps = (e.hyperparameters.max_steps if e else None) or "the protocol's"
    return {"size": run.size, "layers": preset["num_layers"], "hidden": preset["hidden_size"],
            "steps": run.train_iters, "tokens_per_step": run.tokens_per_step,
            "tokens": _tokens(run.tokens_per_step * run.train_iters),
            "paper_tokens": _tokens(PAPER["steps"] * PAPER["tokens_per_step"]),
            "lrs": ", ".join(f"{lr:g}" for lr in (e.lrs if e else [])), "n_lrs": len(e.lrs) if e else 0,
            "n_ft_seeds": len(e.seeds) if e else 0, "ft_steps": ft_steps,
            "ft_examples": (e.max_train_examples or "all") if e else "all", "seeds": len(plan.study.seeds)}


SETTINGS = {
    "a": ("The paper's MLM lead is measured at the end of {paper_steps:,} steps of {paper_tps:,} tokens "
          "({paper_tokens} tokens) with {paper_sizes}. This study's {steps:,} steps of {tokens_per_step:,} tokens "
          "({tokens} tokens) with the {size} preset ({layers} layers, hidden {hidden}) end long before that, in the "
          "regime where the paper itself finds CLM ahead (its {paper_early:,}-step models, claim b): a model this "
          "small and this briefly trained can leave MLM level with CLM or behind it."),
    "b": ("The paper finds CLM ahead early (its 610m models at {paper_early:,} steps, {paper_early_tokens} tokens); "
          "here early is step {early:,} of {steps:,} ({early_tokens} tokens). If both objectives are still near the "
          "unigram plateau at that step, or the {ft_steps} fine-tuning steps lift every model to the same level, the "
          "early gap does not show; {seeds} pretraining seeds detect only a large one."),
    "c": ("The paper compares its CLM-then-MLM splits with MLM at {paper_steps:,} steps ({paper_tokens} tokens); here "
          "at {steps:,} steps ({tokens} tokens) with the {size} preset, where the MLM phase after the switch is "
          "{mlm_phase} steps, and {seeds} pretraining seeds detect only a large difference."),
    "d": ("The paper continues its {paper_steps:,}-step models by {paper_cpt} MLM steps; here the parents trained "
          "{steps:,} steps ({tokens} tokens) with the {size} preset and the continuations {cpt} steps. A parent this "
          "far from convergence gains from any further training, which can hide the difference between the parents' "
          "objectives."),
    "e": ("The paper's stability claim rests on {paper_lrs} learning rates and {paper_ft_seeds} fine-tuning seeds at "
          "{paper_ft_steps}; here {n_lrs} learning rates ({lrs}) and {n_ft_seeds} seeds at {ft_steps} steps on "
          "{ft_examples} training examples. With so short a fine-tuning the grid's LRs may all reach the same "
          "score (no loss to compare) or all but the largest stay under-trained, whatever the pretraining."),
}


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


def _fill(key: str, plan: Plan, arm: Arm, **extra) -> str:
    values = {**_setting(plan, arm), "paper_steps": PAPER["steps"], "paper_tps": PAPER["tokens_per_step"],
              "paper_sizes": PAPER["sizes"], "paper_early": PAPER["early_steps"],
              "paper_early_tokens": _tokens(PAPER["early_steps"] * PAPER["tokens_per_step"]),
              "paper_lrs": PAPER["ft_lrs"], "paper_ft_seeds": PAPER["ft_seeds"], "paper_ft_steps": PAPER["ft_steps"],
              "paper_cpt": PAPER["cpt_steps"], **extra}
    return SETTINGS[key].format(**values)


STATEMENTS = {"a": "MLM beats CLM at the end of pretraining",
              "b": "CLM is ahead early in pretraining",
              "c": "CLM-then-MLM matches or beats MLM at equal steps",
              "d": "continuing (MLM) from CLM beats continuing from MLM",
              "e": "CLM fine-tunes more stably across learning rates"}


def claims(plan: Plan, scores: Scores, validation: dict[str, dict[str, Sample]] | None = None) -> list[Claim]:
    """The paper's claims (a)-(e), each with its tests (signed: > 0 is the paper's direction), Holm-adjusted
    together over every test of the section. ``validation`` (arm label -> metric -> values, the report's final
    validation table) adds the MLM arms' final validation MLM accuracy to the setting of (a) and (c)."""
    all_arms = arms(plan)
    groups: dict[tuple, dict[str, list[Arm]]] = defaultdict(lambda: defaultdict(list))
    for arm in all_arms:
        if arm.kind != "continuation":
            groups[arm.group][arm.kind].append(arm)
    pairs = [(g["clm"][0], g["mlm"][0], g) for g in groups.values() if g["clm"] and g["mlm"]]
    out: dict[str, Claim] = {}
    none = "no CLM and MLM arm of one size, budget and mask ratio"

    tests = []
    for clm, mlm, _ in pairs:
        a, b = family_samples(plan, scores, mlm), family_samples(plan, scores, clm)
        tests += [t for f in scores.families if (t := _pair(a, b, f"{mlm.label} − {clm.label}", f))]
    out["a"] = Claim("a", STATEMENTS["a"], tests,
                     _fill("a", plan, pairs[0][0]) + _validation_facts(validation, [m for _, m, _ in pairs])
                     if pairs else "",
                     "" if pairs else none)

    tests, early = [], None
    for clm, mlm, _ in pairs:
        steps = sorted(set(evaluated_steps_of(plan, clm)) & set(evaluated_steps_of(plan, mlm)))
        steps = [s for s in steps if s < clm.runs[0].train_iters]
        if not steps:
            continue
        early = steps[0]
        a, b = family_samples(plan, scores, clm, early), family_samples(plan, scores, mlm, early)
        tests += [t for f in scores.families
                  if (t := _pair(a, b, f"{clm.label} − {mlm.label} at step {early:,}", f))]
    out["b"] = Claim("b", STATEMENTS["b"], tests,
                     _fill("b", plan, pairs[0][0], early=early or 0,
                           early_tokens=_tokens((early or 0) * pairs[0][0].runs[0].tokens_per_step))
                     if pairs and early else "",
                     "" if early else (none if not pairs else "no checkpoint of both arms evaluated before the end "
                                       "(evaluation.checkpoint_steps)"))

    tests, split_pairs = [], [(s, mlm) for _, mlm, g in pairs for s in g["clm_then_mlm"]]
    for split, mlm in split_pairs:
        a, b = family_samples(plan, scores, split), family_samples(plan, scores, mlm)
        tests += [t for f in scores.families if (t := _pair(a, b, f"{split.label} − {mlm.label}", f))]
    phases = sorted({s.runs[0].train_iters - s.runs[0].switch_step for s, _ in split_pairs})
    mlm_phase = ", ".join(f"{p:,}" for p in phases)
    out["c"] = Claim("c", STATEMENTS["c"], tests,
                     _fill("c", plan, split_pairs[0][1], mlm_phase=mlm_phase)
                     + _validation_facts(validation, [a for split, mlm in split_pairs for a in (mlm, split)])
                     if split_pairs else "",
                     "" if split_pairs else "no CLM-then-MLM arm beside an MLM arm of its budget", matches=True)

    by_parent: dict[tuple, dict[str, Arm]] = defaultdict(dict)
    by_run = arm_of_run(plan)
    for arm in all_arms:
        if arm.kind == "continuation" and arm.runs[0].objective == "mlm":
            parent = by_run[arm.runs[0].continues]
            if parent.kind in ("clm", "mlm"):
                by_parent[(parent.group, arm.runs[0].train_iters)][parent.kind] = arm
    cpt = [(g["clm"], g["mlm"], steps) for (_, steps), g in by_parent.items() if "clm" in g and "mlm" in g]
    tests = []
    for from_clm, from_mlm, _ in cpt:
        a, b = family_samples(plan, scores, from_clm), family_samples(plan, scores, from_mlm)
        tests += [t for f in scores.families if (t := _pair(a, b, f"{from_clm.label} − {from_mlm.label}", f))]
    parent_of = (lambda arm: by_run[arm.runs[0].continues])
    out["d"] = Claim("d", STATEMENTS["d"], tests,
                     _fill("d", plan, parent_of(cpt[0][0]), cpt=", ".join(sorted({f"{s:,}" for *_, s in cpt})))
                     if cpt else "", "" if cpt else "no MLM continuations of both a CLM and an MLM arm with the "
                     "same steps")

    losses = stability(plan, scores)
    tests = []
    for clm, mlm, _ in pairs:
        for family in scores.families:
            a, b = losses.get(mlm.label, {}).get(family), losses.get(clm.label, {}).get(family)
            if a and b:  # MLM's loss minus CLM's: > 0 when CLM loses less away from its best LR
                tests.append(Test(f"stability loss {mlm.label} − {clm.label}", family, PRETRAINING_SEEDS,
                                  compare(a, b)))
    lr_grid = plan.study.evaluation is not None and len(plan.study.evaluation.lrs) >= 2
    out["e"] = Claim("e", STATEMENTS["e"], tests, _fill("e", plan, pairs[0][0]) if pairs else "",
                     "" if pairs and lr_grid else (none if not pairs else "a single fine-tuning learning rate"))

    every = [t for c in out.values() for t in c.tests]
    adjusted = holm([t.comparison.p_value for t in every]) if every else []
    for test, p in zip(every, adjusted):
        test.adjusted = p
    return list(out.values())


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
    """The section answering the paper's claims (a)-(e) with the numbers; in a rehearsal, the differences only."""
    found = claims(plan, scores, validation)
    if not any(c.tests for c in found):
        return ""
    n = sum(len(c.tests) for c in found)
    if rehearsal:
        head = ("Each claim of the paper with the differences this rehearsal measured (signed so that > 0 is the "
                "paper's direction), untested: a rehearsal of the pipeline answers none of them.")
    else:
        head = ("Each claim of the paper (arXiv 2507.00994), tested on the downstream scores per task family "
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

"""The report's section answering a paper's claims (``claims.py``): the rules it applies, generated from their
declarations (``evidence/rules.py``), then per claim the verdict with the scale it was reached at, the
pre-registered test with its Holm-step interval, its unit (seed means permuted, or signs flipped within seed) and
whether it sits at the permutation floor, the descriptive per-family differences, and what in the study's setting
could explain a departure; in a rehearsal, the differences only."""

from __future__ import annotations

import dataclasses

from megamlm.eval.aggregate import TIE_RULES
from megamlm.study.evidence.claims import (
    SUPPORTED,
    UNDECIDED,
    Claim,
    Evidence,
    claims,
    significant,
    smallest_p_of,
    study_claims,
)
from megamlm.study.evidence.rules import FRAGILE, LEVEL, rules_text
from megamlm.study.evidence.scores import Scores
from megamlm.study.evidence.statistics import Sample, p_text
from megamlm.study.planning.plan import Plan


def _points(value: float) -> str:
    return f"{value:g} point{'s' if value != 1 else ''}"


def _exclusions(evidence: Evidence, scores: Scores) -> str:
    if not evidence.excluded:
        return (f"Every task ({', '.join(sorted(scores.family_of))}) is in the claim tests: none is marked "
                "uninformative.")
    named = "; ".join(f"{task} ({why})" for task, why in sorted(evidence.excluded.items()))
    return f"Left out of every claim test: {named}."


def _units(c: Claim) -> str:
    """The test's units and how it rearranges them."""
    s = c.sample
    seeds = lambda side: ", ".join(map(str, side))  # noqa: E731
    if s.paired:
        return (f"{s.a.shape[-1]} seeds paired ({seeds(s.seeds[0])}): a trunk has models on both sides, so the "
                f"{s.design}")
    return (f"seeds {seeds(s.seeds[0])} against {seeds(s.seeds[1])}, each side's models averaged per seed of their "
            f"trunk; {s.design}")


def _test_line(c: Claim) -> str:
    if c.untestable and c.sample is not None and c.sample.a.size and c.sample.b.size and not c.best_lrs:
        return (f"{c.what}: {c.difference:+.2f}, untested: {_units(c)}, which give no p-value below "
                f"{smallest_p_of(c):.3f}, so no outcome could be significant at {LEVEL:g}.")
    if c.untestable:
        reason = c.untestable.removeprefix("not testable ").strip()
        if reason.startswith("(") and reason.endswith(")"):
            reason = reason[1:-1]  # the verdict's own parentheses: one pair here
        return f"{c.what}: untested ({reason})."
    low, high = c.bounds
    null = f", against the margin: H0 difference = {c.null:+.2f}" if c.matches else ""
    mark = " **significant**" if significant(c) else ""
    floor = (f" At the permutation floor: its Holm step's level ({c.level:.4f}) is reached only by the smallest "
             f"p-value its seeds allow ({smallest_p_of(c):.4f}), every seed of one side beyond every seed of the "
             "other." if c.floor else "")
    test = "sign-flip" if c.sample.paired else "permutation"
    return (f"{c.what}: {c.difference:+.2f} [{low:+.2f}, {high:+.2f}] ({100 * (1 - c.level):.1f}% interval, its "
            f"Holm step's level){null}; {test} {p_text(c.p_value)}, Holm-adjusted {p_text(c.adjusted)}{mark}; "
            f"{_units(c)}.{floor}")


def claims_section(plan: Plan, scores: Scores, rehearsal: bool = False,
                   validation: dict[str, dict[str, Sample]] | None = None,
                   evidence: Evidence | None = None) -> str:
    """The section answering the study's claims table with the numbers; in a rehearsal, the differences only."""
    table = study_claims(plan)
    evidence = evidence or Evidence()
    by_rule = {rule: claims(plan, dataclasses.replace(scores, tie_rule=rule), validation, table, evidence)
               for rule in TIE_RULES}
    found = by_rule[scores.tie_rule]
    if not any(c.described or c.sample is not None or c.untestable for c in found):
        return ""
    if rehearsal:
        head = ("Each claim of the paper with the differences this rehearsal measured (signed so that > 0 is the "
                "paper's direction), untested: a rehearsal of the pipeline answers none of them.")
    else:
        tested = sum(c.sample is not None and not c.untestable for c in found)
        margin = (evidence.informative_margin if evidence.informative_margin is not None
                  else plan.study.evaluation.informative_margin)
        head = (rules_text(table.paper, tested, [(c.key, c.margin) for c in found if c.matches], margin) + "\n\n"
                + _exclusions(evidence, scores))
    lines = [head, ""]
    for i, claim in enumerate(found):
        title = f"**({claim.key}) {claim.statement}**"
        if claim.absent:
            lines += [f"- {title}: not asked by this study ({claim.absent}).", ""]
            continue
        if rehearsal:
            lines.append(f"- {title}.")
            lines += [f"  - {line}" for line in claim.described]
            lines.append("")
            continue
        verdicts = {rule: by_rule[rule][i].verdict() for rule in TIE_RULES}
        if len(set(verdicts.values())) > 1:
            lines.append(f"- {title}: {claim.scale}: **{FRAGILE}**: its verdict changes with the tie rule ("
                         + "; ".join(f"{rule}: {v}" for rule, v in verdicts.items()) + "), so it is not a finding.")
        else:
            lines.append(f"- {title}: {claim.scaled_verdict()}.")
        lines.append(f"  - Test: {_test_line(claim)}.".replace("..", "."))
        if claim.best_lrs:
            lines.append("  - Best LR in the grid (each arm's final models' mean validation score): "
                         + "; ".join(claim.best_lrs) + ".")
        if claim.described:
            lines.append("  - Per family (descriptive, untested): " + "; ".join(claim.described) + ".")
        if claim.verdict() != SUPPORTED:
            lines.append(f"  - What in this setting could explain it: {claim.setting}")
        if claim.matches and claim.verdict() == UNDECIDED:
            lines.append(f"  - Not shown to be within {_points(claim.margin)} of the other arms: \"matches\" is not "
                         "established, which is not evidence that it fails.")
        lines.append("")
    if not rehearsal:
        lines += [tie_rule_table(found, by_rule, scores.tie_rule), ""]
    return "\n".join(lines)


def tie_rule_table(found: list[Claim], by_rule: dict[str, list[Claim]], chosen: str) -> str:
    """Each asked claim's verdict and Holm-adjusted p under every tie rule, and whether the verdict holds."""
    head = ("Tie-rule sensitivity: where a model's fine-tuning LRs tie at the best validation mean, its score is read "
            f"at the smaller LR, the larger, or the mean over the tied LRs (the study file fixed `{chosen}` before the "
            "run). A claim whose verdict changes with the rule is *fragile*, not a finding.")
    lines = [head, "", "| claim | " + " | ".join(TIE_RULES) + " | verdict |", "|---|" + "---|" * (len(TIE_RULES) + 1)]
    for i, claim in enumerate(found):
        if claim.absent:
            continue
        cells = []
        for rule in TIE_RULES:
            c = by_rule[rule][i]
            cells.append(c.verdict() + (f" (Holm {c.adjusted:.3f})" if c.sample is not None and not c.untestable
                                        else ""))
        held = len({by_rule[rule][i].verdict() for rule in TIE_RULES}) == 1
        lines.append(f"| ({claim.key}) | " + " | ".join(cells) + f" | {'holds' if held else FRAGILE} |")
    return "\n".join(lines)

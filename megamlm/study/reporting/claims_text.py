"""The report's section answering a paper's claims (``claims.py``): the rules it applies, stated once, then per
claim the verdict, the pre-registered test with its Holm-step interval, the descriptive per-family differences,
and what in the study's setting could explain a departure; in a rehearsal, the differences only."""

from __future__ import annotations

from megamlm.eval.metrics import SIGNIFICANCE
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
from megamlm.study.evidence.scores import Scores
from megamlm.study.evidence.statistics import Sample, p_text
from megamlm.study.planning.plan import Plan


def _points(value: float) -> str:
    return f"{value:g} point{'s' if value != 1 else ''}"


def _rules(paper: str, tested: int, margins: list[Claim]) -> str:
    margin = "; ".join(f"({c.key}) {_points(c.margin)}" for c in margins)
    return (
        f"Each claim of the paper ({paper}) is one test, fixed before any score is read. A pretrained model's "
        "score is its test mean at each task's best LR averaged as the paper averages: over each family's "
        "informative tasks, then over the families. A claim compares the models of its first arms with those of "
        "the second (several arms on a side are pooled), signed so that > 0 is the paper's direction, with an "
        "exact two-sided permutation test over the models' labels: it holds its level whatever the scores' "
        "distribution (bimodal included) at any number of pretraining seeds, which Welch's t-test does not "
        "promise for scores that jump between two values. Holm's method runs over the "
        f"{tested} testable claim{'s' if tested != 1 else ''} (not over tasks); **significant** = Holm-adjusted "
        f"p < {SIGNIFICANCE}. Each interval is at the confidence of the Holm step that decided its claim "
        f"(1 − {SIGNIFICANCE}/m, m the claims still in play), so it excludes the null value exactly when the claim "
        "is significant. A claim is *supported* where its test is significant in the paper's direction, "
        "*contradicted* where against it, *not distinguishable at this scale* where neither, and *not testable "
        "with N seeds* where the permutation test cannot give p < 0.05 with the models it has (3 against 3: at "
        "best p = 0.1), whatever they score."
        + (f" A claim of \"matches or beats\" is a non-inferiority test with its table's margin ({margin}): the "
           "null is that the claimed arms are worse by the margin, and it is supported only when they are shown "
           "to be less than the margin worse; a difference that is merely not significant never counts as "
           "matching." if margins else "")
        + " The stability claim compares relative stability losses: (score at the best LR − mean at the grid's "
        "other LRs) / (score at the best LR − the random-init model's), clipped to [0, 1], and 1 for a model that "
        "does not beat the random-init model, so a model that learns nothing never looks stable (the plain loss "
        "is near 0 for any model at chance); without random-init scores it is not testable. The per-family "
        "differences under each claim are descriptive and untested.")


def _exclusions(evidence: Evidence, scores: Scores) -> str:
    if not evidence.excluded:
        return (f"Every task ({', '.join(sorted(scores.family_of))}) is in the claim tests: none is marked "
                "uninformative.")
    named = "; ".join(f"{task} ({why})" for task, why in sorted(evidence.excluded.items()))
    return f"Left out of every claim test: {named}."


def _test_line(c: Claim) -> str:
    if c.untestable and c.sample is not None:
        return (f"{c.what}: {c.difference:+.2f}, untested: {c.sample.a.size} against {c.sample.b.size} models give "
                f"no permutation p-value below {smallest_p_of(c):.3f}, so no outcome could be significant at "
                f"{SIGNIFICANCE}.")
    if c.untestable:
        return f"{c.what}: untested ({c.untestable.removeprefix('not testable ')})."
    low, high = c.bounds
    null = f", against the margin: H0 difference = {c.null:+.2f}" if c.matches else ""
    mark = " **significant**" if significant(c) else ""
    return (f"{c.what}: {c.difference:+.2f} [{low:+.2f}, {high:+.2f}] ({100 * (1 - c.level):.1f}% interval, its "
            f"Holm step's level){null}; permutation {p_text(c.p_value)}, Holm-adjusted {p_text(c.adjusted)}{mark}; "
            f"{c.sample.a.size} against {c.sample.b.size} models")


def claims_section(plan: Plan, scores: Scores, rehearsal: bool = False,
                   validation: dict[str, dict[str, Sample]] | None = None,
                   evidence: Evidence | None = None) -> str:
    """The section answering the study's claims table with the numbers; in a rehearsal, the differences only."""
    table = study_claims(plan)
    evidence = evidence or Evidence()
    found = claims(plan, scores, validation, table, evidence)
    if not any(c.described or c.sample is not None or c.untestable for c in found):
        return ""
    if rehearsal:
        head = ("Each claim of the paper with the differences this rehearsal measured (signed so that > 0 is the "
                "paper's direction), untested: a rehearsal of the pipeline answers none of them.")
    else:
        tested = sum(c.sample is not None and not c.untestable for c in found)
        head = (_rules(table.paper, tested, [c for c in found if c.matches]) + "\n\n"
                + _exclusions(evidence, scores))
    lines = [head, ""]
    for claim in found:
        title = f"**({claim.key}) {claim.statement}**"
        if claim.absent:
            lines += [f"- {title}: not asked by this study ({claim.absent}).", ""]
            continue
        if rehearsal:
            lines.append(f"- {title}.")
            lines += [f"  - {line}" for line in claim.described]
            lines.append("")
            continue
        lines.append(f"- {title}: {claim.verdict()}.")
        lines.append(f"  - Test: {_test_line(claim)}.".replace("..", "."))
        if claim.described:
            lines.append("  - Per family (descriptive, untested): " + "; ".join(claim.described) + ".")
        if claim.verdict() != SUPPORTED:
            lines.append(f"  - What in this setting could explain it: {claim.setting}")
        if claim.matches and claim.verdict() == UNDECIDED:
            lines.append(f"  - Not shown to be within {_points(claim.margin)} of the other arms: \"matches\" is not "
                         "established, which is not evidence that it fails.")
        lines.append("")
    return "\n".join(lines)

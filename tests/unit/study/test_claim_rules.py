"""The rules of the claims section (issues 32 and 45): an uninformative task is left out of every claim test and
named; non-significance never yields "matches" (only the non-inferiority test against the table's margin does); a
claim whose test cannot reach p < 0.05 says "not testable with N seeds"; the unit of every test is the seed of the
models' trunk (splits of one CLM run averaged into one value; sides sharing a trunk paired by seed); the stability
measure is an absolute loss, with no random-init model in it; intervals agree with the Holm-adjusted p-values."""

import numpy as np
import pytest
from test_evidence import BASELINE, PAPER, STUDY, write_results

from megamlm.study.evidence.claims import NO_TASK, SUPPORTED, UNDECIDED, Evidence, claims
from megamlm.study.evidence.decision import FAVOUR, NEITHER, ClaimSample, decide, holm_levels, interval
from megamlm.study.evidence.scores import Scores, models_at
from megamlm.study.planning.arms import arms
from megamlm.study.planning.claims_table import load_claims
from megamlm.study.planning.schema import StudyError
from megamlm.study.reporting.claims_text import claims_section

UNINFORMATIVE = {"rt-sentiment": "uninformative: no arm beats the random-init model"}


def claim(plan, scores, key, evidence=BASELINE):
    return next(c for c in claims(plan, scores, evidence=evidence) if c.key == key)


def shift(plan, scores, kind, task, by):
    """Move every final model of the arms of ``kind`` by ``by`` (a value, or per pretraining seed) on ``task``."""
    for arm in (a for a in arms(plan) if a.kind == kind):
        for seed, model in models_at(plan, arm):
            add = by(seed) if callable(by) else by
            lrs = scores.by_lr[model][task]
            scores.by_lr[model][task] = {lr: (v + add, t + add) for lr, (v, t) in lrs.items()}


def test_an_uninformative_task_is_left_out_of_every_claim_test(small_plan):
    plan = small_plan(STUDY)
    scores = write_results(plan, **PAPER)
    shift(plan, scores, "clm", "rt-sentiment", 40.0)  # CLM 30 points above MLM on the uninformative task
    assert claim(plan, scores, "a").difference == pytest.approx(-10.0)  # (+10 - 30) / 2 families with it
    excluded = Evidence(excluded=UNINFORMATIVE)
    a = claim(plan, scores, "a", excluded)
    assert a.difference == pytest.approx(10.0) and a.verdict() == SUPPORTED  # brown-pos alone
    mlm = next(arm for arm in arms(plan) if arm.kind == "mlm")
    by_hand = sorted(scores.task_score(m, "brown-pos") for _, m in models_at(plan, mlm))
    assert sorted(a.sample.a) == pytest.approx(by_hand)
    assert not any("sequence classification" in line for line in a.described)
    text = claims_section(plan, scores, evidence=excluded)
    assert ("Left out of every claim test: rt-sentiment (uninformative: no arm beats the random-init model)."
            in text)
    everything = Evidence(excluded={t: "uninformative" for t in ("brown-pos", "rt-sentiment")})
    assert {c.verdict() for c in claims(plan, scores, evidence=everything)} == {NO_TASK}


def test_non_significance_never_yields_matches():
    """A split with a huge spread over seeds and the same mean as MLM: nothing is significant, so no verdict;
    "matches" needs the non-inferiority test to reject a difference of −margin."""
    b = np.array([50.0, 50.1, 49.9, 50.2, 49.8])
    a = np.array([5.0, 95.0, 10.0, 90.0, 50.0])
    decided = decide([ClaimSample(a, b, 0.0), ClaimSample(a, b, -1.0)])
    assert list(decided.decision) == [NEITHER, NEITHER]
    # the same mean within a tight spread is shown to be within the margin: that, and only that, is "matches"
    tight = decide([ClaimSample(b + 0.05, b, -1.0)])
    assert list(tight.decision) == [FAVOUR]


def test_a_split_of_huge_variance_is_not_reported_as_matching(small_plan):
    plan = small_plan(STUDY)
    scores = write_results(plan, **{**PAPER, "final": {**PAPER["final"], "clm_then_mlm": 80.0}})
    for task in ("brown-pos", "rt-sentiment"):
        shift(plan, scores, "clm_then_mlm", task, lambda seed: {1: -40, 2: 40, 3: -30, 4: 30, 5: 0}[seed])
    c = claim(plan, scores, "c")
    assert c.verdict() == UNDECIDED and c.adjusted >= 0.05
    assert "Not shown to be within 1 point of the other arms" in claims_section(plan, scores, evidence=BASELINE)


def test_a_matches_claim_states_its_margin(tmp_path):
    table = tmp_path / "t.yaml"
    row = "  - {key: c, statement: A matches B, compare: final, a: clm, b: mlm, setting: s%s}\n"
    table.write_text("paper: p\nclaims:\n" + row % ", matches: true")
    with pytest.raises(StudyError, match="claim c is a claim of \"matches or beats\" without a margin"):
        load_claims(table)
    table.write_text("paper: p\nclaims:\n" + row % ", margin: 1.0")
    with pytest.raises(StudyError, match="gives a margin \\(1\\) but is not a claim of \"matches or beats\""):
        load_claims(table)
    table.write_text("paper: p\nclaims:\n" + row % ", matches: true, margin: 1.0")
    assert load_claims(table).claims[0].margin == 1.0


def test_three_seeds_against_three_are_not_testable(small_plan):
    assert not ClaimSample(np.zeros(3), np.ones(3)).testable  # at best p = 2 / 20
    assert ClaimSample(np.zeros(5), np.ones(5)).testable and ClaimSample(np.zeros(9), np.ones(3)).testable
    plan = small_plan({**STUDY, "seeds": [1, 2, 3]})
    found = {c.key: c for c in claims(plan, write_results(plan, **PAPER), evidence=BASELINE)}
    assert {c.verdict() for c in found.values()} == {"not testable with 3 seeds"}
    assert found["a"].difference == pytest.approx(10.0)
    text = claims_section(plan, write_results(plan, **PAPER), evidence=BASELINE)
    assert "**(a) MLM beats CLM at the end of pretraining**: at 0.05M tokens, 4 layers, 3 seeds: not testable " \
           "with 3 seeds." in text
    assert ("seeds 1, 2, 3 against 1, 2, 3, each side's models averaged per seed of their trunk; seed means permuted "
            "between the sides, which give no p-value below 0.100") in text


def test_the_stability_loss_is_absolute_points_from_the_best_lr():
    """(e)'s measure: the test score at the best LR (by validation) minus the mean at the grid's other LRs, in points;
    no gain over a random-init model enters it, so a model that learns less is not thereby less stable."""
    results = []
    for model, by_lr in (("m", {1e-3: 70.0, 3e-3: 80.0, 1e-2: 60.0}), ("weak", {1e-3: 51.0, 3e-3: 55.0, 1e-2: 49.0})):
        for lr, score in by_lr.items():
            results.append({"model": model, "task": "t", "lr": lr, "seed": 0, "family": "f",
                            "validation": {"score": score}, "test": {"score": score}})
    scores = Scores.of(results)
    assert scores.task_stability_loss("m", "t") == pytest.approx(15.0)  # 80 - (70 + 60) / 2
    assert scores.task_stability_loss("weak", "t") == pytest.approx(5.0)  # learns less, loses less: more stable
    assert not hasattr(scores, "relative_stability_loss") and not hasattr(Evidence(), "random_init")


def test_splits_of_one_trunk_are_one_unit_and_a_shared_trunk_pairs_the_sides(small_plan, tmp_path):
    """(c) pools 25% and 50% splits: each seed's two splits (branched from that seed's CLM run) are averaged into
    one value, 5 seed means against MLM's 5. A claim of the splits against the CLM runs they branch from shares
    every trunk: the sides are paired by seed and signs are flipped, and 5 pairs cannot reach p < 0.05."""
    plan = small_plan({**STUDY, "grids": [{"budgets": [100], "clm_fractions": [0, 0.25, 0.5, 1]}]})
    scores = write_results(plan, **PAPER)
    split = next(arm for arm in arms(plan) if arm.label == "tiny-clm25-mlm75-m40")
    for _, model in models_at(plan, split):  # the 25% split 4 points above the 50% one on every seed
        for task in ("brown-pos", "rt-sentiment"):
            scores.by_lr[model][task] = {lr: (v + 4, t + 4) for lr, (v, t) in scores.by_lr[model][task].items()}
    c = claim(plan, scores, "c")
    assert c.sample.a.shape == (5,) and c.sample.seeds == ((1, 2, 3, 4, 5), (1, 2, 3, 4, 5)) and not c.sample.paired
    by_seed = [sum(scores.claim_score(m, ["brown-pos", "rt-sentiment"]) for s, m in
                   models_at(plan, arm) if s == seed) for seed in range(1, 6)
               for arm in [a for a in arms(plan) if a.kind == "clm_then_mlm"]]
    assert sorted(c.sample.a) == pytest.approx(sorted(
        (by_seed[2 * i] + by_seed[2 * i + 1]) / 2 for i in range(5)))
    table = tmp_path / "paired.yaml"
    table.write_text("paper: p\nclaims:\n  - {key: s, statement: splits match CLM, compare: final, a: clm_then_mlm, "
                     "b: clm, setting: s}\n")
    [s] = claims(plan, scores, table=load_claims(table))
    assert s.sample.paired and s.sample.a.shape == s.sample.b.shape == (5,)
    assert s.verdict() == "not testable with 5 seeds" and s.sample.smallest_p == pytest.approx(2 / 32)
    six = small_plan({**STUDY, "seeds": [1, 2, 3, 4, 5, 6], "claims": str(table)})
    [s] = claims(six, write_results(six, **PAPER))
    assert s.sample.paired and s.verdict() == SUPPORTED  # 15 points above CLM on all 6 seeds: p = 2/64
    text = claims_section(six, write_results(six, **PAPER))
    assert "6 seeds paired (1, 2, 3, 4, 5, 6): a trunk has models on both sides, so the sign of each seed's " \
           "difference flipped" in text and "sign-flip p = 0.031" in text


def test_each_interval_excludes_the_null_exactly_when_its_holm_adjusted_p_is_significant():
    rng = np.random.default_rng(3)
    for _ in range(40):
        samples = [ClaimSample(rng.normal(rng.choice([0, 1, 3]), 1, 5), rng.normal(0, 1, 5), null)
                   for null in (0.0, 0.0, -1.0, 0.0)]
        decided = decide(samples)
        for i, s in enumerate(samples):
            low, high = interval(s, decided.level[i])
            assert (not low <= s.null <= high) == (decided.adjusted[i] < 0.05)
    assert holm_levels(np.array([0.001, 0.02, 0.5, np.nan, 0.012])) == pytest.approx(
        [0.0125, 0.025, 0.05, np.nan, 0.05 / 3], nan_ok=True)

"""The claims section's decision rule (``megamlm/study/evidence/decision.py``: one permutation test per claim, Holm
over the claims, "matches" by non-inferiority) holds its error rate under the score distributions studies produce: 2,000
simulated reports per case, under a normal null and a two-point null (each model scores 27 or 93 at random, the
same odds in every arm), at 3 and 5 pretraining seeds. A report's five claims mirror the paper's table: (a), (b),
(d) and (e) compare one arm's models with another's (null: no difference), (c) pools three CLM-then-MLM splits
against MLM with a 1-point margin (null: the splits are worse by exactly the margin, the boundary of
non-inferiority). At most 5% of reports may give any claim a verdict, plus three simulation standard errors. And
the rule is not merely silent: with a large true effect at 5 seeds it gives the right verdicts."""

import math

import numpy as np
import pytest

from megamlm.study.evidence.decision import AGAINST, FAVOUR, NEITHER, ClaimSample, decide

REPORTS = 2_000
MARGIN = 1.0
ALLOWED = 0.05 + 3 * math.sqrt(0.05 * 0.95 / REPORTS)  # 5% plus three simulation standard errors: 0.065


def normal(rng, shape):
    return rng.normal(60.0, 5.0, shape)


def two_point(rng, shape):
    return np.where(rng.random(shape) < 0.5, 27.0, 93.0)


def reports(draw, seeds: int, rng, effect: float = 0.0, margin_shift: float = -MARGIN) -> list[ClaimSample]:
    """One ClaimSample per claim, each holding ``REPORTS`` simulated studies on its leading axis. ``effect``: how
    far the paper's arms lie ahead in (a), (b), (d), (e); (c)'s splits lie ``margin_shift`` from MLM."""
    pairs = [ClaimSample(draw(rng, (REPORTS, seeds)) + effect, draw(rng, (REPORTS, seeds))) for _ in range(4)]
    splits = ClaimSample(draw(rng, (REPORTS, 3 * seeds)) + margin_shift, draw(rng, (REPORTS, seeds)), -MARGIN)
    return [pairs[0], pairs[1], splits, pairs[2], pairs[3]]


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("draw", [normal, two_point], ids=["normal", "two-point"])
def test_under_the_null_at_most_5_percent_of_reports_give_any_claim_a_verdict(draw, seeds):
    rng = np.random.default_rng(1000 + seeds)
    decided = decide(reports(draw, seeds, rng))
    assert decided.decision.shape == (REPORTS, 5)
    any_verdict = (decided.decision != NEITHER).any(axis=1).mean()
    assert any_verdict <= ALLOWED, f"{any_verdict:.3f} of reports gave a verdict under the null"
    if seeds == 3:  # 3 models against 3: never testable; only the pooled (c), 9 against 3, is tested
        assert np.isnan(decided.p_value[:, [0, 1, 3, 4]]).all() and not np.isnan(decided.p_value[:, 2]).any()


@pytest.mark.parametrize("draw", [normal, two_point], ids=["normal", "two-point"])
def test_a_split_equal_to_mlm_is_not_called_worse(draw):
    """With no difference at all, (c) may find "matches" but must not contradict it more than 2.5% of the time."""
    rng = np.random.default_rng(7)
    decided = decide(reports(draw, 5, rng, margin_shift=0.0))
    assert (decided.decision[:, 2] == AGAINST).mean() <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / REPORTS)


def test_a_large_effect_at_5_seeds_gets_the_right_verdict_most_of_the_time():
    """A 3-SD lead in (a), (b), (d), (e) and splits equal to MLM in (c), whose margin is 2 SD here."""
    rng = np.random.default_rng(11)
    samples = reports(lambda r, shape: r.normal(0.0, 0.5, shape), 5, rng, effect=1.5, margin_shift=0.0)
    decided = decide(samples)
    right = (decided.decision == FAVOUR).mean(axis=0)
    assert (right >= 0.8).all(), f"share of reports with the right verdict per claim: {right}"
    wrong = decide(reports(lambda r, shape: r.normal(0.0, 0.5, shape), 5, rng, effect=-1.5, margin_shift=-3.0))
    assert ((wrong.decision == AGAINST).mean(axis=0) >= 0.8).all()

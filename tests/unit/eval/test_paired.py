"""Per-example parts and the paired tests (megamlm/eval/metrics.py, megamlm/eval/paired.py): the parts of every
task's score sum to the score the task reports; McNemar's exact test by hand; the paired permutation test equals
the exact sign-flip test for a mean, holds its level under the null, and finds a difference an unpaired comparison
of the two scores could not."""

import itertools

import numpy as np
import pytest

from megamlm.eval import metrics
from megamlm.eval.paired import compare_runs, mcnemar, paired_permutation


def test_the_parts_sum_to_each_tasks_score():
    predicted = [["B-PER", "I-PER", "O"], ["B-LOC", "O"], ["O", "B-ORG"]]
    gold = [["B-PER", "I-PER", "O"], ["B-LOC", "B-LOC"], ["O", "O"]]
    aggregate, parts = metrics.tagging_parts(predicted, gold, spans=True)
    assert metrics.score_from_parts(aggregate, parts) == pytest.approx(100 * metrics.span_f1(predicted, gold)["f1"])
    aggregate, parts = metrics.tagging_parts(predicted, gold, spans=False)
    assert metrics.score_from_parts(aggregate, parts) == pytest.approx(
        100 * metrics.tagging_accuracy(predicted, gold))
    answers = {"a": "Mr. Darcy", "b": "", "c": "the Elinor"}
    gold_answers = {"a": ["Darcy"], "b": [], "c": ["Elinor Dashwood"]}
    squad = metrics.squad_scores(answers, gold_answers)
    parts = np.array(metrics.squad_parts(answers, gold_answers))
    assert parts[:, 0].mean() == pytest.approx(squad["f1"]) and parts[:, 1].mean() == pytest.approx(squad["exact"])
    rankings = {"q1": ["d2", "d1"], "q2": ["d3"], "q3": ["d1"]}
    qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}, "q3": {"d9": 0}}
    queries, parts = metrics.retrieval_parts(rankings, qrels)
    assert queries == ["q1", "q2"]
    assert metrics.score_from_parts(metrics.MEAN, [p[:1] for p in parts]) == pytest.approx(
        metrics.retrieval_scores(rankings, qrels)["ndcg@10"])


def test_mcnemar_is_the_exact_binomial_test_of_the_discordant_examples():
    right_a = [True] * 10 + [False] * 2 + [True] * 30 + [False] * 8
    right_b = [False] * 10 + [True] * 2 + [True] * 30 + [False] * 8
    only_a, only_b, p = mcnemar(right_a, right_b)
    # 12 discordant, 10 one way: P(X <= 2 or X >= 10 | n 12, 1/2) = 2 x (1 + 12 + 66) / 4096
    assert (only_a, only_b) == (10, 2) and p == pytest.approx(2 * 79 / 4096)
    assert mcnemar([True, False], [True, False])[2] == 1.0


def test_the_paired_permutation_of_a_mean_is_the_sign_flip_test():
    a = np.array([[70.0], [40.0], [55.0], [90.0], [30.0], [62.0]])
    b = np.array([[60.0], [42.0], [50.0], [80.0], [25.0], [61.0]])
    differences = (a - b)[:, 0]
    flips = np.array(list(itertools.product((1, -1), repeat=6)))
    exact = np.mean(np.abs(flips @ differences) >= abs(differences.sum()) - 1e-9)
    observed, p = paired_permutation(a, b, metrics.MEAN, rounds=20_000)
    assert observed == pytest.approx(differences.mean())
    assert p == pytest.approx(exact, abs=0.01)


def test_the_paired_permutation_holds_its_level_and_pairing_buys_power():
    rng = np.random.default_rng(0)
    rejected = 0
    for _ in range(200):  # two equally good models on 60 QA questions of very different difficulty
        difficulty = rng.uniform(0, 100, (60, 1))
        a, b = difficulty + rng.normal(0, 5, (60, 1)), difficulty + rng.normal(0, 5, (60, 1))
        rejected += paired_permutation(a, b, metrics.MEAN, rounds=499, seed=1)[1] < 0.05
    assert rejected / 200 <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 200)
    difficulty = rng.uniform(0, 100, (60, 1))
    a, b = difficulty + 4 + rng.normal(0, 2, (60, 1)), difficulty + rng.normal(0, 2, (60, 1))
    assert paired_permutation(a, b, metrics.MEAN)[1] < 0.001  # 4 points on every question: plain to a paired test
    from scipy import stats
    assert stats.ttest_ind(a[:, 0], b[:, 0]).pvalue > 0.3  # lost in the questions' spread when unpaired


def test_compare_runs_refuses_different_examples_and_picks_the_test():
    run = lambda model, parts, ids=(0, 1, 2): {"model": model, "task": "t", "seed": 0, "metric": "accuracy",  # noqa: E731
                                               "test": {"aggregate": metrics.MEAN, "ids": list(ids), "parts": parts}}
    a, b = run("a", [[100.0], [100.0], [0.0]]), run("b", [[0.0], [100.0], [0.0]])
    paired = compare_runs(a, b)
    assert paired.test == "McNemar exact" and paired.difference == pytest.approx(100 / 3)
    assert paired.detail == "1 right only by a, 0 only by b" and paired.p_value == 1.0
    with pytest.raises(ValueError, match="scored on different test examples"):
        compare_runs(a, run("b", [[0.0], [100.0], [0.0]], ids=(0, 1, 3)))
    f1 = compare_runs({**a, "metric": "f1"}, {**b, "metric": "f1"})
    assert f1.test.startswith("paired permutation")

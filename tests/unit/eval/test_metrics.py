import math

import pytest

from megamlm.eval import metrics


def test_accuracy_counts_matches():
    assert metrics.accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    with pytest.raises(ValueError, match="3 predictions for 2"):
        metrics.accuracy([1, 0, 1], [1, 1])


def test_tagging_accuracy_is_over_all_tokens_not_sentences():
    pred = [["NOUN", "VERB"], ["DET", "NOUN", "NOUN", "."]]
    gold = [["NOUN", "NOUN"], ["DET", "NOUN", "NOUN", "."]]
    assert metrics.tagging_accuracy(pred, gold) == 5 / 6


def test_bio_spans_reads_entities_and_lenient_i_starts():
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-ORG", "I-ORG", "O"]
    assert metrics.bio_spans(tags) == {("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5), ("ORG", 5, 7)}


def test_span_f1_partial_overlap_is_a_miss():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "I-ORG"]]
    # PER predicted one token short (partial overlap), LOC exact, ORG with wrong type.
    pred = [["B-PER", "O", "O", "B-LOC"], ["B-MISC", "I-MISC", "I-MISC"]]
    scores = metrics.span_f1(pred, gold)
    # 1 true positive out of 3 predicted and 3 gold entities.
    assert scores["precision"] == pytest.approx(1 / 3)
    assert scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(1 / 3)
    pred2 = [["B-PER", "I-PER", "O", "O"], ["O", "O", "O"]]  # 1 TP of 1 predicted, 3 gold
    s2 = metrics.span_f1(pred2, gold)
    assert (s2["precision"], s2["recall"]) == (1.0, pytest.approx(1 / 3))
    assert s2["f1"] == pytest.approx(2 * 1 * (1 / 3) / (1 + 1 / 3))


def test_majority_vote_ties_go_to_the_first_subtoken():
    assert metrics.majority_vote(["B-PER", "O", "O"]) == "O"
    assert metrics.majority_vote(["I-PER", "O"]) == "I-PER"
    assert metrics.majority_vote(["O", "B-LOC", "B-LOC", "O"]) == "O"


def test_is_bio_tagset():
    assert metrics.is_bio_tagset(["O", "B-PER", "I-PER"])
    assert not metrics.is_bio_tagset(["NOUN", "VERB", "."])
    assert not metrics.is_bio_tagset(["O", "I-PER"])


def test_squad_normalisation():
    assert metrics.normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
    assert metrics.normalize_answer("an apple a day") == "apple day"
    assert metrics.normalize_answer("theatre") == "theatre"  # articles only as whole words


def test_squad_em_f1_and_no_answer():
    gold = {"q1": ["the Eiffel Tower", "Eiffel Tower"], "q2": ["Mr. Darcy"], "q3": [], "q4": []}
    pred = {"q1": "eiffel tower.", "q2": "Darcy said", "q3": "", "q4": "Bingley"}
    s = metrics.squad_scores(pred, gold)
    # q1 exact; q2 tokens {darcy, said} vs {mr, darcy}: p=1/2 r=1/2 f1=1/2; q3 correct no-answer; q4 wrong.
    assert s["exact"] == pytest.approx(100 * 2 / 4)
    assert s["f1"] == pytest.approx(100 * (1 + 0.5 + 1 + 0) / 4)
    assert s["has_ans_f1"] == pytest.approx(75.0)
    assert s["no_ans_exact"] == pytest.approx(50.0)
    # A missing prediction is an empty answer.
    assert metrics.squad_scores({}, {"q": []})["exact"] == 100.0


def test_ndcg_linear_gains_and_missing_judgements():
    relevance = {"b": 2, "c": 1, "d": 1}  # "a" and "e" unjudged -> 0
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert metrics.ndcg_at_k(["a", "b", "c", "e"], relevance) == pytest.approx(dcg / idcg)
    assert metrics.ndcg_at_k(["a", "b", "c", "e"], relevance) == pytest.approx(0.562727, abs=1e-6)
    assert metrics.ndcg_at_k(["b", "c", "d"], relevance) == pytest.approx(1.0)
    # Only the top k count.
    assert metrics.ndcg_at_k(["x"] * 10 + ["b"], relevance, k=10) == 0.0


def test_mrr_and_retrieval_scores():
    qrels = {"q1": {"d3": 1}, "q2": {"d1": 1, "d2": 1}, "q3": {"d9": 0}}
    rankings = {"q1": ["d1", "d2", "d3"], "q2": ["d2", "d1"], "q3": ["d9"]}
    assert metrics.mrr_at_k(rankings["q1"], qrels["q1"]) == pytest.approx(1 / 3)
    s = metrics.retrieval_scores(rankings, qrels)
    # q3 has no relevant document and is left out.
    assert s["mrr@10"] == pytest.approx(100 * (1 / 3 + 1) / 2)
    assert s["ndcg@10"] == pytest.approx(100 * ((1 / math.log2(4)) / 1 + 1.0) / 2)


def test_mean_confidence_interval():
    mean, half = metrics.mean_confidence_interval([1, 2, 3, 4, 5])
    assert mean == 3.0
    assert half == pytest.approx(2.776445 * math.sqrt(2.5) / math.sqrt(5), abs=1e-5)
    assert metrics.mean_confidence_interval([7.0]) == (7.0, 0.0)

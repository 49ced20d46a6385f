"""The report's plateau sentence says which side of the unigram entropy a final MLM loss lies on (issue 42: a loss
2.3 nats above the entropy read "-2.321 nats under the entropy: on or near the plateau")."""

from megamlm.study.planning.pilot import TARGET_GAP
from megamlm.study.reporting.plateau import against_entropy


def test_a_loss_above_the_entropy_is_said_to_be_above_it():
    text = against_entropy(8.5, 6.179)
    assert text.startswith("2.321 nats above the entropy") and "under" not in text.split(":")[0]
    assert "-" not in text.split(" nats")[0]


def test_a_loss_under_the_entropy_keeps_its_verdict():
    assert against_entropy(5.05, 6.21) == "+1.160 nats under the entropy: off the plateau"
    assert against_entropy(6.21 - TARGET_GAP / 2, 6.21).endswith("nats under the entropy: on or near the plateau")
    assert against_entropy(6.21, 6.21) == "+0.000 nats under the entropy: on or near the plateau"

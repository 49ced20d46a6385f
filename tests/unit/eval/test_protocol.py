"""The EncodEval protocol pieces, each against a hand computation or the library it reproduces: NDCG@10 on
a judged-only corpus, SQuAD-v2 no-answer and ReCoRD scoring, the classification head against
transformers' EuroBERT head, the cached ranking loss against the whole-batch loss, the step count and LR
schedule against Hugging Face's trainer, and the once-per-model load report."""

import math

import pytest
import torch

from megamlm.eval import metrics
from megamlm.eval.finetune import Hyperparameters, linear_warmup_decay, planned_steps
from megamlm.eval.model_io import load_encoder, load_tokenizer
from megamlm.eval.tasks import TaskSettings, build_task

from .conftest import retrieval_task


def test_ndcg_at_10_on_a_judged_only_corpus_by_hand():
    # EncodEval's corpus: the documents judged for validation or test (relevant or not), binary relevance.
    qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 1, "d4": 1}}
    corpus = {"d1", "d2", "d3", "d4"}
    rankings = {"q1": ["d2", "d1", "d3", "d4"], "q2": ["d4", "d1", "d3", "d2"]}
    assert all(set(r) == corpus for r in rankings.values())
    scores = metrics.retrieval_scores(rankings, qrels)
    q1 = (1 / math.log2(3)) / 1                                        # d1 at rank 2
    q2 = (1 / math.log2(2) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))  # d4 rank 1, d3 rank 3
    assert scores["ndcg@10"] == pytest.approx(100 * (q1 + q2) / 2)
    assert scores["ndcg@10"] == pytest.approx(100 * (0.630930 + 0.919721) / 2, abs=1e-4)
    assert scores["mrr@10"] == pytest.approx(100 * (1 / 2 + 1) / 2)
    # The same queries over a full corpus where 9 unjudged documents outrank everything: far lower.
    full = {q: [f"u{i}" for i in range(9)] + r for q, r in rankings.items()}
    assert metrics.retrieval_scores(full, qrels)["ndcg@10"] == pytest.approx(
        100 * (0 + 1 / math.log2(11) / (1 + 1 / math.log2(3))) / 2)


def test_squad_v2_no_answer_f1_by_hand():
    gold = {"a": ["Darcy"], "b": [], "c": [], "d": ["Mr. Darcy", "Darcy"]}
    pred = {"a": "", "b": "", "c": "Bingley", "d": "the proud Darcy"}
    s = metrics.squad_scores(pred, gold)
    # a: answerable, answered nothing -> 0; b: no answer, none given -> 1; c: no answer, one given -> 0;
    # d: {proud, darcy} vs {darcy}: p=1/2 r=1 f1=2/3 (best of the two golds; "mr darcy" gives 1/2).
    assert s["f1"] == pytest.approx(100 * (0 + 1 + 0 + 2 / 3) / 4)
    assert s["exact"] == pytest.approx(25.0)
    assert s["no_ans_f1"] == pytest.approx(50.0) and s["has_ans_f1"] == pytest.approx(100 * (2 / 3) / 2)


def test_record_scoring_takes_the_best_gold_entity_by_hand():
    # ReCoRD: every query has one or more accepted entity strings; EM/F1 are the max over them.
    gold = {"q1": ["Anne", "Anne Elliot"], "q2": ["Wentworth"], "q3": ["Bath"]}
    pred = {"q1": "Anne Elliot", "q2": "Captain Wentworth", "q3": "Lyme"}
    s = metrics.squad_scores(pred, gold)
    assert s["exact"] == pytest.approx(100 / 3)
    assert s["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0) / 3)  # q2: p=1/2, r=1
    assert "no_ans_f1" not in s


@pytest.mark.parametrize("pooling", ["late", "mean", "bos"])
def test_sequence_classifier_matches_transformers_eurobert_head(tiny_models, pooling):
    import transformers

    from megamlm.eval.heads import SequenceClassifier

    path = tiny_models["eurobert"]
    config = transformers.AutoConfig.from_pretrained(path, num_labels=3, classifier_pooling=pooling)
    torch.manual_seed(1)
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(path, config=config).eval()
    ours = SequenceClassifier(load_encoder(path, log=lambda *_: None), 3, pooling).eval()
    ours.dense.load_state_dict(reference.dense.state_dict())
    ours.classifier.load_state_dict(reference.classifier.state_dict())
    ids = torch.tensor([[5, 9, 12, 7, 3], [8, 6, 4, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).logits
        assert torch.allclose(ours(ids, mask), expected, atol=1e-5)


def _reference_ranking_gradients(task, model, batch, micro):
    """The loss computed with gradients kept through every mini-batch forward (no caching), in the same
    order of forwards, so the same dropout masks."""
    sides = []
    for ids, mask in (("input_ids", "attention_mask"), ("doc_input_ids", "doc_attention_mask")):
        sides.append(torch.cat([model(batch[ids][s:s + micro], batch[mask][s:s + micro])
                                for s in range(0, len(batch[ids]), micro)]))
    loss = task.ranking_loss(*sides)
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_cached_ranking_loss_has_the_gradients_of_the_uncached_loss(tiny_models, mode):
    from contextlib import nullcontext

    path = tiny_models["bert"]  # BERT has dropout: in train mode the second pass must replay the first's masks
    task = build_task(retrieval_task(), load_tokenizer(path), TaskSettings(max_length=32))
    batch = task.collate(task.train_features() * 2)  # 6 pairs
    results = []
    for cached in (False, True):
        torch.manual_seed(0)
        model = task.build_model(load_encoder(path, log=lambda *_: None)).train(mode == "train")
        torch.manual_seed(123)
        if cached:
            loss = task.forward_backward(model, batch, 2, nullcontext)
        else:
            loss = _reference_ranking_gradients(task, model, batch, 6 if mode == "eval" else 2)
        results.append((loss, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (reference_loss, reference), (cached_loss, cached) = results
    assert cached_loss.item() == pytest.approx(reference_loss.item(), rel=1e-5)
    assert len(reference) == len(cached) > 0
    for a, b in zip(reference, cached):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_steps_as_the_trainer_counts_them():
    hp = Hyperparameters(batch_size=32)
    # max_steps wins over epochs: a 500-example set is cycled through for 1,000 steps.
    assert planned_steps(500, hp, "sequence_classification") == 1000
    assert planned_steps(10_000_000, hp, "retrieval") == 1000
    # Token classification: max_steps -1 in EncodEval, so one epoch.
    assert planned_steps(14_041, hp, "token_classification") == math.ceil(14_041 / 32)
    assert planned_steps(14_041, Hyperparameters(max_steps=7), "token_classification") == 7
    assert planned_steps(100, Hyperparameters(max_steps=-1, epochs=2, batch_size=32), "question_answering") == 8


def test_lr_schedule_is_transformers_linear_schedule():
    transformers = pytest.importorskip("transformers")
    total, warmup = 50, math.ceil(0.1 * 50)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    reference = transformers.get_linear_schedule_with_warmup(optimizer, warmup, total)
    for step in range(total):
        assert linear_warmup_decay(step, total, warmup) == pytest.approx(reference.get_last_lr()[0])
        optimizer.step()
        reference.step()


def test_transformers_load_report_is_one_line_per_model(tiny_models, capsys):
    path = tiny_models["llama"]
    lines = []
    for _ in range(3):
        load_encoder(path, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith(f"loaded {path} (llama, ")
    captured = capsys.readouterr()
    assert "Loading weights" not in captured.err + captured.out


def protocol_table() -> dict[str, tuple[str, str]]:
    """megamlm/eval/README.md's protocol table: parameter -> (paper / EncodEval, megamlm default)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "megamlm" / "eval" / "README.md").read_text()
    table = text.split("## The protocol, parameter by parameter")[1].split("\n### ")[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 3 and cells[0] not in ("parameter", "---|---|---"):
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def test_ontonotes_steps_and_the_pooling_default_are_the_protocol_tables():
    from megamlm.eval.finetune import PROTOCOL_MAX_STEPS
    from megamlm.eval.paper_datasets import PAPER_DATASETS

    rows = protocol_table()
    paper, ours = rows["steps"]
    # OntoNotes fine-tunes for EncodEval's 1,000 steps, set per dataset; the other TC sets for one epoch
    assert PAPER_DATASETS["ontonotes"].max_steps == 1000 and "OntoNotes" in paper and "`max_steps: 1000`" in paper
    assert "OntoNotes `max_steps=1000`" in ours and "TC: `max_steps: -1`" not in paper
    assert PROTOCOL_MAX_STEPS["token_classification"] == -1 and "CoNLL-2003 and UNER: `max_steps: -1`" in paper
    assert all(d.max_steps is None for name, d in PAPER_DATASETS.items() if name != "ontonotes")
    assert planned_steps(59_924, Hyperparameters(), "token_classification",
                         PAPER_DATASETS["ontonotes"].max_steps) == 1000
    # the sequence-classification pooling: the paper's (mean), EuroBERT's late only when asked
    paper, ours = rows["SC head"]
    assert TaskSettings().classifier_pooling == "mean"
    assert "reports mean pooling" in paper and ours.startswith('same head, "mean"')
    from megamlm.eval.heads import SequenceClassifier

    assert SequenceClassifier.__init__.__defaults__ == ("mean",)

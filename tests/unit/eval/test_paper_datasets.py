"""The paper's 12 datasets through Hugging Face `datasets`: built as EncodEval builds them, each run end to
end on a tiny model, online loading with the Hub call replaced by local copies of the Hub's schemas,
offline loading, save_to_disk copies, and the one-line error for a dataset that cannot be had."""

import json

import pytest

datasets = pytest.importorskip("datasets", reason="the Hugging Face datasets package is not installed")

from megamlm.eval.paper_datasets import PAPER_DATASETS, load_paper_dataset  # noqa: E402
from megamlm.eval.readers import TaskDataError  # noqa: E402

from .hub_fixture import FakeHub  # noqa: E402


def _tool(name):
    from helpers import tool_main

    return tool_main(name)


@pytest.fixture
def hub(monkeypatch):
    fake = FakeHub(datasets)
    monkeypatch.setattr(datasets, "load_dataset", fake.load_dataset)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return fake


def test_all_twelve_are_registered():
    assert sorted(PAPER_DATASETS) == sorted(["sst2", "qqp", "mnli", "conll2003", "ontonotes", "uner", "squad",
                                             "squad_v2", "record", "msmarco", "nq", "mldr"])


def test_ontonotes_fine_tunes_for_its_own_step_count(hub):
    """EncodEval's OntoNotes configs: max_steps 1000; its CoNLL-2003 and UNER configs: -1 (one epoch)."""
    from megamlm.eval.finetune import Hyperparameters, planned_steps
    from megamlm.eval.runner import limit_examples

    data = load_paper_dataset("ontonotes")
    assert data.max_steps == 1000 == limit_examples(data, 4, 4).max_steps  # a subset keeps the dataset's steps
    assert planned_steps(len(data.splits["train"]), Hyperparameters(), data.kind, data.max_steps) == 1000
    assert planned_steps(12, Hyperparameters(max_steps=7), data.kind, data.max_steps) == 7  # --max-steps wins
    for name in ("conll2003", "uner"):
        other = load_paper_dataset(name)
        assert other.max_steps is None
        assert planned_steps(12, Hyperparameters(batch_size=4), other.kind, other.max_steps) == 3  # one epoch


EXPECTED = {  # name: (metric, kind)
    "sst2": "accuracy", "qqp": "accuracy", "mnli": "accuracy", "conll2003": "span_f1", "ontonotes": "span_f1",
    "uner": "span_f1", "squad": "f1", "squad_v2": "f1", "record": "f1", "msmarco": "ndcg@10", "nq": "ndcg@10",
    "mldr": "ndcg@10"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_dataset_end_to_end_from_the_hub(name, hub, tiny_models, tmp_path):
    main = _tool("evaluate")
    out = tmp_path / "out"
    one_epoch = PAPER_DATASETS[name].kind == "token_classification" and PAPER_DATASETS[name].max_steps is None
    steps = [] if one_epoch else ["--max-steps", "2"]  # CoNLL-2003 and UNER: one epoch
    args = ["--model", f"tiny={tiny_models['eurobert']}", "--tasks", name, "--output", str(out), "--lrs", "1e-3",
            "--seeds", "0", "--batch-size", "4", "--micro-batch-size", "2", "--max-length", "48",
            "--max-query-length", "16", "--doc-stride", "8", "--no-plots", *steps]
    assert main(args) == 0
    result = json.loads((out / "runs" / "tiny" / name / "lr0.001_seed0.json").read_text())
    assert result["metric"] == EXPECTED[name] and 0 <= result["test"]["score"] <= 100
    assert {s.path for s in PAPER_DATASETS[name].sources} <= {call[0] for call in hub.calls}
    if one_epoch:
        assert result["steps"] == 3  # one epoch: 12 train sentences in batches of 4
    else:
        assert result["steps"] == 2
    if PAPER_DATASETS[name].kind == "retrieval":
        # one corpus for validation and test: the documents judged for either (relevant or not)
        expected_docs = {"msmarco": 16, "nq": 20, "mldr": 8}[name]  # MLDR: positives only
        assert result["validation"]["documents"] == result["test"]["documents"] == expected_docs


def test_glue_splits_and_formats_as_encodeval(hub):
    mnli = load_paper_dataset("mnli")
    train = hub.data[("nyu-mll/glue", "mnli")]["train"]
    parts = train.train_test_split(train_size=0.95, seed=42)
    assert [e.text for e in mnli.splits["validation"]] == [
        f"Premise: {r['premise']}\nHypothesis: {r['hypothesis']}" for r in parts["test"]]
    assert len(mnli.splits["train"]) == 38 and len(mnli.splits["validation"]) == 2
    assert len(mnli.splits["test"]) == 6  # validation_matched
    assert mnli.splits["test"][0].label in ("entailment", "neutral", "contradiction")
    qqp = load_paper_dataset("qqp")
    assert qqp.splits["test"][0].text.startswith("Question 1: ") and "\nQuestion 2: " in qqp.splits["test"][0].text
    sst2 = load_paper_dataset("sst2")
    assert sst2.splits["test"][0].text_pair is None and len(sst2.splits["test"]) == 6


def test_retrieval_corpus_is_the_judged_documents_and_relevance_is_binary(hub):
    msmarco = load_paper_dataset("msmarco")
    validation, test = msmarco.splits["validation"], msmarco.splits["test"]
    assert validation.corpus is test.corpus
    assert set(test.corpus) == {f"d{i}" for i in range(8)} | {f"d{i + 12}" for i in range(8)}
    assert validation.qrels["q0"] == {"d0": 1, "d12": 0}
    assert validation.queries["q0"].startswith("Query: ") and test.corpus["d12"].startswith("Document: ")
    train = msmarco.splits["train"]
    assert len(train.queries) == 24 and all(d.startswith("Document: ") for d in train.corpus.values())
    full = load_paper_dataset("msmarco", retrieval_corpus="full")
    assert len(full.splits["test"].corpus) == 30
    nq = load_paper_dataset("nq")
    first_text = hub.data[("BeIR/nq", "corpus")]["corpus"][0]["text"]
    assert nq.splits["test"].corpus["nd0"] == "Document: Title 0. " + first_text
    halves = set(nq.splits["validation"].queries), set(nq.splits["test"].queries)
    assert len(halves[0]) == len(halves[1]) == 5 and not halves[0] & halves[1]
    assert halves == (set(load_paper_dataset("nq").splits["validation"].queries), halves[1])  # deterministic
    mldr = load_paper_dataset("mldr")
    assert set(mldr.splits["validation"].queries) == {f"m{i}" for i in range(4)}
    assert set(mldr.splits["test"].corpus) == {f"md{i}" for i in range(8)}


def test_record_and_squad_v2_rows(hub):
    record = load_paper_dataset("record")
    (first, *_) = record.splits["test"]
    assert first.answers == [("Anne", 0), ("Anne", first.context.rindex("Anne"))]
    from megamlm.eval.paper_datasets import _qa_example

    superglue = {"passage": "Anne met Wentworth in Bath. @highlight Wentworth", "query": "@placeholder met Wentworth",
                 "entity_spans": {"text": ["Anne", "Wentworth", "Bath"], "start": [0, 9, 22], "end": [4, 18, 26]},
                 "answers": ["Anne"], "idx": {"passage": 3, "query": 7}}
    example = _qa_example("record", "test", 0, superglue)
    assert (example.id, example.question, example.answers) == ("3-7", "_ met Wentworth", [("Anne", 0)])
    squad_v2 = load_paper_dataset("squad_v2")
    assert sum(not e.answers for e in squad_v2.splits["test"]) == 1
    with pytest.raises(TaskDataError, match="expected SQuAD's context/question/answers"):
        _qa_example("record", "test", 0, {"text": "x"})


def test_offline_cache_miss_is_one_line_naming_the_dataset_and_the_fetch_command(tiny_models, tmp_path, monkeypatch,
                                                                                capsys):
    def cache_miss(path, name=None, split=None, **kwargs):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", cache_miss)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    main = _tool("evaluate")
    args = ["--model", f"tiny={tiny_models['eurobert']}", "--tasks", "uner", "--output", str(tmp_path / "o"),
            "--no-plots"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: dataset uner: ")
    assert "not in the local Hugging Face cache" in err and "python tools/fetch_eval_datasets.py uner" in err
    assert not (tmp_path / "o" / "runs").exists()


def test_fetch_tool_writes_save_to_disk_copies_that_load_like_the_hub(hub, tmp_path, monkeypatch):
    assert _tool("fetch_eval_datasets")(["conll2003,nq", "--save-to", str(tmp_path / "copies")]) == 0
    assert sorted(p.name for p in (tmp_path / "copies").iterdir()) == [
        "BeIR__nq-qrels", "BeIR__nq__corpus", "BeIR__nq__queries", "hgissbkh__conll2003-en", "hgissbkh__msmarco-pairs"]
    monkeypatch.setattr(datasets, "load_dataset", None)  # copies only: the Hub is never asked
    local = load_paper_dataset("conll2003", tmp_path / "copies")
    monkeypatch.setattr(datasets, "load_dataset", hub.load_dataset)
    online = load_paper_dataset("conll2003")
    assert [(s.tokens, s.tags) for s in local.splits["test"]] == [(s.tokens, s.tags) for s in online.splits["test"]]
    assert local.splits["train"][0].tags[:2] == ["B-PER", "I-PER"]
    with pytest.raises(TaskDataError, match=r"nyu-mll__glue__sst2 is missing; make the copies with "
                                            r"`python tools/fetch_eval_datasets.py sst2 --save-to"):
        load_paper_dataset("sst2", tmp_path / "copies")

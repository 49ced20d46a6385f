"""The paper's datasets by name, from local save_to_disk copies shaped like the Hub datasets."""

import pytest

datasets = pytest.importorskip("datasets", reason="the Hugging Face datasets package is not installed")

from megamlm.eval.paper_datasets import PAPER_DATASETS, held_out, load_paper_dataset, source_folder_name  # noqa: E402
from megamlm.eval.readers import TaskDataError  # noqa: E402
from megamlm.eval.registry import load_task  # noqa: E402


def _save(root, source, splits, features=None):
    dd = datasets.DatasetDict({k: datasets.Dataset.from_list(v, features=features) for k, v in splits.items()})
    dd.save_to_disk(str(root / source_folder_name(source)))


def test_all_twelve_are_registered():
    assert sorted(PAPER_DATASETS) == sorted(["sst2", "qqp", "mnli", "conll2003", "ontonotes", "uner", "squad",
                                             "squad_v2", "record", "msmarco", "nq", "mldr"])


def test_glue_validation_is_carved_from_train_and_official_validation_is_test(tmp_path):
    features = datasets.Features({"sentence": datasets.Value("string"), "idx": datasets.Value("int32"),
                                  "label": datasets.ClassLabel(names=["negative", "positive"])})
    train = [{"sentence": f"s{i}", "idx": i, "label": i % 2} for i in range(200)]
    _save(tmp_path, ("nyu-mll/glue", "sst2"), {
        "train": train, "validation": [{"sentence": "v", "idx": 0, "label": 1}],
        "test": [{"sentence": "t", "idx": 0, "label": -1}]}, features)
    task = load_task("sst2", hf_datasets_dir=tmp_path)
    held = [i for i in range(200) if held_out("sst2", i)]
    assert [e.text for e in task.splits["validation"]] == [f"s{i}" for i in held] and 0 < len(held) < 30
    assert len(task.splits["train"]) == 200 - len(held)
    assert [(e.text, e.label) for e in task.splits["test"]] == [("v", "positive")]


def test_tagging_names_and_nested_ontonotes(tmp_path):
    tags = datasets.ClassLabel(names=["O", "B-PER", "I-PER"])
    flat = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")), "ner_tags": datasets.Sequence(tags)})
    rows = [{"tokens": ["Emma", "Woodhouse", "smiled"], "ner_tags": [1, 2, 0]}]
    _save(tmp_path, ("eriktks/conll2003", None), {"train": rows, "validation": rows, "test": rows}, flat)
    conll = load_paper_dataset("conll2003", tmp_path)
    assert conll.splits["test"][0].tags == ["B-PER", "I-PER", "O"]

    nested = datasets.Features({"document_id": datasets.Value("string"), "sentences": [
        {"words": datasets.Sequence(datasets.Value("string")), "named_entities": datasets.Sequence(tags)}]})
    docs = [{"document_id": "d", "sentences": [{"words": ["Anne"], "named_entities": [1]},
                                               {"words": ["and", "Emma"], "named_entities": [0, 1]}]}]
    _save(tmp_path, ("ontonotes/conll2012_ontonotesv5", "english_v4"), {"train": docs, "validation": docs, "test": docs}, nested)
    onto = load_paper_dataset("ontonotes", tmp_path)
    assert [(s.tokens, s.tags) for s in onto.splits["train"]] == [(["Anne"], ["B-PER"]), (["and", "Emma"], ["O", "B-PER"])]


def test_squad_v2_and_record(tmp_path):
    ctx = "Emma lived at Hartfield."
    rows = [{"id": "a", "title": "t", "context": ctx, "question": "Where?",
             "answers": {"text": ["Hartfield"], "answer_start": [14]}},
            {"id": "b", "title": "t", "context": ctx, "question": "Who else?", "answers": {"text": [], "answer_start": []}}]
    _save(tmp_path, ("rajpurkar/squad_v2", None), {"train": rows, "validation": rows})
    squad = load_paper_dataset("squad_v2", tmp_path)
    assert [(e.id, e.answers) for e in squad.splits["test"]] == [("a", [("Hartfield", 14)]), ("b", [])]

    passage = "Anne met Wentworth in Bath. @highlight Wentworth returns"
    record = [{"passage": passage, "query": "@placeholder met Wentworth", "entities": ["Anne", "Wentworth", "Bath"],
               "entity_spans": {"text": ["Anne", "Wentworth", "Bath"], "start": [0, 9, 22], "end": [4, 18, 26]},
               "answers": ["Anne"], "idx": {"passage": 0, "query": 3}}]
    _save(tmp_path, ("aps/super_glue", "record"), {"train": record, "validation": record})
    rec = load_paper_dataset("record", tmp_path)
    (example,) = rec.splits["test"]
    assert example.question == "_ met Wentworth" and example.answers == [("Anne", 0)] and example.id == "0-3"


def test_msmarco_retrieval_splits(tmp_path):
    _save(tmp_path, ("BeIR/msmarco", "corpus"), {"corpus": [{"_id": "1", "title": "", "text": "cats purr"},
                                                            {"_id": "2", "title": "Dogs", "text": "bark"}]})
    _save(tmp_path, ("BeIR/msmarco", "queries"), {"queries": [{"_id": "q1", "text": "purring"}, {"_id": "q2", "text": "barking"}]})
    qrels = [{"query-id": "q1", "corpus-id": "1", "score": 1}, {"query-id": "q2", "corpus-id": "2", "score": 1}]
    _save(tmp_path, ("BeIR/msmarco-qrels", None), {"train": qrels, "validation": qrels[:1], "test": qrels[1:]})
    task = load_task("msmarco", hf_datasets_dir=tmp_path)
    assert task.kind == "retrieval" and task.splits["test"].queries == {"q2": "barking"}
    assert task.splits["train"].corpus == {"1": "cats purr", "2": "Dogs. bark"}


def test_missing_local_copy_names_the_folder_and_how_to_make_it(tmp_path):
    with pytest.raises(TaskDataError, match=r"nyu-mll__glue__mnli is missing; on a machine with network access run: "
                                            r'datasets.load_dataset\("nyu-mll/glue", \'mnli\'\).save_to_disk'):
        load_paper_dataset("mnli", tmp_path)


def test_cache_miss_is_an_error_without_any_connection(monkeypatch, tmp_path):
    import socket

    attempts = []

    def refuse(self, address, *args):
        attempts.append(address)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(TaskDataError, match="is not in the local Hugging Face cache"):
        load_paper_dataset("sst2")
    assert attempts == []

import json

import pytest

from megamlm.eval import readers
from megamlm.eval.readers import TaskDataError


def test_classification_jsonl_and_tsv(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "good", "label": 1}\n\n{"text": "bad", "label": 0}\n')
    assert [(e.text, e.label, e.text_pair) for e in readers.read_classification(tmp_path / "a.jsonl")] == [
        ("good", "1", None), ("bad", "0", None)]
    (tmp_path / "b.tsv").write_text("premise\thypothesis\tlabel\nA cat.\tAn animal.\tentailment\n")
    ex = readers.read_classification(tmp_path / "b.tsv", text_field="premise", pair_field="hypothesis")
    assert (ex[0].text, ex[0].text_pair, ex[0].label) == ("A cat.", "An animal.", "entailment")
    with pytest.raises(TaskDataError, match="no field 'text'"):
        readers.read_classification(tmp_path / "b.tsv")


def test_conll_and_tagged_jsonl(tmp_path):
    (tmp_path / "x.conll").write_text("-DOCSTART- -X- O\n\nEU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\n")
    sentences = readers.read_conll(tmp_path / "x.conll")
    assert [(s.tokens, s.tags) for s in sentences] == [(["EU", "rejects"], ["B-ORG", "O"]), (["Peter"], ["B-PER"])]
    (tmp_path / "t.jsonl").write_text(json.dumps({"tokens": ["a", "b"], "tags": ["DET"]}) + "\n")
    with pytest.raises(TaskDataError, match="2 tokens but 1 tags"):
        readers.read_tagged_jsonl(tmp_path / "t.jsonl")


def test_squad_json_with_no_answer(tmp_path):
    doc = {"data": [{"paragraphs": [{"context": "Emma lived at Hartfield.", "qas": [
        {"id": "1", "question": "Where?", "answers": [{"text": "Hartfield", "answer_start": 14}]},
        {"id": "2", "question": "Who else?", "answers": [], "is_impossible": True}]}]}]}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    ex = readers.read_squad(tmp_path / "s.json")
    assert ex[0].answers == [("Hartfield", 14)] and ex[1].answers == []
    doc["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3
    (tmp_path / "s.json").write_text(json.dumps(doc))
    with pytest.raises(TaskDataError, match="not at character 3"):
        readers.read_squad(tmp_path / "s.json")


def write_beir(folder):
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "T", "text": "cats"}\n{"_id": "d2", "text": "dogs"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "cat?"}\n{"_id": "q2", "text": "dog?"}\n')
    for split in ("train", "dev", "test"):
        (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n")


def test_beir_folder_and_task_folder(tmp_path):
    write_beir(tmp_path / "b")
    split = readers.read_beir(tmp_path / "b", "test")
    assert split.corpus == {"d1": "T. cats", "d2": "dogs"} and split.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    task = readers.read_task_folder("retrieval", tmp_path / "b")
    assert task.name == "b" and set(task.splits) == {"train", "validation", "test"}
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "train.jsonl").write_text('{"text": "x", "label": "a"}\n')
    with pytest.raises(TaskDataError, match="no validation file; add one of validation.jsonl"):
        readers.read_task_folder("sequence_classification", tmp_path / "c")

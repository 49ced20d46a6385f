"""The tasks a bag of words cannot solve (megamlm/eval/order_tasks.py), built from the shared data folder: enough
items for one model's binomial noise to stay under 2 points, every item in both orders, the segments of an
example made of the same words, and every lexical baseline computed on the built data at chance on validation and
test; and every task kind has a lexical baseline (eval/baselines.py's LEXICAL_BASELINES)."""

from collections import Counter
from pathlib import Path

import pytest

from megamlm.eval import baselines, order_tasks
from megamlm.eval.examples import TASK_KINDS, TaskData, TextExample
from megamlm.eval.registry import LOCAL_TASKS, load_task

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / order_tasks.SOURCE).is_file(), reason="shared data folder not found")


def test_every_task_kind_has_a_lexical_baseline():
    assert set(baselines.LEXICAL_BASELINES) == set(TASK_KINDS), "a task kind without a lexical baseline"
    assert all(baselines.LEXICAL_BASELINES[kind] for kind in TASK_KINDS)


def test_the_lexical_classifiers_read_a_pair_as_one_bag_and_learn_word_cues():
    words = {"pos": "good great fine", "neg": "bad awful poor"}
    make = lambda n: [TextExample(f"{words[lab]} film {i}", lab) for i in range(n) for lab in words]  # noqa: E731
    data = TaskData("cls", "sequence_classification", {"train": make(8), "validation": make(3), "test": make(3)})
    rows = {b.name: b for b in baselines.trivial_baselines(data)}
    for name in baselines.LEXICAL_BASELINES["sequence_classification"]:
        assert rows[name].validation["score"] == rows[name].test["score"] == 100.0
        assert "chosen on validation among" in rows[name].description
    # the same two segments in both orders, opposite labels: one bag, one answer, half right
    pairs = [TextExample(a, lab, text_pair=b) for i in range(6) for a, b, lab in
             ((f"x{i} good", f"y{i} bad", "first"), (f"y{i} bad", f"x{i} good", "second"))]
    data = TaskData("pairs", "sequence_classification", {"train": pairs, "validation": pairs, "test": pairs})
    for row in baselines.trivial_baselines(data):
        assert row.test["score"] == 50.0, row.name


@needs_data
@pytest.mark.parametrize("task", sorted(order_tasks.ORDER_TASKS))
def test_the_order_tasks_leave_every_lexical_baseline_at_chance(task):
    assert task in LOCAL_TASKS
    data = load_task(task, data_dir=DATA)
    for split in ("validation", "test"):
        examples = data.splits[split]
        assert len(examples) >= 2 * 2500  # 2,500 items, each in both orders: standard error <= 1 point
        bags = Counter((frozenset([e.text, e.text_pair]), e.label) for e in examples)
        items = Counter(frozenset([e.text, e.text_pair]) for e in examples)
        assert all(n == 2 for n in items.values()) and all(n == 1 for n in bags.values())
        assert all(sorted(e.text.lower().split()) == sorted(e.text_pair.lower().split())
                   for e in examples if task == "brown-word-order")
    rows = baselines.trivial_baselines(data)
    assert {r.name for r in rows} >= set(baselines.LEXICAL_BASELINES["sequence_classification"])
    for row in rows:
        for split in ("validation", "test"):
            assert abs(getattr(row, split)["score"] - 50.0) <= 2.0, (row.name, split)


@needs_data
def test_the_order_tasks_are_deterministic_and_held_out_by_document():
    first, again = (order_tasks.brown_agreement(DATA) for _ in range(2))
    assert [(e.text, e.label) for e in first.splits["test"][:50]] == [(e.text, e.label) for e in
                                                                       again.splits["test"][:50]]
    files = {split: set() for split in ("train", "validation", "test")}
    import json
    for line in (DATA / order_tasks.SOURCE).open(encoding="utf-8"):
        doc = json.loads(line)
        files[order_tasks._split_of(doc["id"])].add(doc["id"])
    assert not (files["train"] & files["test"]) and len(files["test"]) > 150

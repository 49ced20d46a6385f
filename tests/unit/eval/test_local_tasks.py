"""The local tasks: the Austen sets from the corpus shipped in the package, the others from ../shared/data."""

from pathlib import Path

import pytest

from megamlm.eval import austen_tasks, local_data
from megamlm.eval.readers import TaskDataError

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / "brown" / "brown.jsonl").is_file(),
                                reason="shared/data (beside the repository) is not present")


@needs_data
def test_rt_sentiment_and_brown_genre_sizes():
    rt = local_data.rt_sentiment(DATA)
    assert {k: len(v) for k, v in rt.splits.items()} == {"train": 8410, "validation": 1090, "test": 1068}
    assert {e.label for e in rt.splits["test"]} == {"positive", "negative"}
    genre = local_data.brown_genre(DATA)
    assert {k: len(v) for k, v in genre.splits.items()} == {"train": 8009, "validation": 994, "test": 991}
    assert len({e.label for e in genre.splits["train"]}) == 15
    assert all(len(e.text) >= 200 and "\n\n" not in e.text for e in genre.splits["validation"])


def test_austen_qa_answers_are_speaker_spans_and_some_have_no_answer():
    assert austen_tasks.AUSTEN_CORPUS.name == "austen.jsonl.gz" and austen_tasks.AUSTEN_CORPUS.is_file()
    qa = austen_tasks.austen_qa()
    sizes = {k: len(v) for k, v in qa.splits.items()}
    assert sizes == {"train": 988, "validation": 130, "test": 149}
    for examples in qa.splits.values():
        for e in examples:
            assert e.question.startswith('Who said "')
            for text, start in e.answers:
                assert e.context[start:start + len(text)] == text
                assert not e.context[start + len(text):start + len(text) + 1].isalpha()  # whole name
            if not e.answers:
                assert e.id.endswith("-none")
    no_answer = sum(not e.answers for s in qa.splits.values() for e in s)
    assert 0.1 < no_answer / sum(sizes.values()) < 0.3
    first = qa.splits["train"][0]
    assert first.answers and first.question[len('Who said "'):-2] in first.context


def test_sentence_splitter_keeps_titles_and_initials():
    text = 'Mr. Darcy bowed. "Are you well?" said Mrs. Bennet. She was. J. Smith came.'
    assert austen_tasks.split_sentences(text) == [
        "Mr. Darcy bowed.", '"Are you well?" said Mrs. Bennet.', "She was.", "J. Smith came."]


def test_austen_retrieval_query_is_removed_from_its_document():
    ret = austen_tasks.austen_retrieval()
    assert {k: len(v) for k, v in ret.splits.items()} == {"train": 2269, "validation": 259, "test": 305}
    test = ret.splits["test"]
    assert len(test.corpus) > len(test.queries)  # distractors
    for q, rels in test.qrels.items():
        (doc, rel), = rels.items()
        assert rel == 1 and test.queries[q] not in test.corpus[doc]
    # Splits are disjoint in paragraphs.
    assert not set(ret.splits["train"].queries) & set(test.queries)


def test_missing_data_folder_names_the_fix(tmp_path):
    with pytest.raises(TaskDataError, match="--data-dir"):
        local_data.rt_sentiment(tmp_path)


def test_austen_tasks_need_no_data_folder(tmp_path):
    from megamlm.eval.registry import load_task

    task = load_task("austen-retrieval", data_dir=tmp_path / "missing")
    assert len(task.splits["test"]) == 305


def test_austen_novel_labels_the_book_of_each_paragraph():
    novel = austen_tasks.austen_novel()
    assert novel.kind == "sequence_classification"
    assert {k: len(v) for k, v in novel.splits.items()} == {"train": 4498, "validation": 534, "test": 573}
    books = {p["text"]: p["book"] for p in austen_tasks.austen_paragraphs()}
    for examples in novel.splits.values():
        assert len({e.label for e in examples}) == 6
        assert all(200 <= len(e.text) <= 1500 and books[e.text] == e.label for e in examples)
    majority = max(sum(e.label == b for e in novel.splits["test"]) for b in set(books.values()))
    assert majority == 142  # Emma, 24.8% of test
    again = austen_tasks.austen_novel()
    assert [e.text for e in again.splits["test"]] == [e.text for e in novel.splits["test"]]


def test_austen_qa_speakers_asks_both_halves_of_each_interrupted_speech():
    qa = austen_tasks.austen_qa_speakers()
    assert qa.kind == "question_answering"
    assert {k: len(v) for k, v in qa.splits.items()} == {"train": 606, "validation": 68, "test": 70}
    for examples in qa.splits.values():
        for first, second in zip(examples[::2], examples[1::2]):
            assert first.id.endswith("a") and second.id == first.id[:-1] + "b"
            assert first.answers == second.answers and first.context == second.context
            (text, start), = first.answers
            assert first.context[start:start + len(text)] == text
            fragment_a, fragment_b = first.question[len('Who said "'):-2], second.question[len('Who said "'):-2]
            assert first.context.index(fragment_a) < start < first.context.index(fragment_b)
    train = {e.context for e in qa.splits["train"]}
    assert not train & {e.context for e in qa.splits["test"]}


def test_one_adjacent_rule_answers_only_half_of_austen_qa_speakers():
    """"The name after the next speech verb" is right on the first half of each speech only."""
    import re

    after = re.compile(rf"{austen_tasks._VERB}\s+{austen_tasks._SPEAKER}")
    test = austen_tasks.austen_qa_speakers().splits["test"]
    right = 0
    for e in test:
        match = after.search(e.context, e.context.index(e.question[len('Who said "'):-2]))
        right += bool(match) and match.start(1) == e.answers[0][1]
    assert right == len(test) // 2


def test_austen_retrieval_small_caps_queries_and_corpus():
    small = austen_tasks.austen_retrieval_small()
    assert small.name == "austen-retrieval-small"
    sizes = {k: (len(v.queries), len(v.corpus)) for k, v in small.splits.items()}
    assert sizes == {"train": (2269, 2269), "validation": (100, 200), "test": (100, 200)}
    full = austen_tasks.austen_retrieval()
    for split in ("validation", "test"):
        part = small.splits[split]
        assert set(part.queries) <= set(full.splits[split].queries)
        assert all(doc in part.corpus for rels in part.qrels.values() for doc in rels)

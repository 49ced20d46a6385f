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


def test_austen_book_names_the_novel_of_long_paragraphs_split_by_paragraph():
    book = austen_tasks.austen_book()
    assert {k: len(v) for k, v in book.splits.items()} == {"train": 4705, "validation": 567, "test": 603}
    assert {e.label for e in book.splits["test"]} == {"Sense & Sensibility", "Pride & Prejudice", "Mansfield Park",
                                                      "Emma", "Northanger Abbey", "Persuasion"}
    assert all(len(e.text) >= austen_tasks.BOOK_MIN_CHARS for s in book.splits.values() for e in s)
    assert not {e.text for e in book.splits["train"]} & {e.text for e in book.splits["test"]}

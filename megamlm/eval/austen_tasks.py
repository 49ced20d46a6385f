"""QA and retrieval tasks derived from Jane Austen's novels (public domain), read from the corpus shipped
in the package (megamlm/assets/austen/austen.jsonl.gz). These are made by this project, not published
benchmarks; they exist so the whole evaluation can run on a laptop without downloads. Everything is a
pure function of the file.

austen-qa (SQuAD-v2 style): in paragraphs with speech attributed as `"...," said Elinor` (verbs
said/cried/replied/answered/returned/added/continued; speaker a capitalised name, optionally with a
title such as Mr./Mrs./Miss/Lady/Sir/Colonel/Captain), the question is `Who said "<first 8 words of
the quote>"?`, the context is the paragraph and the answer is the speaker's span. For every third
question an extra no-answer example asks it about the paragraph two before (same book) when that
paragraph contains neither the quote fragment nor the speaker's name. Split by a hash of the
paragraph id.

austen-retrieval (BEIR style): paragraphs of 300-1,500 characters with 3-8 sentences; the query is
the middle sentence and the relevant document (relevance 1) is the rest of the paragraph. Split by a
hash of the paragraph id; the validation and test corpora are their split's documents plus up to
500 whole paragraphs of that split that are not queries (distractors).

austen-book (sequence classification, 6 classes): which of the six novels a paragraph of at least 200
characters comes from (short lines of dialogue name no book); split by a hash of the paragraph id.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from megamlm.eval.examples import QAExample, RetrievalSplit, TaskData, TextExample
from megamlm.eval.local_data import hash_split

AUSTEN_CORPUS = Path(__file__).resolve().parents[1] / "assets" / "austen" / "austen.jsonl.gz"

_TITLE = r"(?:(?:Mrs?|Dr)\.?|Miss|Lady|Sir|Colonel|Captain|Admiral)"
SPEECH = re.compile(r'"([^"]{10,}?)[,!?]"\s+(?:said|cried|replied|answered|returned|added|continued)\s+'
                    rf'((?:{_TITLE}\s+)?[A-Z][a-z]+)')
QUOTE_WORDS = 8
NO_ANSWER_EVERY = 3


def austen_paragraphs() -> list[dict]:
    with gzip.open(AUSTEN_CORPUS, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def austen_qa() -> TaskData:
    paragraphs = austen_paragraphs()
    splits = {"train": [], "validation": [], "test": []}
    count = 0
    for index, paragraph in enumerate(paragraphs):
        text = paragraph["text"]
        for match in SPEECH.finditer(text):
            fragment = " ".join(match.group(1).split()[:QUOTE_WORDS])
            speaker = match.group(2)
            question = f'Who said "{fragment}"?'
            split = hash_split(f"austen-{paragraph['id']}")
            qid = f"{paragraph['id']}-{match.start(2)}"
            splits[split].append(QAExample(qid, question, text, [(speaker, match.start(2))]))
            if count % NO_ANSWER_EVERY == 0 and index >= 2:
                other = paragraphs[index - 2]
                if (other["book"] == paragraph["book"] and fragment not in other["text"]
                        and speaker not in other["text"]):
                    splits[split].append(QAExample(f"{qid}-none", question, other["text"], []))
            count += 1
    return TaskData("austen-qa", "question_answering", splits, source=f"{AUSTEN_CORPUS.name} (derived)")


_ABBREVIATIONS = {"Mr", "Mrs", "Dr", "St", "Col", "Capt", "Messrs", "Esq"}
_BOUNDARY = re.compile(r"[.!?][\"']?\s+(?=[\"']?[A-Z])")


def split_sentences(text: str) -> list[str]:
    """Sentence boundaries at . ! ? (optionally closing a quote) before a capital, except after
    titles such as Mr. and single initials."""
    sentences, last = [], 0
    for match in _BOUNDARY.finditer(text):
        word = text[:match.start()].rsplit(None, 1)[-1].strip("\"'")
        if word in _ABBREVIATIONS or (len(word) == 1 and word.isupper()):
            continue
        sentences.append(text[last:match.end()].strip())
        last = match.end()
    sentences.append(text[last:].strip())
    return [s for s in sentences if s]


MIN_CHARS, MAX_CHARS, MIN_SENTENCES, MAX_SENTENCES = 300, 1500, 3, 8
MAX_DISTRACTORS = 500


def austen_retrieval() -> TaskData:
    queries = {s: {} for s in ("train", "validation", "test")}
    corpus = {s: {} for s in queries}
    distractors = {s: {} for s in queries}
    for paragraph in austen_paragraphs():
        text, pid = paragraph["text"], paragraph["id"]
        split = hash_split(f"austen-{pid}")
        sentences = split_sentences(text)
        if MIN_CHARS <= len(text) <= MAX_CHARS and MIN_SENTENCES <= len(sentences) <= MAX_SENTENCES:
            middle = len(sentences) // 2
            queries[split][f"q{pid}"] = sentences[middle]
            corpus[split][f"d{pid}"] = " ".join(sentences[:middle] + sentences[middle + 1:])
        elif len(text) >= MIN_CHARS and len(distractors[split]) < MAX_DISTRACTORS:
            distractors[split][f"p{pid}"] = text
    splits = {}
    for split in queries:
        documents = dict(corpus[split])
        if split != "train":
            documents.update(distractors[split])
        qrels = {q: {"d" + q[1:]: 1} for q in queries[split]}
        splits[split] = RetrievalSplit(queries[split], documents, qrels)
    return TaskData("austen-retrieval", "retrieval", splits, source=f"{AUSTEN_CORPUS.name} (derived)")


BOOK_MIN_CHARS = 200


def austen_book() -> TaskData:
    """The novel (6 classes) of each paragraph of at least 200 characters (4,705 / 567 / 603)."""
    splits = {"train": [], "validation": [], "test": []}
    for paragraph in austen_paragraphs():
        if len(paragraph["text"]) >= BOOK_MIN_CHARS:
            splits[hash_split(f"austen-{paragraph['id']}")].append(TextExample(paragraph["text"], paragraph["book"]))
    return TaskData("austen-book", "sequence_classification", splits, source=f"{AUSTEN_CORPUS.name} (book field)")

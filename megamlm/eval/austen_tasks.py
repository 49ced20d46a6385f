"""Classification, QA and retrieval tasks derived from Jane Austen's novels (public domain), read from the
corpus shipped in the package (megamlm/assets/austen/austen.jsonl.gz). These are made by this project, not
published benchmarks; they exist so the whole evaluation can run on a laptop without downloads. Everything
is a pure function of the file; every split is by a hash of the paragraph id (80/10/10, local_data.hash_split).
The pretraining corpus of the miniature is the same novels, so these tasks are in-domain by design.

austen-novel (sequence classification, 6 classes): which novel a paragraph of 200-1,500 characters comes
from (5,605 paragraphs; 4,498 / 534 / 573; the majority class, Emma, is 24.8% of test). Names are the
strongest cue; a model must learn them (and the style around them) from a few hundred fine-tuning examples.

austen-qa (SQuAD-v2 style): in paragraphs with speech attributed as `"...," said Elinor` (verbs
said/cried/replied/answered/returned/added/continued; speaker a capitalised name, optionally with a
title such as Mr./Mrs./Miss/Lady/Sir/Colonel/Captain), the question is `Who said "<first 8 words of
the quote>"?`, the context is the paragraph and the answer is the speaker's span. For every third
question an extra no-answer example asks it about the paragraph two before (same book) when that
paragraph contains neither the quote fragment nor the speaker's name. Split by a hash of the
paragraph id.

austen-qa-speakers (SQuAD v1 style, every question answerable): for each interrupted speech
`"A," said Elinor, "B"` (a named speaker, the verbs above), two questions, `Who said "<first 8 words of
A>"?` (the speaker follows the fragment) and `Who said "<first 8 words of B>"?` (the speaker precedes it),
over a context of that paragraph with its neighbours in the same book (the previous and the next one),
which usually hold other speakers (744 questions; 606 / 68 / 70). The two halves of each speech go to the
same split. A one-case rule answers one kind well and the other poorly, a two-case rule both (eval/baselines.py,
test F1 over all 70 test questions): `speaker-of-quoted-words` 50.7, `speaker-before-quoted-words` 50.7,
`speaker-after-quote` 84.3, `speaker-around-quoted-words` 100.0 (the name after the speech verb right after the
fragment's quote, else the name after the last speech verb before it); the last is the task's `rule` baseline, so
a model shows something beyond a surface rule only by beating it.
`austen-qa` (above) is kept unchanged under its name.

austen-retrieval (BEIR style): paragraphs of 300-1,500 characters with 3-8 sentences; the query is
the middle sentence and the relevant document (relevance 1) is the rest of the paragraph. Split by a
hash of the paragraph id; the validation and test corpora are their split's documents plus up to
500 whole paragraphs of that split that are not queries (distractors). `austen-retrieval-small` is the
same task sized for a few fine-tuning steps: at most 100 queries per evaluation split (the first by a hash
of the paragraph id) and 100 distractors, a corpus of at most 200 documents, so that a random ranking
(nDCG@10 about 2.3) and a lexical ranking sit apart.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

from megamlm.eval.examples import QAExample, RetrievalSplit, TaskData, TextExample
from megamlm.eval.local_data import hash_split

AUSTEN_CORPUS = Path(__file__).resolve().parents[1] / "assets" / "austen" / "austen.jsonl.gz"

_TITLE = r"(?:(?:Mrs?|Dr)\.?|Miss|Lady|Sir|Colonel|Captain|Admiral)"
_VERB = r"(?:said|cried|replied|answered|returned|added|continued)"
_SPEAKER = rf"((?:{_TITLE}\s+)?[A-Z][a-z]+)"
SPEECH = re.compile(rf'"([^"]{{10,}}?)[,!?]"\s+{_VERB}\s+{_SPEAKER}')
INTERRUPTED_SPEECH = re.compile(rf'"([^"]{{10,}}?)[,!?]"\s+{_VERB}\s+{_SPEAKER}[^"]{{0,30}}?,\s+"([^"]{{20,}}?)"')
QUOTE_WORDS = 8
NO_ANSWER_EVERY = 3


def austen_paragraphs() -> list[dict]:
    with gzip.open(AUSTEN_CORPUS, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


NOVEL_MIN_CHARS, NOVEL_MAX_CHARS = 200, 1500


def austen_novel() -> TaskData:
    splits = {"train": [], "validation": [], "test": []}
    for paragraph in austen_paragraphs():
        if NOVEL_MIN_CHARS <= len(paragraph["text"]) <= NOVEL_MAX_CHARS:
            splits[hash_split(f"austen-{paragraph['id']}")].append(TextExample(paragraph["text"], paragraph["book"]))
    return TaskData("austen-novel", "sequence_classification", splits, source=f"{AUSTEN_CORPUS.name} (derived)")


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


def _window(paragraphs: list[dict], index: int) -> tuple[str, int]:
    """The paragraph at ``index`` joined with its neighbours of the same book, and where it starts in that text."""
    book = paragraphs[index]["book"]
    before = [p["text"] for p in paragraphs[max(index - 1, 0):index] if p["book"] == book]
    after = [p["text"] for p in paragraphs[index + 1:index + 2] if p["book"] == book]
    prefix = " ".join(before) + " " if before else ""
    return prefix + " ".join([paragraphs[index]["text"], *after]), len(prefix)


def _fragment(quote: str) -> str:
    return " ".join(quote.split()[:QUOTE_WORDS])


def austen_qa_speakers() -> TaskData:
    paragraphs = austen_paragraphs()
    splits = {"train": [], "validation": [], "test": []}
    for index, paragraph in enumerate(paragraphs):
        matches = list(INTERRUPTED_SPEECH.finditer(paragraph["text"]))
        if not matches:
            continue
        context, offset = _window(paragraphs, index)
        split = hash_split(f"austen-{paragraph['id']}")
        for match in matches:
            speaker, start = match.group(2), offset + match.start(2)
            for part, group in (("a", 1), ("b", 3)):
                question = f'Who said "{_fragment(match.group(group))}"?'
                splits[split].append(QAExample(f"{paragraph['id']}-{match.start(2)}{part}", question, context,
                                               [(speaker, start)]))
    return TaskData("austen-qa-speakers", "question_answering", splits, source=f"{AUSTEN_CORPUS.name} (derived)")


_ABBREVIATIONS = {"Mr", "Mrs", "Dr", "St", "Col", "Capt", "Messrs", "Esq"}
_BOUNDARY = re.compile(r"[.!?][\"']?\s+(?=[\"']?[A-Z])")


def split_sentences(text: str) -> list[str]:
    """Sentence boundaries at . ! ? (optionally closing a quote) before a capital, except after
    titles such as Mr. and single initials."""
    sentences, last = [], 0
    for match in _BOUNDARY.finditer(text):
        before = text[last:match.start()].split()
        word = before[-1].strip("\"'") if before else ""
        if not word or word in _ABBREVIATIONS or (len(word) == 1 and word.isupper()):
            continue
        sentences.append(text[last:match.end()].strip())
        last = match.end()
    sentences.append(text[last:].strip())
    return [s for s in sentences if s]


MIN_CHARS, MAX_CHARS, MIN_SENTENCES, MAX_SENTENCES = 300, 1500, 3, 8
MAX_DISTRACTORS = 500
SMALL_QUERIES, SMALL_DISTRACTORS = 100, 100


def _hash_order(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def austen_retrieval(max_queries: int | None = None, max_distractors: int = MAX_DISTRACTORS,
                     name: str = "austen-retrieval") -> TaskData:
    """The retrieval task; ``max_queries`` caps the queries (and their documents) of validation and test, taken
    in the order of a hash of the paragraph id; ``max_distractors`` caps the extra paragraphs of each."""
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
        elif len(text) >= MIN_CHARS and len(distractors[split]) < max_distractors:
            distractors[split][f"p{pid}"] = text
    splits = {}
    for split in queries:
        kept = queries[split]
        if split != "train" and max_queries is not None:
            kept = {q: kept[q] for q in sorted(kept, key=_hash_order)[:max_queries]}
        documents = {"d" + q[1:]: corpus[split]["d" + q[1:]] for q in kept}
        if split != "train":
            documents.update(distractors[split])
        qrels = {q: {"d" + q[1:]: 1} for q in kept}
        splits[split] = RetrievalSplit(kept, documents, qrels)
    return TaskData(name, "retrieval", splits, source=f"{AUSTEN_CORPUS.name} (derived)")


def austen_retrieval_small() -> TaskData:
    return austen_retrieval(SMALL_QUERIES, SMALL_DISTRACTORS, name="austen-retrieval-small")

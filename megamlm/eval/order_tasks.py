"""Tasks a bag of words cannot solve, built from the Brown Corpus of the shared data folder (brown/brown.jsonl), which
the miniature studies never pretrain on (they pretrain on the bundled Austen novels). Each example is a pair of
texts made of the same words, and every item appears in both orders with opposite labels, so any classifier that
reads an example as a bag of n-grams (of its two segments added up: ``lexical.py``) gives both of an item's
examples the same answer and scores exactly 50% on every split: chance by construction, not by assumption
(``tests/unit/eval/test_order_tasks.py`` computes it on the built data). What tells the two segments apart is
order or agreement, what a language model learns from context and a word count does not see.

- ``brown-word-order``: a sentence of 6+ words and at most 72 characters against the same sentence with two
  adjacent words swapped (both purely alphabetic and different, never the first or the last word); the label
  says which segment is the original (``first``/``second``).
- ``brown-sentence-order``: two consecutive sentences of one paragraph (4+ words, at most 90 characters each), in
  their order or swapped (``in-order``/``swapped``).
- ``brown-agreement``: the words around an agreement site of a sentence (at most 5 before and 6 after) against
  the same words with that verb or determiner put in the wrong number (``he was`` -> ``he were``, ``they have``
  -> ``they has``, ``this`` -> ``these``: ``AGREEMENT``); the label says which segment is grammatical
  (``first``/``second``).

Splits are by a hash of the Brown file id (20/40/40: documents, not sentences, are held out), choices (which
words, which site, which items) by a generator seeded with ``SEED`` and the task's name; validation and test
keep ``EVAL_ITEMS`` items each (2 x that many examples), train ``TRAIN_ITEMS``: with 2,500 items per split one
model's accuracy has a standard error of at most 0.5 / sqrt(2,500) = 1 point, 95% within 2. The decoder
adaptation example (examples/decoder_adaptation) trains on Brown's own train files, so for it these tasks are not
held out.
"""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path

from megamlm.eval.austen_tasks import split_sentences
from megamlm.eval.examples import TaskData, TextExample
from megamlm.eval.local_data import data_file, read_jsonl

SOURCE = "brown/brown.jsonl"
SEED = 20261204
EVAL_ITEMS = 2500
TRAIN_ITEMS = 2500
MIN_WORDS, MAX_CHARS = 6, 72
"""A word-order sentence's least words and most characters: two segments of 72 characters are about 52 tokens of
the miniature's 2,048-id BPE (0.36 tokens a character on Brown), inside its 64-token window (99% of the pairs)."""
PAIR_MIN_WORDS, PAIR_MAX_CHARS = 4, 90
"""A sentence-order sentence's least words and most characters (more, to reach 2,500 items per split: a long pair
loses the end of its second segment to the window)."""
WINDOW_BEFORE, WINDOW_AFTER = 5, 6
"""An agreement segment: the words around the changed one (at most 5 before, 6 after) within its sentence."""

AGREEMENT = (
    (re.compile(r"\b([Hh]e|[Ss]he|[Ii]t) (is|was|has|does)\b"),
     {"is": "are", "was": "were", "has": "have", "does": "do"}),
    (re.compile(r"\b([Tt]hey|[Ww]e) (are|were|have|do)\b"),
     {"are": "is", "were": "was", "have": "has", "do": "does"}),
    (re.compile(r"\b(I) (am)\b"), {"am": "are"}),
    (re.compile(r"\b([Yy]ou) (are|were)\b"), {"are": "is", "were": "was"}),
    (re.compile(r"\b([Tt]his|[Tt]hese) ([a-z]+)\b"), {"this": "these", "This": "These", "these": "this",
                                                       "These": "This"}),
)
"""Agreement sites: a pattern of (subject or determiner, word) and what its number-changed form is; the rule's
changed group is the verb (group 2) for pronouns and the determiner (group 1) for this/these."""


def _split_of(file_id: str) -> str:
    bucket = int(hashlib.sha256(f"order-{file_id}".encode()).hexdigest(), 16) % 10
    return "train" if bucket < 2 else "validation" if bucket < 6 else "test"


def brown_paragraphs(data_dir: Path, task: str) -> dict[str, list[list[str]]]:
    """Per split, each paragraph of Brown as its list of sentences (whitespace collapsed)."""
    out: dict[str, list[list[str]]] = {"train": [], "validation": [], "test": []}
    for document in read_jsonl(data_file(data_dir, SOURCE, task)):
        for paragraph in document["text"].split("\n\n"):
            text = " ".join(paragraph.split())
            if text:
                out[_split_of(document["id"])].append(split_sentences(text))
    return out


def _swap_adjacent(sentence: str, rng: random.Random) -> str | None:
    words = sentence.split()
    if len(words) < MIN_WORDS or len(sentence) > MAX_CHARS:
        return None
    sites = [i for i in range(1, len(words) - 2)
             if words[i].isalpha() and words[i + 1].isalpha() and words[i].lower() != words[i + 1].lower()]
    if not sites:
        return None
    i = rng.choice(sites)
    words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def _wrong_number(sentence: str, rng: random.Random) -> tuple[str, str] | None:
    """(the words around one agreement site, the same words with that site in the wrong number), or None."""
    sites = []
    for pattern, changed in AGREEMENT:
        for match in pattern.finditer(sentence):
            group = 1 if match.group(1) in changed else 2
            if match.group(group) in changed:
                sites.append((match.start(group), match.end(group), changed[match.group(group)]))
    if len(sentence.split()) < MIN_WORDS or not sites:
        return None
    start, end, word = rng.choice(sorted(sites))
    before, after = sentence[:start].split(), sentence[end:].split()
    head, tail = " ".join(before[-WINDOW_BEFORE:]), " ".join(after[:WINDOW_AFTER])
    if (after and not sentence[end:].startswith(" ")) or (before and not sentence[:start].endswith(" ")):
        return None  # the site is glued to punctuation: keep its words whole
    window = lambda middle: " ".join(part for part in (head, middle, tail) if part)  # noqa: E731
    return window(sentence[start:end]), window(word)


def _items(task: str, paragraphs: list[list[str]], rng: random.Random) -> list[tuple[str, str]]:
    """(the original, its altered copy) or, for sentence order, (the first sentence, the second)."""
    items = []
    for sentences in paragraphs:
        if task == "brown-sentence-order":
            items += [(a, b) for a, b in zip(sentences, sentences[1:])
                      if all(len(s.split()) >= PAIR_MIN_WORDS and len(s) <= PAIR_MAX_CHARS for s in (a, b))]
            continue
        for sentence in sentences:
            if task == "brown-word-order":
                altered = _swap_adjacent(sentence, rng)
                items += [(sentence, altered)] if altered else []
            else:
                pair = _wrong_number(sentence, rng)
                items += [pair] if pair else []
    return items


LABELS = {"brown-sentence-order": ("in-order", "swapped")}
"""Labels of (the natural segment first, second); the others': which segment is the original."""


def build(task: str, data_dir: Path) -> TaskData:
    rng = random.Random(f"{task}-{SEED}")
    first, second = LABELS.get(task, ("first", "second"))
    splits = {}
    for split, paragraphs in brown_paragraphs(data_dir, task).items():
        items = list(dict.fromkeys(_items(task, paragraphs, rng)))  # a sentence Brown repeats counts once
        rng.shuffle(items)
        items = items[:TRAIN_ITEMS if split == "train" else EVAL_ITEMS]
        splits[split] = [example for a, b in items
                         for example in (TextExample(a, first, text_pair=b), TextExample(b, second, text_pair=a))]
    return TaskData(task, "sequence_classification", splits, source=f"{SOURCE} (derived, seed {SEED})")


def brown_word_order(data_dir: Path) -> TaskData:
    return build("brown-word-order", data_dir)


def brown_sentence_order(data_dir: Path) -> TaskData:
    return build("brown-sentence-order", data_dir)


def brown_agreement(data_dir: Path) -> TaskData:
    return build("brown-agreement", data_dir)


ORDER_TASKS = {"brown-word-order": brown_word_order, "brown-sentence-order": brown_sentence_order,
               "brown-agreement": brown_agreement}
"""The tasks of this module: name -> builder (they read ``SOURCE`` under the data folder)."""

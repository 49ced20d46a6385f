"""Extractive QA as a two-label token classification (start, end logits per token).

Long contexts are cut into overlapping windows (doc_stride). An answer outside a window, and a
no-answer question, are trained to point at position 0, which never holds context (the question comes
first). Decoding takes the best span of at most max_answer_length tokens over all windows of an
example, and predicts no answer when the null score (start[0] + end[0]) beats it by the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megamlm.eval import metrics
from megamlm.eval.heads import SpanExtractor
from megamlm.eval.model_io import segment_separator
from megamlm.eval.readers import TaskDataError
from megamlm.eval.tasks.base import Task, encode_batch

TOP_CANDIDATES = 20
DOC_STRIDE = 128  # the protocol's window overlap (the SQuAD scripts' default)


@dataclass
class Window:
    example: int
    input_ids: list[int]
    offsets: list[tuple[int, int] | None]   # character span in the context; None outside it
    start: int = 0                          # training target (0 = no answer in this window)
    end: int = 0


class QuestionAnswering(Task):
    kind = "question_answering"
    metric = "f1"

    def validate(self):
        for split, examples in self.data.splits.items():
            ids = [e.id for e in examples]
            if len(set(ids)) != len(ids):
                raise TaskDataError(f"task {self.name}: the {split} split repeats question ids; give every question "
                                    "its own id")
            for e in examples:
                for text, start in e.answers:
                    if e.context[start:start + len(text)] != text:
                        raise TaskDataError(f"task {self.name}: {split} question {e.id}: answer {text!r} is not at "
                                            f"character {start} of its context; fix the answer start")
        room = (self.settings.max_length - self.settings.max_query_length - 1
                - self.tokenizer.num_special_tokens_to_add(pair=True))
        if room < 8:
            raise TaskDataError(f"task {self.name}: windows of {self.settings.max_length} tokens leave no room for "
                                f"context after questions of up to {self.settings.max_query_length} tokens; use a "
                                f"larger --max-length or a smaller --max-query-length")
        if self.settings.doc_stride is not None and self.settings.doc_stride >= room:
            raise TaskDataError(f"task {self.name}: doc_stride {self.settings.doc_stride} leaves no room for new "
                                f"context in windows of {self.settings.max_length} tokens with questions of up to "
                                f"{self.settings.max_query_length}; use --doc-stride below {room} or a larger "
                                "--max-length")
        self.doc_stride = (self.settings.doc_stride if self.settings.doc_stride is not None
                           else min(DOC_STRIDE, room // 2))
        self.with_no_answer = any(not e.answers for s in self.data.splits.values() for e in s)
        self._windows: dict[str, list[Window]] = {}

    def _question(self, question: str) -> str:
        enc = self.tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
        if len(enc["input_ids"]) > self.settings.max_query_length:
            question = question[:enc["offset_mapping"][self.settings.max_query_length - 1][1]]
        return question + segment_separator(self.tokenizer)

    def _windows_of(self, split: str) -> list[Window]:
        if split in self._windows:
            return self._windows[split]
        examples, s = self.data.splits[split], self.settings
        enc = self.tokenizer([self._question(e.question) for e in examples], [e.context for e in examples],
                             truncation="only_second", max_length=s.max_length, stride=self.doc_stride,
                             return_overflowing_tokens=True, return_offsets_mapping=True)
        windows = []
        for i, ids in enumerate(enc["input_ids"]):
            example = enc["overflow_to_sample_mapping"][i]
            sequence_ids = enc.sequence_ids(i)
            offsets = [tuple(o) if sid == 1 else None for o, sid in zip(enc["offset_mapping"][i], sequence_ids)]
            window = Window(example, ids, offsets)
            answers = examples[example].answers
            if answers:
                text, char_start = answers[0]
                char_end = char_start + len(text)
                inside = [k for k, o in enumerate(offsets) if o is not None]
                if offsets[inside[0]][0] <= char_start and offsets[inside[-1]][1] >= char_end:
                    window.start = next(k for k in inside if offsets[k][1] > char_start)
                    window.end = next(k for k in reversed(inside) if offsets[k][0] < char_end)
            windows.append(window)
        self._windows[split] = windows
        return windows

    def build_model(self, encoder):
        return SpanExtractor(encoder)

    def train_features(self):
        return self._windows_of("train")

    def collate(self, windows):
        batch = encode_batch([w.input_ids for w in windows], self.tokenizer.pad_token_id)
        batch["start"] = torch.tensor([w.start for w in windows])
        batch["end"] = torch.tensor([w.end for w in windows])
        return batch

    def loss(self, model, batch):
        start, end = model(batch["input_ids"], batch["attention_mask"])
        start = start.masked_fill(batch["attention_mask"] == 0, -1e4)
        end = end.masked_fill(batch["attention_mask"] == 0, -1e4)
        ce = torch.nn.functional.cross_entropy
        return (ce(start, batch["start"]) + ce(end, batch["end"])) / 2

    def _best_span(self, window: Window, start: list[float], end: list[float]) -> tuple[float, int, int] | None:
        context = [k for k, o in enumerate(window.offsets) if o is not None]
        starts = sorted(context, key=lambda k: start[k], reverse=True)[:TOP_CANDIDATES]
        ends = sorted(context, key=lambda k: end[k], reverse=True)[:TOP_CANDIDATES]
        best = None
        for s in starts:
            for e in ends:
                if s <= e < s + self.settings.max_answer_length:
                    score = start[s] + end[e]
                    if best is None or score > best[0]:
                        best = (score, s, e)
        return best

    @torch.no_grad()
    def evaluate(self, model, split, device):
        examples, windows = self.data.splits[split], self._windows_of(split)
        best: dict[int, tuple[float, str]] = {}
        null: dict[int, float] = {}
        size = self.settings.eval_batch_size
        for first in range(0, len(windows), size):
            chunk = windows[first:first + size]
            batch = encode_batch([w.input_ids for w in chunk], self.tokenizer.pad_token_id)
            start, end = model(batch["input_ids"].to(device), batch["attention_mask"].to(device))
            for window, s_row, e_row in zip(chunk, start.tolist(), end.tolist()):
                null[window.example] = min(null.get(window.example, float("inf")), s_row[0] + e_row[0])
                span = self._best_span(window, s_row, e_row)
                if span and (window.example not in best or span[0] > best[window.example][0]):
                    context = examples[window.example].context
                    text = context[window.offsets[span[1]][0]:window.offsets[span[2]][1]].strip()
                    best[window.example] = (span[0], text)
        predictions = {}
        for i, e in enumerate(examples):
            score, text = best.get(i, (float("-inf"), ""))
            if self.with_no_answer and null[i] > score + self.settings.no_answer_threshold:
                text = ""
            predictions[e.id] = text
        gold = {e.id: [a for a, _ in e.answers] for e in examples}
        scores = metrics.squad_scores(predictions, gold)
        kept = {"aggregate": metrics.MEAN, "ids": list(gold), "predictions": [predictions[q] for q in gold],
                "parts": metrics.squad_parts(predictions, gold)}
        return {"score": scores["f1"], **scores, "examples": len(examples), "predictions": kept}

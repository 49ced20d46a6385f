"""Token classification as EncodEval poses it: every sub-token of a word is trained on the word's label
(special tokens get -100), and a word's prediction is the majority vote of its sub-tokens. Scored
with entity-span F1 (seqeval's exact-match micro F1) when the tags are BIO entities, tagging accuracy
otherwise.

Words are joined with spaces and tokenized as running text (EuroBERT models: followed by EOS, without
the template), then sub-tokens are mapped back to words through character offsets; this works for any
fast tokenizer (WordPiece, byte-level BPE with or without prefix spaces).
"""

from __future__ import annotations

import torch

from megamlm.eval import metrics
from megamlm.eval.heads import TokenClassifier
from megamlm.eval.tasks.base import Task, encode_batch, label_vocabulary, pad

IGNORE = -100


def subtoken_words(words: list[str], tokenizer, max_length: int,
                   eurobert_inputs: bool = False) -> tuple[list[int], list[int]]:
    """Token ids of the sentence and, per token, the index of the word it belongs to (-1 for special
    tokens and anything outside the words)."""
    char_word, text = [], ""
    for w, word in enumerate(words):
        if w:
            text += " "
            char_word.append(-1)
        text += word
        char_word.extend([w] * len(word))
    if eurobert_inputs:
        enc = tokenizer(text + tokenizer.eos_token, add_special_tokens=False, truncation=True, max_length=max_length,
                        return_offsets_mapping=True)
    else:
        enc = tokenizer(text, truncation=True, max_length=max_length, return_offsets_mapping=True)
    owners = []
    for begin, end in enc["offset_mapping"]:
        owners.append(next((char_word[c] for c in range(begin, min(end, len(char_word))) if char_word[c] >= 0), -1))
    return enc["input_ids"], owners


class TokenClassification(Task):
    kind = "token_classification"

    def validate(self):
        splits = self.data.splits
        self.labels = label_vocabulary(self.name, [t for s in splits["train"] for t in s.tags],
                                       {s: [t for x in splits[s] for t in x.tags] for s in ("validation", "test")},
                                       self.settings.unseen_labels)
        self.label_ids = {label: i for i, label in enumerate(self.labels)}
        self.uses_spans = metrics.is_bio_tagset(self.labels)
        self.metric = "span_f1" if self.uses_spans else "accuracy"
        # Words cut off by max_length get this tag in predictions (and so are scored as given up on).
        self.fallback_tag = "O" if "O" in self.label_ids else self.labels[0]
        self._encoded: dict[str, list[tuple[list[int], list[int]]]] = {}

    def encode_split(self, split):
        """(token ids, word index of each token or -1) of each sentence of ``split`` (cached; the probe reads them)."""
        if split not in self._encoded:
            self._encoded[split] = [subtoken_words(s.tokens, self.tokenizer, self.settings.max_length,
                                                   bool(self.settings.eurobert_inputs))
                                    for s in self.data.splits[split]]
        return self._encoded[split]

    def build_model(self, encoder):
        return TokenClassifier(encoder, len(self.labels))

    def train_features(self):
        features = []
        for (ids, words), sentence in zip(self.encode_split("train"), self.data.splits["train"]):
            labels = [self.label_ids[sentence.tags[w]] if w >= 0 else IGNORE for w in words]
            features.append((ids, labels))
        return features

    def collate(self, features):
        batch = encode_batch([f[0] for f in features], self.tokenizer.pad_token_id)
        batch["labels"] = pad([f[1] for f in features], IGNORE)
        return batch

    def loss(self, model, batch):
        logits = model(batch["input_ids"], batch["attention_mask"])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE)

    @torch.no_grad()
    def evaluate(self, model, split, device):
        encoded, sentences = self.encode_split(split), self.data.splits[split]
        predictions, truncated = [], 0
        size = self.settings.eval_batch_size
        for start in range(0, len(encoded), size):
            chunk = encoded[start:start + size]
            batch = encode_batch([ids for ids, _ in chunk], self.tokenizer.pad_token_id)
            best = model(batch["input_ids"].to(device), batch["attention_mask"].to(device)).argmax(-1).tolist()
            for row, (_, owners), sentence in zip(best, chunk, sentences[start:start + size]):
                votes: dict[int, list[str]] = {}
                for position, w in enumerate(owners):
                    if w >= 0:
                        votes.setdefault(w, []).append(self.labels[row[position]])
                tags = [metrics.majority_vote(votes[w]) if w in votes else self.fallback_tag
                        for w in range(len(sentence.tokens))]
                truncated += len(sentence.tokens) - len(votes)
                predictions.append(tags)
        gold = [s.tags for s in sentences]
        out = {"accuracy": 100.0 * metrics.tagging_accuracy(predictions, gold), "examples": len(sentences),
               "words_not_reached": truncated}
        if self.uses_spans:
            spans = metrics.span_f1(predictions, gold)
            out.update({"span_precision": 100.0 * spans["precision"], "span_recall": 100.0 * spans["recall"],
                        "span_f1": 100.0 * spans["f1"]})
        out["score"] = out[self.metric]
        aggregate, parts = metrics.tagging_parts(predictions, gold, self.metric == "span_f1")
        out["predictions"] = {"aggregate": aggregate, "ids": list(range(len(sentences))),
                              "predictions": predictions, "parts": parts}
        return out

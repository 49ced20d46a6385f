"""The miniature's pilot (issue 32): candidate settings for the CPU miniature, the pretraining commands of their
arms, and the two verdicts the pilot prints: does the MLM-only arm leave the unigram plateau (its final validation
MLM loss at least ``TARGET_GAP`` nats under the unigram entropy of the validation tokens), and is each fine-tuning
task informative (the best pretrained arm's mean test score at least ``margin`` points over a randomly initialised
model of the same shape and tokenizer, fine-tuned the same way). tools/pilot_miniature.py runs it.

A candidate is written as ``key=value`` pairs joined by commas, each key one of ``DEFAULTS`` (the committed
miniature's settings): ``vocab=2048,lr=3e-3,mask=0.3``. The pilot is a screen with one pretraining seed and few
fine-tuning seeds; the real miniature's report makes the stated tests.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from megamlm.errors import UserError
from megamlm.model.config import PRESETS

TARGET_GAP = 0.5
"""Nats the MLM-only arm's final validation MLM loss must sit under the validation tokens' unigram entropy."""
ARMS = ("mlm", "clm_then_mlm", "random")
"""Pretrained arms the pilot can run, and the random-init baseline (the weights of step 0, unchanged)."""
EVAL_MASK_RATIO = 0.4
"""Validation masks at the miniature's ratio whatever a candidate trains with, so candidates' losses compare."""
RANDOM_LR = 1e-30
"""The random arm's LR: pretrain.py wants an LR > 0, and AdamW's update (at most about LR) and decoupled decay
(a factor 1 - LR x 0.1) change no fp32 weight at this LR, so its one step leaves the initial weights as they are."""


class PilotError(UserError, ValueError):
    """A candidate or option the pilot cannot run; the message names the fix."""


TINY = PRESETS["tiny"]
"""The miniature's model shape: the tiny preset."""


@dataclass(frozen=True)
class Candidate:
    """One setting of the miniature. The defaults are the committed miniature's (examples/studies/cpu_miniature.yaml:
    the tiny preset's shape and that file's pretrain settings; tests/unit/study/test_pilot.py holds them equal)."""

    vocab: int = 2048
    """BPE vocabulary size (tools/train_tokenizer.py on the bundled corpus; 2048 and 8192 ship in the package)."""
    layers: int = TINY["num_layers"]
    hidden: int = TINY["hidden_size"]
    ffn: int = TINY["ffn_hidden_size"]
    heads: int = TINY["num_attention_heads"]
    groups: int = TINY["num_query_groups"]
    """Key-value heads (grouped-query attention)."""
    seq: int = 64
    """Tokens per sample."""
    batch: int = 16
    """Samples per optimizer step."""
    lr: float = 3e-3
    """Peak LR (warmup-stable-decay: 10% warmup, 20% decay)."""
    mask: float = 0.4
    """MLM mask ratio (the paper: 0.2-0.5)."""
    steps: int = 1400
    """Pretraining steps of each arm."""
    clm: float = 0.25
    """CLM fraction of the clm_then_mlm arm."""

    @property
    def name(self) -> str:
        changed = [f"{f.name}={getattr(self, f.name):g}" for f in dataclasses.fields(self)
                   if getattr(self, f.name) != f.default]
        return ",".join(changed) or "miniature"

    @property
    def slug(self) -> str:
        return self.name.replace("=", "").replace(",", "_")


DEFAULTS = Candidate()


def parse_candidate(text: str) -> Candidate:
    """``vocab=2048,lr=3e-3`` -> Candidate; the rest from DEFAULTS. Checked: known keys, numbers, ranges."""
    fields = {f.name: f.type for f in dataclasses.fields(Candidate)}
    values = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in fields:
            raise PilotError(f"candidate {text!r}: {item!r} is not KEY=VALUE with KEY one of {', '.join(fields)}; "
                             f"e.g. --candidate vocab=2048,lr=3e-3")
        if key in values:
            raise PilotError(f"candidate {text!r}: {key} is given twice; give each key once")
        try:
            values[key] = float(value) if fields[key] == "float" else int(value)
        except ValueError:
            values[key] = None
        if values[key] is None or not math.isfinite(values[key]):
            raise PilotError(f"candidate {text!r}: {key}={value!r} is not a finite number; e.g. {key}="
                             f"{getattr(DEFAULTS, key)}") from None
    candidate = Candidate(**values)
    check_candidate(candidate)
    return candidate


def check_candidate(c: Candidate) -> None:
    if not 0.2 <= c.mask <= 0.5:
        raise PilotError(f"candidate {c.name}: mask={c.mask:g} is outside the paper's 0.2-0.5; pick a ratio in it")
    if c.vocab < 260:
        raise PilotError(f"candidate {c.name}: vocab={c.vocab} is under 260 (bytes and special tokens); use 1024+")
    if min(c.layers, c.hidden, c.ffn, c.heads, c.groups, c.seq, c.batch, c.steps) < 1 or c.lr <= 0:
        raise PilotError(f"candidate {c.name}: shape, seq, batch, steps and lr must be positive")
    if c.hidden % c.heads or c.heads % c.groups:
        raise PilotError(f"candidate {c.name}: hidden={c.hidden} must divide by heads={c.heads}, and heads by "
                         f"groups={c.groups}")
    if not 0 < c.clm < 1:
        raise PilotError(f"candidate {c.name}: clm={c.clm:g} must be a fraction strictly between 0 and 1")


def pretrain_flags(c: Candidate, arm: str, seed: int = 1) -> list[str]:
    """pretrain.py flags of one arm of ``c`` (data, tokenizer and --save are the caller's). The random arm runs one
    step at ``RANDOM_LR``, so its checkpoint holds the initial weights of the seed: the same shape, tokenizer and
    initialisation as the pretrained arms."""
    if arm not in ARMS:
        raise PilotError(f"unknown arm {arm!r}; use one of {', '.join(ARMS)}")
    steps = 1 if arm == "random" else c.steps
    flags = ["--model", "tiny", "--num-layers", str(c.layers), "--hidden-size", str(c.hidden),
             "--ffn-hidden-size", str(c.ffn), "--num-attention-heads", str(c.heads),
             "--num-query-groups", str(c.groups), "--seq-length", str(c.seq),
             "--micro-batch-size", str(c.batch), "--global-batch-size", str(c.batch),
             "--train-iters", str(steps), "--lr", f"{RANDOM_LR if arm == 'random' else c.lr:g}",
             "--mask-ratio", f"{c.mask:g}", "--eval-mask-ratio", f"{EVAL_MASK_RATIO:g}", "--seed", str(seed),
             "--split", "969,30,1", "--save-interval", str(steps)]
    if arm != "random":
        flags += ["--lr-warmup-iters", str(max(1, c.steps // 10)), "--lr-wsd-decay-iters", str(max(1, c.steps // 5))]
    flags += ["--objective", "mlm" if arm == "random" else arm]
    if arm == "clm_then_mlm":
        flags += ["--switch", f"{c.clm:g}"]
    return flags


@dataclass(frozen=True)
class LossVerdict:
    final_loss: float
    entropy: float

    @property
    def gap(self) -> float:
        return self.entropy - self.final_loss

    @property
    def meets_target(self) -> bool:
        return self.gap >= TARGET_GAP


def task_verdicts(scores: dict[str, dict[str, float]], margin: float) -> dict[str, tuple[str, float, bool]]:
    """``scores[task][model]`` (mean test score; the random-init model named ``random``) -> per task (the best
    pretrained model, its lead over random, informative: lead >= margin)."""
    verdicts = {}
    for task, by_model in scores.items():
        trained = {m: s for m, s in by_model.items() if m != "random"}
        if "random" not in by_model or not trained:
            raise PilotError(f"task {task}: the pilot needs the random-init model and at least one pretrained arm "
                             f"scored; found {', '.join(sorted(by_model)) or 'none'}")
        best = max(trained, key=trained.get)
        lead = trained[best] - by_model["random"]
        verdicts[task] = (best, lead, lead >= margin)
    return verdicts

"""The unigram plateau in the report (issue 32): the unigram entropy of the validation tokens (the loss of
predicting each masked token from its frequency alone, megamlm/data/unigram.py) printed beside each MLM-only arm's
final validation MLM loss, so a reader sees whether the MLM models learned more than token frequencies before
reading anything built on them. A study whose MLM arm sits on the plateau compares models that have not yet
learned from context."""

from __future__ import annotations

from megamlm.config.derived import split_weights
from megamlm.data import load_tokenizer
from megamlm.data.unigram import split_unigram
from megamlm.study.evidence.statistics import Sample
from megamlm.study.planning.arms import arms
from megamlm.study.planning.pilot import TARGET_GAP
from megamlm.study.planning.plan import Plan
from megamlm.training.resolved_run import data_sources


def plateau_section(plan: Plan, values: dict[str, dict[str, Sample]]) -> str:
    """One paragraph: the entropy, and each MLM-only arm's mean final validation MLM loss against it (``values``:
    the validation section's per-arm samples). Empty without a finished MLM-only arm; a blend of several datasets
    or a study without a validation split is named instead of measured."""
    mlm_only = [arm for arm in arms(plan)
                if arm.runs[0].phases == ("mlm",) and not arm.runs[0].is_continuation and arm.label in values]
    finals = {arm.label: values[arm.label]["mlm_loss"].pretraining for arm in mlm_only}
    finals = {label: seeds for label, seeds in finals.items() if seeds}
    if not finals:
        return ""
    config = mlm_only[0].runs[0].config
    weights = split_weights(config.data)
    prefixes, tokenizer_path = data_sources(config)
    if len(prefixes) != 1 or weights is None or not weights[1]:
        return ("Unigram plateau: not measured (the runs read a blend of datasets or have no --split validation "
                "part; the entropy is computed on one dataset's validation part).\n")
    figures = split_unigram(prefixes[0], weights, load_tokenizer(tokenizer_path))
    lines = [f"Unigram plateau: the {figures.tokens:,} validation tokens (special tokens left out) have a unigram "
             f"entropy of {figures.entropy:.3f} nats, the MLM loss of predicting every masked token from its "
             f"frequency alone (the training part's frequencies score {figures.train_cross_entropy:.3f} on them). "
             "An MLM-only arm near it has not yet learned from context.", ""]
    for label, seeds in finals.items():
        mean = sum(seeds) / len(seeds)
        lines.append(f"- `{label}`: final validation MLM loss {mean:.3f} (mean of {len(seeds)} seeds), "
                     f"{against_entropy(mean, figures.entropy)} (the miniature asks for at least {TARGET_GAP} nats "
                     "under it).")
    return "\n".join(lines) + "\n"


def against_entropy(loss: float, entropy: float) -> str:
    """Where a final MLM ``loss`` lies against the unigram ``entropy``, in words whose direction is the sign's: under
    it by ``TARGET_GAP`` or more (off the plateau), under it by less (on or near it), or above it (not yet down to
    what token frequencies alone give)."""
    gap = entropy - loss
    if gap >= TARGET_GAP:
        return f"{gap:+.3f} nats under the entropy: off the plateau"
    if gap >= 0:
        return f"{gap:+.3f} nats under the entropy: on or near the plateau"
    return f"{-gap:.3f} nats above the entropy: not yet down to the plateau (frequencies alone would score lower)"

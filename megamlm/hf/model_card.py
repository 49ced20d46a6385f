"""The README.md of an exported model: how it was trained, read from the checkpoint's own record."""

from __future__ import annotations

from megamlm.config import objective_stages
from megamlm.hf.hf_config import describe_features
from megamlm.hf.keymaps import MODERNBERT_ARCHS
from megamlm.hf.megamlm_checkpoint import CheckpointRecord
from megamlm.hf.modernbert import modernbert_use
from megamlm.hf.sentence_export import SENTENCE_POOLING

_OBJECTIVE_NAMES = {
    "mlm": "masked language modeling (MLM)",
    "clm": "causal language modeling (CLM)",
    "clm_then_mlm": "CLM, then MLM",
    "mlm_then_clm": "MLM, then CLM",
    "mntp": "masked next-token prediction (MNTP)",
}


_SHIFTED = {"clm", "mntp"}
"""The objectives whose LM head predicts the token at position i from the output at position i-1 (CLM's next token,
MNTP's masked token); MLM predicts a masked token from the output at its own position."""


def head_objectives(objective: str | None, merged_from: list[dict] | None, steps: int = 1,
                    imported_type: str | None = None) -> list[str]:
    """The objectives that last trained the LM head: the last phase of the run, or of each input of a merge. A model
    without training of its own (an import) has its source's head: a decoder's is CLM's, EuroBERT's and ModernBERT's
    MLM's."""
    if merged_from:
        return [phase for entry in merged_from
                for phase in head_objectives(entry.get("objective"), entry.get("merged_from"), entry.get("steps", 0),
                                             entry.get("imported_type"))]
    if not steps:
        return ["mlm" if imported_type in ("eurobert", "modernbert") else "clm"]
    return [objective_stages(objective)[-1]] if objective else []


def head_section(objectives: list[str], merge: bool) -> list[str]:
    """What the LM head predicts, in words a fill-mask user needs: MNTP and CLM train a shifted head."""
    if not objectives:
        return []
    shifted = [o for o in objectives if o in _SHIFTED]
    names = " and ".join(sorted({o.upper() for o in objectives}))
    trained = f"The LM head{' of each input' if merge else ''} was last trained by {names}"
    if not shifted:
        text = (f"{trained}: the output at a masked position predicts the token there, which is what "
                "`pipeline(\"fill-mask\")` reads.")
    elif len(shifted) == len(objectives):
        text = (f"{trained}, which train{'s' if len(set(shifted)) == 1 else ''} a shifted head: the output at "
                "position i-1 predicts the token at position "
                "i. `pipeline(\"fill-mask\")` reads the logits at the mask's own position, so it predicts the token "
                "after the mask; read the logits one position earlier (`logits[0, mask_index - 1]`) for the masked "
                "token.")
    else:
        others = " and ".join(sorted({o.upper() for o in shifted}))
        text = (f"{trained}: MLM predicts a masked token at its own position, {others} at the position before it, "
                "so the merged head is a mix of the two readings and neither is its own.")
    return ["", "## The LM head", "", text]


def merge_lines(merged_from: list[dict]) -> list[str]:
    """The inputs of a merge (tools/merge_checkpoints.py) with their weights and training."""
    lines = ["- A weighted linear merge (tools/merge_checkpoints.py), no training of its own; its inputs:"]
    for entry in merged_from:
        if entry.get("merged_from"):
            how = "itself a merge"
        elif entry.get("steps"):
            how = (f"{_OBJECTIVE_NAMES.get(entry.get('objective'), entry.get('objective'))}, {entry['steps']} steps, "
                   f"{entry.get('tokens_seen', 0):,} tokens at {entry.get('seq_length')} per sample")
            how += f", continued from {entry['init_from']}" if entry.get("init_from") else ""
        else:
            how = f"no training of its own (imported from {entry.get('imported_from') or 'elsewhere'})"
        made_for = (f"; made for {entry['max_seq_length']:,} positions"
                    if entry.get("max_seq_length") and not entry.get("steps") else "")
        lines.append(f"  - {entry['weight']:g} x `{entry['path']}`: {how}{made_for}")
    return lines


def training_facts(record: CheckpointRecord) -> dict:
    run = record.config.get("config") or {}
    objective = (run.get("objective") or {}).get("objective")
    steps = int(record.train_state.get("step", 0))
    progress = (record.train_state.get("state") or {}).get("progress") or record.train_state
    consumed = int(progress.get("consumed_samples", 0))
    seq_length = int(record.config.get("seq_length") or record.model_args.max_seq_length)
    recipe = record.config.get("recipe") or []
    return {
        "objective": objective,
        "switch_step": record.config.get("switch_step"),
        "switch_steps": record.config.get("switch_steps") or [],
        "switch": (run.get("objective") or {}).get("switch"),
        "train_iters": (run.get("training") or {}).get("train_iters"),
        "steps": steps,
        "consumed_samples": consumed,
        "seq_length": seq_length,
        "tokens_seen": tokens_seen(recipe, consumed, seq_length),
        "data_path": record.config.get("data_path") or [],
        "recipe": recipe,
        "imported_from": record.config.get("imported_from"),
        "init_from": (run.get("checkpoint") or {}).get("init_from"),
        "merged_from": record.config.get("merged_from"),
    }


def _gemma3_encoder_use(window: int | None) -> str:
    """How to use a bidirectional Gemma 3 export: fill-mask, hidden states, a classifier, and its window."""
    reach = ("" if window is None else
             f"\n\nIts sliding-window layers attend |i - j| < {window} (W = {window}: the source decoder's causal "
             "window, reaching as far on each side); config.json writes "
             f"`sliding_window: {2 * (window - 1)}` = 2(W-1), because transformers' bidirectional Gemma 3 attends "
             "|i - j| < sliding_window // 2 + 1 (megamlm checks the logits are equal). Setting "
             "`use_bidirectional_attention: true` on the source decoder's own config instead keeps its "
             f"`sliding_window: {window}` and so reaches only {window // 2 + 1} tokens on each side: another "
             "model from the same Gemma 3.")
    return f"""## Use

A native bidirectional Gemma 3 (`use_bidirectional_attention: true` in config.json, sliding windows included):
it loads without remote code. transformers has no masked-LM class for Gemma 3, so config.json names the causal-LM
class, `Gemma3ForCausalLM`: on this bidirectional config its LM head (the tied embedding) gives the MLM logits at
every position, and `pipeline("fill-mask")` fills masks with it.

```python
from transformers import AutoModel, AutoModelForSequenceClassification, pipeline
fill = pipeline("fill-mask", model=path)                       # Gemma3ForCausalLM, bidirectional: MLM logits
encoder = AutoModel.from_pretrained(path)                      # Gemma3TextModel: hidden states
classifier = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
```

sentence-transformers loads it too (`SentenceTransformer(path)`, {SENTENCE_POOLING} pooling).{reach}
"""


def tokens_seen(recipe: list[dict], consumed: int, seq_length: int) -> int:
    """The tokens of the first ``consumed`` samples, each phase's at its own length (the run's without phases)."""
    if not recipe:
        return consumed * seq_length
    tokens = sum(max(0, min(consumed, p["end_sample"]) - p["first_sample"]) * p["seq_length"] for p in recipe)
    return tokens + max(0, consumed - recipe[-1]["end_sample"]) * recipe[-1]["seq_length"]


def phase_lines(recipe: list[dict], consumed: int, run_data: list[str]) -> list[str]:
    """One line per phase of a recipe (none for a run of one phase): steps, objective, length, data, tokens."""
    if len(recipe) < 2:
        return []
    lines = []
    for p in recipe:
        done = tokens_seen([p], consumed, 0) if consumed < p["end_sample"] else p["tokens"]
        mask = f", mask {p['mask_ratio']:g}" if p["objective"] != "clm" else ""
        lines.append(f"  - phase {p['index'] + 1}: steps {p['first_step']}-{p['last_step']}, {p['objective']}, "
                     f"seq {p['seq_length']}{mask}, data {' '.join(p['data_path'] or run_data)}; {done:,} tokens")
    return ["- Phases:", *lines]


def training_lines(f: dict) -> list[str]:
    """The card's "Training" lines: the objective schedule, steps, tokens, data and phases of ``training_facts``
    (a merge's inputs' training where the checkpoint is a merge)."""
    if f["merged_from"]:  # a merge trained nothing itself: its inputs' training, not the first input's run
        return merge_lines(f["merged_from"])
    stages = objective_stages(f["objective"]) if f["objective"] else ()
    sequence = ", then ".join(p.upper() for p in stages) if len(stages) > 1 else None  # mntp,mlm or mlm,clm,mlm
    objective = _OBJECTIVE_NAMES.get(f["objective"]) or sequence or f["objective"] or "unknown"
    if len(f["switch_steps"]) > 1:  # three or more objective stages
        steps = ", ".join(map(str, f["switch_steps"]))
        schedule = f"{objective}, switching after steps {steps} of {f['train_iters']}"
    elif len(stages) == 2:
        given = f" (--switch {f['switch']})" if f["switch"] is not None else ""
        schedule = f"{objective}, switching after step {f['switch_step']} of {f['train_iters']}{given}"
    else:
        schedule = objective
    data = ", ".join(f["data_path"]) or "none recorded"
    return [
        f"- Objective schedule: {schedule}",
        f"- Switch step: {f['switch_step'] if f['switch_step'] is not None else 'none (single objective)'}"
        if len(f["switch_steps"]) <= 1 else f"- Switch steps: {', '.join(map(str, f['switch_steps']))}",
        f"- Steps: {f['steps']}",
        f"- Tokens seen: {f['tokens_seen']:,} ({f['consumed_samples']:,} samples x "
        + (f"{f['seq_length']} tokens)" if len(f["recipe"]) < 2 else "each phase's sequence length)"),
        f"- Data: {data}",
        *phase_lines(f["recipe"], f["consumed_samples"], f["data_path"]),
    ]


def model_card(record: CheckpointRecord, arch_class: str, dtype: str, arch: str | None = None) -> str:
    f = training_facts(record)
    a = record.model_args
    lines = [
        "---",
        "library_name: transformers",
        "tags: [megamlm, " + ("fill-mask" if arch_class.endswith("MaskedLM") or arch == "gemma3_encoder" else
                              "text-generation") + "]",
        "---",
        "",
        f"# {'A bidirectional Gemma 3 (' + arch_class + ')' if arch == 'gemma3_encoder' else arch_class} exported "
        "from megamlm",
        "",
        f"Converted by megamlm's `tools/convert_to_hf.py` from `{record.path}`.",
        "",
        "## Training",
        "",
        *training_lines(f),
    ]
    if f["init_from"] and not f["merged_from"]:
        lines.append(f"- Continued pretraining from: {f['init_from']} (weights only; fresh optimizer and schedule)")
    if f["imported_from"] and not f["merged_from"]:
        lines.append(f"- Initialised from: {f['imported_from'].get('source')} (converted by tools/convert_from_hf.py)")
    lines += [
        "",
        "## Model",
        "",
        f"- {a.num_layers} layers, hidden {a.hidden_size}, MLP {a.ffn_hidden_size}, "
        f"{a.num_attention_heads} heads / {a.num_query_groups} KV heads, vocabulary {a.vocab_size}",
        f"- {describe_features(a)}",
        f"- RoPE theta {a.rope_theta:g}, context {a.max_seq_length} ({context_origin(f, a.max_seq_length)}), "
        f"weights in {dtype}",
    ]
    if arch_class.endswith("MaskedLM") or arch == "gemma3_encoder":  # the exports fill-mask is for
        imported_type = (f["imported_from"] or {}).get("model_type")
        lines += head_section(head_objectives(f["objective"], f["merged_from"], f["steps"], imported_type),
                              bool(f["merged_from"]))
    lines.append("")
    if arch == "gemma3_encoder":
        lines.append(_gemma3_encoder_use(a.sliding_window if a.has_sliding_layers() else None))
    if arch in MODERNBERT_ARCHS:
        lines.append(modernbert_use(arch, a))
    return "\n".join(lines)


def context_origin(f: dict, context: int) -> str:
    """Where the context (config.json's max_position_embeddings) comes from: RoPE holds no position weights, so it
    is a declared limit, and the card says what training stands behind it."""
    if f["merged_from"]:
        trained = sorted({int(e["seq_length"]) for e in f["merged_from"] if e.get("steps") and e.get("seq_length")})
        at = f"; training of the inputs used {', '.join(map(str, trained))} tokens per sample" if trained else ""
        return f"max_position_embeddings: the longest context among the merge's inputs{at}"
    if f["steps"] and f["init_from"]:
        return (f"max_position_embeddings: the {f['seq_length']} tokens per sample this model was trained at; "
                f"positions beyond were trained, if at all, by the model it continued from ({f['init_from']})")
    if f["steps"]:
        return f"max_position_embeddings: the {f['seq_length']} tokens per sample it was trained at"
    return "max_position_embeddings: the source model's"

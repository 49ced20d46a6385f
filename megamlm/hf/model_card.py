"""The README.md of an exported model: how it was trained, read from the checkpoint's own record."""

from __future__ import annotations

from megamlm.config import objective_phases
from megamlm.hf.hf_config import describe_features
from megamlm.hf.megamlm_checkpoint import CheckpointRecord

_OBJECTIVE_NAMES = {
    "mlm": "masked language modeling (MLM)",
    "clm": "causal language modeling (CLM)",
    "clm_then_mlm": "CLM, then MLM",
    "mlm_then_clm": "MLM, then CLM",
    "mntp": "masked next-token prediction (MNTP)",
}


def training_facts(record: CheckpointRecord) -> dict:
    run = record.config.get("config") or {}
    objective = (run.get("objective") or {}).get("objective")
    steps = int(record.train_state.get("step", 0))
    progress = (record.train_state.get("state") or {}).get("progress") or record.train_state
    consumed = int(progress.get("consumed_samples", 0))
    seq_length = int(record.config.get("seq_length") or record.model_args.max_seq_length)
    return {
        "objective": objective,
        "switch_step": record.config.get("switch_step"),
        "switch_steps": record.config.get("switch_steps") or [],
        "switch": (run.get("objective") or {}).get("switch"),
        "train_iters": (run.get("training") or {}).get("train_iters"),
        "steps": steps,
        "consumed_samples": consumed,
        "seq_length": seq_length,
        "tokens_seen": consumed * seq_length,
        "data_path": record.config.get("data_path") or [],
        "imported_from": record.config.get("imported_from"),
        "init_from": (run.get("checkpoint") or {}).get("init_from"),
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

sentence-transformers loads it too (`SentenceTransformer(path)`, mean pooling).{reach}
"""


def model_card(record: CheckpointRecord, arch_class: str, dtype: str, arch: str | None = None) -> str:
    f = training_facts(record)
    a = record.model_args
    phases = objective_phases(f["objective"]) if f["objective"] else ()
    sequence = ", then ".join(p.upper() for p in phases) if len(phases) > 1 else None  # mntp,mlm or mlm,clm,mlm
    objective = _OBJECTIVE_NAMES.get(f["objective"]) or sequence or f["objective"] or "unknown"
    if len(f["switch_steps"]) > 1:  # three or more phases
        steps = ", ".join(map(str, f["switch_steps"]))
        schedule = f"{objective}, switching after steps {steps} of {f['train_iters']}"
    elif len(phases) == 2:
        given = f" (--switch {f['switch']})" if f["switch"] is not None else ""
        schedule = f"{objective}, switching after step {f['switch_step']} of {f['train_iters']}{given}"
    else:
        schedule = objective
    data = ", ".join(f["data_path"]) or "none recorded"
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
        f"- Objective schedule: {schedule}",
        f"- Switch step: {f['switch_step'] if f['switch_step'] is not None else 'none (single objective)'}"
        if len(f["switch_steps"]) <= 1 else f"- Switch steps: {', '.join(map(str, f['switch_steps']))}",
        f"- Steps: {f['steps']}",
        f"- Tokens seen: {f['tokens_seen']:,} ({f['consumed_samples']:,} samples x {f['seq_length']} tokens)",
        f"- Data: {data}",
    ]
    if f["init_from"]:
        lines.append(f"- Continued pretraining from: {f['init_from']} (weights only; fresh optimizer and schedule)")
    if f["imported_from"]:
        lines.append(f"- Initialised from: {f['imported_from'].get('source')} (converted by tools/convert_from_hf.py)")
    lines += [
        "",
        "## Model",
        "",
        f"- {a.num_layers} layers, hidden {a.hidden_size}, MLP {a.ffn_hidden_size}, "
        f"{a.num_attention_heads} heads / {a.num_query_groups} KV heads, vocabulary {a.vocab_size}",
        f"- {describe_features(a)}",
        f"- RoPE theta {a.rope_theta:g}, context {a.max_seq_length}, weights in {dtype}",
        "",
    ]
    if arch == "gemma3_encoder":
        lines.append(_gemma3_encoder_use(a.sliding_window if a.has_sliding_layers() else None))
    return "\n".join(lines)

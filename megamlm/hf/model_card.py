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


_GEMMA3_ENCODER_USE = """## Use

A native bidirectional Gemma 3 (`use_bidirectional_attention: true` in config.json, sliding windows included):
it loads without remote code.

```python
from transformers import AutoModel, AutoModelForSequenceClassification
encoder = AutoModel.from_pretrained(path)                      # Gemma3TextModel: hidden states
classifier = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
```

sentence-transformers loads it too (`SentenceTransformer(path)`, mean pooling). transformers has no masked-LM
class for Gemma 3: for MLM logits, load the causal-LM class on this bidirectional config,
`AutoModelForCausalLM.from_pretrained(path)` (its LM head is the tied embedding), and read the logits at the
mask token's positions.
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
        "tags: [megamlm, " + ("fill-mask" if arch_class.endswith("MaskedLM") else
                              "feature-extraction" if arch == "gemma3_encoder" else "text-generation") + "]",
        "---",
        "",
        f"# {arch_class} exported from megamlm",
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
        lines.append(_GEMMA3_ENCODER_USE)
    return "\n".join(lines)

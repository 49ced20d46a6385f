"""megamlm checkpoint (any parallel layout) -> a Hugging Face folder that loads without remote code.

    export_checkpoint("runs/x", "hf/x", arch="eurobert", dtype="bf16")   # or arch llama / qwen2 / mistral

writes config.json, model.safetensors, tokenizer.json + tokenizer_config.json (with the mask token)
and a README.md model card, into a temporary folder renamed into place when complete.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from megamlm.checkpoint.reading import read_newest
from megamlm.hf.errors import ConversionError
from megamlm.hf.hf_config import (
    ExportBiases,
    SpecialIds,
    default_arch,
    export_biases,
    export_problem,
    hf_config_for,
)
from megamlm.hf.keymaps import EXPORT_ARCHS, MODERNBERT_ARCHS, KeyMap
from megamlm.hf.megamlm_checkpoint import AtomicFolder, load_model, read_record
from megamlm.hf.model_card import model_card
from megamlm.hf.modernbert import kept_settings_of, modernbert_hf_config
from megamlm.hf.sentence_export import (
    ENCODER_CLASSES,
    encoder_tensors,
    sentence_card,
    sentence_problem,
    write_sentence_files,
)
from megamlm.hf.tokenizer_files import find_tokenizer_json, write_export_tokenizer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def hf_state_dict(model: torch.nn.Module, keymap: KeyMap, dtype: torch.dtype,
                  biases: ExportBiases | None = None) -> dict[str, torch.Tensor]:
    """The tensors of an export under Hugging Face names: a tied LM head is left out (the config ties it), and
    attention biases the target has but the model lacks are written as zeros (``biases``: which it has)."""
    state = model.state_dict()
    if model.args.tie_word_embeddings:
        state.pop("lm_head.weight")
    if biases is not None:
        projections = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")
        for name in [n for n in state if n.endswith(projections)]:
            wanted = biases.out if name.endswith("o_proj.weight") else biases.qkv
            bias = name[: -len("weight")] + "bias"
            if wanted and bias not in state:
                state[bias] = torch.zeros(state[name].shape[0])
    out = {}
    for name, t in state.items():
        t = t.detach().float()
        if keymap.norm_offset and name.endswith("norm.weight"):
            t = t - keymap.norm_offset  # back to Gemma's (1 + weight) convention
        out[name] = t.to(dtype).contiguous()
    return keymap.to_hf_tensors(out)


def _read_checkpoint(folder: Path):
    record = read_record(folder)
    return record, load_model(record)


def export_checkpoint(input_path: str | Path, output: str | Path, arch: str | None = None, dtype: str = "fp32",
                      force: bool = False, tokenizer: str | Path | None = None, log=print,
                      sentence_transformers: bool = False) -> Path:
    """Convert; every user error is raised before anything is written. ``arch`` None: the model's encoder export
    (``default_arch``: EuroBERT, or the bidirectional Gemma 3 for a Gemma 3 decoder). ``sentence_transformers``:
    the bare encoder and sentence-transformers' files instead of the LM (hf/sentence_export.py)."""
    if arch is not None and arch not in EXPORT_ARCHS:
        raise ConversionError(f"unsupported --arch {arch!r}; choose one of {', '.join(EXPORT_ARCHS)}")
    if dtype not in DTYPES:
        raise ConversionError(f"unsupported --dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    target = AtomicFolder(output, force)
    target.check()
    record, model = read_newest(input_path, _read_checkpoint)  # retried if --keep-last retires it meanwhile
    arch = arch or default_arch(record.model_args)
    problem = export_problem(arch, record.model_args) or (sentence_transformers and sentence_problem(arch))
    if problem:
        raise ConversionError(problem)
    tokenizer_json = find_tokenizer_json(tokenizer if tokenizer is not None else record.tokenizer_path())
    ids = {key: record.tokenizer.get(key) for key in ("bos_id", "eos_id", "pad_id", "mask_id")}
    if arch in ("eurobert", "modernbert") and ids["mask_id"] is None:
        raise ConversionError(f"checkpoint {record.path} records no mask token id; an {arch} export needs one "
                              "(train with a tokenizer that has a mask token)")
    keymap = EXPORT_ARCHS[arch]
    if arch in MODERNBERT_ARCHS:  # with the settings an imported ModernBERT kept (its fine-tuning heads')
        config = modernbert_hf_config(arch, record.model_args, SpecialIds(**ids), kept_settings_of(record, arch))
    else:
        config = hf_config_for(arch, record.model_args, SpecialIds(**ids))

    log(f"loaded {record.path}")
    with target as tmp:
        roles = {**ids, "cls_id": ids["bos_id"], "sep_id": ids["eos_id"]} if arch in MODERNBERT_ARCHS else ids
        write_export_tokenizer(tokenizer_json, tmp, roles, record.model_args.vocab_size,
                               record.model_args.max_seq_length)
        config.dtype = DTYPES[dtype]
        architecture = ENCODER_CLASSES[arch] if sentence_transformers else keymap.architecture
        config.architectures = [architecture]
        config.save_pretrained(str(tmp))
        tensors = hf_state_dict(model, keymap, DTYPES[dtype], export_biases(arch, record.model_args))
        if sentence_transformers:
            tensors = encoder_tensors(tensors)
            write_sentence_files(tmp, record.model_args.hidden_size, record.model_args.max_seq_length)
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if sentence_transformers:  # the card of the bare encoder: no MLM head to describe, how to embed
            card = sentence_card(model_card(record, architecture, dtype), architecture)
        else:
            card = model_card(record, architecture, dtype, arch)
        (tmp / "README.md").write_text(card)
    log(f"wrote {architecture} ({dtype}{', with sentence-transformers files' if sentence_transformers else ''}) "
        f"to {target.destination}")
    return target.destination

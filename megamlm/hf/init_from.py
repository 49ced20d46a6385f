"""`pretrain.py --init-from <Hugging Face folder or .gguf>`: import once, then continue like a megamlm checkpoint;
`--init-from <megamlm checkpoint>`: its shape and tokenizer adopted from its config.json the same way.

The model is imported into a cache folder (named by the source's path, sizes and times, so a changed
source is imported again) and the run adopts its shape and, unless --tokenizer-model is given, its
tokenizer (which now holds the mask token). The run's own --seq-length is kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from megamlm.checkpoint import resolve_checkpoint
from megamlm.checkpoint.catalog import CONFIG
from megamlm.config import SHAPE_FIELDS, Config, model_section_values
from megamlm.config.checks import check_adopted_shape, check_hf_init_from, check_init_from_checkpoint
from megamlm.data.embedded import TOKENIZER_FILE, default_cache_root
from megamlm.hf.hf_source import is_hf_model
from megamlm.hf.importer import import_hf, plan_import
from megamlm.hf.megamlm_checkpoint import TOKENIZER_DIR, read_record
from megamlm.log import log
from megamlm.model.config import ModelArgs

# The model flags --init-from adopts: all but the run's own sequence length and init std (the weights are loaded).
# An explicit flag among the ones that are the preset's until set (the shape, --head-dim) that contradicts the model
# is refused; the others take the model's values.
_KEPT = ("seq_length", "init_method_std")
_CHECKED = (*(name for name in SHAPE_FIELDS if name not in _KEPT), "head_dim")


def apply_shape(cfg: Config, args: ModelArgs, source) -> Config:
    """``cfg`` building ``args`` (the shape of the Hugging Face --init-from model): a contradicting shape or tensor
    flag is refused, every other model flag left at its default takes the model's value, and one given with a value
    of its own (a recipe's --local-rope-theta or dropout) is kept, as for a megamlm checkpoint."""
    saved = model_section_values(args)
    check_adopted_shape(cfg.model, {name: saved[name] for name in _CHECKED}, source)
    check_init_from_checkpoint(cfg.model, saved, _TENSOR_FLAGS, source)
    cfg, kept = _adopt(cfg, saved)
    if kept:
        log(f"--init-from {source}: kept as given: {', '.join(kept)}")
    return cfg


def _adopt(cfg: Config, saved: dict) -> tuple[Config, list[str]]:
    """``cfg`` with every model flag left at its default set to the --init-from model's value (``saved``), and the
    flags given with a value of their own that differs from it, kept (as ``--flag value (the model has ...)``)."""
    defaults = type(cfg.model)()
    adopted, kept = {}, []
    for name, value in saved.items():
        given = getattr(cfg.model, name)
        if name in _KEPT or given == value:
            continue
        if given == getattr(defaults, name):
            adopted[name] = value
        else:  # not a tensor flag (checked before): a deliberate value, such as a --rope-theta for context extension
            kept.append(f"--{name.replace('_', '-')} {given} (the checkpoint has {value})")
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **adopted)), kept


def adopt_init_from(cfg: Config) -> Config:
    """``resolve``'s adopter for pretrain.py: a Hugging Face --init-from model lends the run its shape and, unless
    --tokenizer-model is given, its tokenizer (a dry run reads its config only, a run imports it once); a megamlm
    checkpoint lends its shape and its tokenizer the same way, read from its config.json
    (``adopt_checkpoint_shape``)."""
    source = cfg.checkpoint.init_from
    if source and not is_hf_model(source):
        return adopt_checkpoint_shape(cfg)
    return adopt_hf_shape(cfg) if cfg.parallel.dry_run else adopt_hf_init_from(cfg)


# The model flags whose value decides which tensors a checkpoint holds and their shapes: a given one that contradicts
# the --init-from checkpoint is refused (its weights could not load). Any other model flag given with a value of its
# own (a --rope-theta for context extension) is kept, and the start says so.
_TENSOR_FLAGS = (*_CHECKED, "attention_bias", "attention_out_bias", "tie_word_embeddings", "qk_norm",
                 "sublayer_output_norms", "norm_type", "norm_bias", "embedding_norm", "prediction_head",
                 "classifier_bias", "decoder_bias", "mlp_bias")


def adopt_checkpoint_shape(cfg: Config) -> Config:
    """``cfg`` for a megamlm --init-from checkpoint (a save folder or an iter_* folder; an import of
    convert_from_hf.py, a merge, a run): every model flag left at its default takes the checkpoint's value, a given
    one that changes the tensors and contradicts it is refused in one line, and without --tokenizer-model the run
    uses the tokenizer the checkpoint was made with (an import's ``tokenizer/``, a run's recorded one) unless that
    is the bundled one. Reads config.json only: the weights are checked and loaded when the run starts."""
    source = cfg.checkpoint.init_from
    ckpt = resolve_checkpoint(source, deep=False)
    config = json.loads((ckpt / CONFIG).read_text())
    if "model_args" not in config:  # not a megamlm checkpoint: loading it names the problem
        return cfg
    args = ModelArgs(**config["model_args"])
    saved = model_section_values(args)
    check_init_from_checkpoint(cfg.model, saved, _TENSOR_FLAGS, ckpt)
    cfg, kept = _adopt(cfg, saved)
    tokenizer = None if cfg.data.tokenizer_model else _checkpoint_tokenizer(ckpt, config)
    if tokenizer is not None:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer_model=str(tokenizer)))
    log(f"--init-from {ckpt}: its shape ({args.num_layers} layers, hidden {args.hidden_size}, vocab "
        f"{args.vocab_size})" + (f", its tokenizer {tokenizer}" if tokenizer else "")
        + (f"; kept as given: {', '.join(kept)}" if kept else ""))
    return cfg


def _checkpoint_tokenizer(ckpt: Path, config: dict) -> Path | None:
    """The tokenizer a megamlm checkpoint was made with, when it is not the bundled one and is found: an import's
    ``tokenizer/`` beside it, else the path its run recorded (relative ones beside the checkpoint)."""
    recorded = (config.get("tokenizer") or {}).get("path")
    candidates = [ckpt.parent / recorded, Path(recorded)] if recorded else []
    candidates.append(ckpt.parent / TOKENIZER_DIR / "tokenizer.json")
    found = next((path for path in candidates if path.is_file()), None)
    if found is None or found.read_bytes() == Path(TOKENIZER_FILE).read_bytes():  # the bundled one, any clone's
        return None
    return found


def adopt_hf_shape(cfg: Config) -> Config:
    """For --dry-run: the shape of a Hugging Face --init-from model, read from its config and tokenizer only
    (no weights are read or imported; the folder need not even hold them)."""
    source = cfg.checkpoint.init_from
    if not source or not is_hf_model(source):
        return cfg
    return apply_shape(cfg, plan_import(source, cfg.model.seq_length, require_weights=False).model_args, source)


def _fingerprint(source: Path) -> str:
    digest = hashlib.sha256(str(source.resolve()).encode())
    files = [source] if source.is_file() else sorted(p for p in source.iterdir() if p.is_file())
    for path in files:
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def import_folder(source: str | Path, cache_dir: str | Path | None = None) -> Path:
    """Where the megamlm checkpoint of ``source`` lives in the cache (a folder once imported)."""
    source = Path(source)
    root = Path(cache_dir) if cache_dir else default_cache_root()
    return root / "hf-imports" / f"{source.stem}-{_fingerprint(source)}"


def imported_copy(source: str | Path, target: Path) -> Path:
    """The megamlm checkpoint of ``source`` in the cache folder ``target`` (``import_folder``), imported on first
    use."""
    if target.is_dir():
        return target
    log(f"importing {source} into {target} (once; later runs reuse it)")
    return import_hf(source, target, log=log)


def adopt_hf_init_from(cfg: Config) -> Config:
    """``cfg`` for a Hugging Face --init-from model, imported once: its shape, its tokenizer unless
    --tokenizer-model is given, and --init-from pointing at the import; a megamlm checkpoint is left as is."""
    source = cfg.checkpoint.init_from
    if not source or not is_hf_model(source):
        return cfg
    target = import_folder(source, cfg.data.data_cache_path)
    check_hf_init_from(cfg, source, target.is_dir(), int(os.environ.get("WORLD_SIZE", "1")))
    ckpt = imported_copy(source, target)
    args = read_record(ckpt).model_args
    cfg = apply_shape(cfg, args, source)
    tokenizer = cfg.data.tokenizer_model or str(ckpt / TOKENIZER_DIR / "tokenizer.json")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer_model=tokenizer),
                              checkpoint=dataclasses.replace(cfg.checkpoint, init_from=str(ckpt)))
    log(f"--init-from {source}: using its import {ckpt} ({args.num_layers} layers, hidden {args.hidden_size}, "
        f"vocab {args.vocab_size}); tokenizer {tokenizer}")
    return cfg


def warn_if_context_shorter(checkpoint: Path, seq_length: int) -> None:
    """Warn when the --init-from model (its resolved checkpoint folder) was made for fewer positions than this
    run's --seq-length."""
    made_for = json.loads((Path(checkpoint) / CONFIG).read_text()).get("model_args", {}).get("max_seq_length")
    if made_for is not None and made_for < seq_length:
        log(f"warning: the --init-from model ({checkpoint}) was made for at most {made_for} positions "
            f"(max_position_embeddings) and --seq-length is {seq_length}: positions beyond {made_for} were never "
            f"trained (rotary embeddings extrapolate to them); expect a higher loss at first, or pass --seq-length "
            f"{made_for}")

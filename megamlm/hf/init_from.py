"""`pretrain.py --init-from <Hugging Face folder or .gguf>`: import once, then continue like a megamlm checkpoint.

The model is imported into a cache folder (named by the source's path, sizes and times, so a changed
source is imported again) and the run adopts its shape and, unless --tokenizer-model is given, its
tokenizer (which now holds the mask token). The run's own --seq-length is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from megamlm.checkpoint.catalog import CONFIG
from megamlm.config import Config, ConfigError
from megamlm.data.embedded import default_cache_root
from megamlm.hf.hf_source import is_hf_model
from megamlm.hf.importer import import_hf, plan_import
from megamlm.hf.megamlm_checkpoint import TOKENIZER_DIR, read_record
from megamlm.log import log
from megamlm.model.config import ModelArgs

# ModelConfig field <- ModelArgs field: an explicit flag that contradicts the model is refused.
SHAPE_FIELDS = {"num_layers": "num_layers", "hidden_size": "hidden_size", "ffn_hidden_size": "ffn_hidden_size",
                "num_attention_heads": "num_attention_heads", "num_query_groups": "num_query_groups",
                "vocab_size": "vocab_size", "head_dim": "head_dim"}
# Settings with a default rather than None, taken from the model whatever the flags say.
ADOPTED_FIELDS = ("rope_theta", "norm_epsilon", "attention_bias", "attention_out_bias", "tie_word_embeddings")


def apply_shape(cfg: Config, args: ModelArgs, source) -> None:
    """Make ``cfg.model`` build ``args`` (the shape of the --init-from model); a contradicting flag is refused."""
    for field, arg in SHAPE_FIELDS.items():
        wanted, explicit = getattr(args, arg), getattr(cfg.model, field)
        if explicit is not None and explicit != wanted:
            raise ConfigError(f"--{field.replace('_', '-')} {explicit} contradicts the --init-from model, which has "
                              f"{wanted} ({source}); drop the flag (the shape comes from the model)")
        setattr(cfg.model, field, wanted)
    for field in ADOPTED_FIELDS:
        setattr(cfg.model, field, getattr(args, field))
    cfg.model.rope_scaling = json.dumps(args.rope_scaling.to_dict()) if args.rope_scaling is not None else None


def adopt_hf_shape(cfg: Config) -> None:
    """For --dry-run: the shape of a Hugging Face --init-from model, read from its config and tokenizer only
    (no weights are read or imported; the folder need not even hold them)."""
    source = cfg.checkpoint.init_from
    if not source or not is_hf_model(source):
        return
    apply_shape(cfg, plan_import(source, cfg.model.seq_length, require_weights=False).model_args, source)


def _fingerprint(source: Path) -> str:
    digest = hashlib.sha256(str(source.resolve()).encode())
    files = [source] if source.is_file() else sorted(p for p in source.iterdir() if p.is_file())
    for path in files:
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def imported_copy(source: str | Path, cache_dir: str | Path | None = None) -> Path:
    """The megamlm checkpoint of ``source`` in the cache, imported on first use."""
    source = Path(source)
    root = Path(cache_dir) if cache_dir else default_cache_root()
    target = root / "hf-imports" / f"{source.stem}-{_fingerprint(source)}"
    if target.is_dir():
        return target
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(f"--init-from {source} is a Hugging Face model that has not been imported yet, and "
                          "importing it in every rank of a multi-process launch would race: run "
                          f"`python tools/convert_from_hf.py --input {source} --output CKPT` once and pass "
                          "--init-from CKPT")
    log(f"importing {source} into {target} (once; later runs reuse it)")
    return import_hf(source, target, log=log)


def adopt_hf_init_from(cfg: Config) -> None:
    """Rewrite ``cfg`` in place when --init-from names a Hugging Face model; a megamlm checkpoint is left as is."""
    source = cfg.checkpoint.init_from
    if not source or not is_hf_model(source):
        return
    if not cfg.data.data_path:
        raise ConfigError(f"--init-from {source}: the bundled corpus is tokenized with megamlm's own tokenizer, not "
                          "this model's; tokenize your data with the model's tokenizer (tools/preprocess_data.py) "
                          "and pass --data-path")
    ckpt = imported_copy(source, cfg.data.data_cache_path)
    args = read_record(ckpt).model_args
    apply_shape(cfg, args, source)
    if not cfg.data.tokenizer_model:
        cfg.data.tokenizer_model = str(ckpt / TOKENIZER_DIR / "tokenizer.json")
    cfg.checkpoint.init_from = str(ckpt)
    log(f"--init-from {source}: using its import {ckpt} ({args.num_layers} layers, hidden {args.hidden_size}, "
        f"vocab {args.vocab_size}); tokenizer {cfg.data.tokenizer_model}")


def warn_if_context_shorter(checkpoint: Path, seq_length: int) -> None:
    """Warn when the --init-from model (its resolved checkpoint folder) was made for fewer positions than this
    run's --seq-length."""
    made_for = json.loads((Path(checkpoint) / CONFIG).read_text()).get("model_args", {}).get("max_seq_length")
    if made_for is not None and made_for < seq_length:
        log(f"warning: the --init-from model ({checkpoint}) was made for at most {made_for} positions "
            f"(max_position_embeddings) and --seq-length is {seq_length}: positions beyond {made_for} were never "
            f"trained (rotary embeddings extrapolate to them); expect a higher loss at first, or pass --seq-length "
            f"{made_for}")

"""The random-init baseline: a model of the evaluated models' shape and tokenizer whose weights are freshly
initialised, fine-tuned and scored through exactly the same protocol (it is one more model of the evaluation).

Its folder is the evaluated model's Hugging Face folder (config, tokenizer) with new weights: transformers' own
initialisation of that architecture (``AutoModel.from_config``: normal(0, initializer_range) matrices and
embeddings, unit norms) under ``torch.manual_seed(RANDOM_INIT_SEED)``, so the same shape always gives the same
random model. It is written once under the evaluation's ``hf_exports`` (temporary name, then renamed) with a
``random_init.json`` saying what it was made from; a later evaluation reuses it when the shape agrees and refuses
otherwise."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from megamlm.eval.megamlm_encoder import is_megamlm_encoder
from megamlm.eval.model_io import ModelFolderError
from megamlm.eval.model_source import ModelEntry

RANDOM_INIT_SEED = 0
DEFAULT_NAME = "random-init"
RECORD = "random_init.json"
SHAPE_KEYS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "intermediate_size", "max_position_embeddings")
"""The config fields that make two models the same shape."""
_WEIGHTS = (".safetensors", ".bin")


def shape_of(hf_path: Path) -> dict:
    config = json.loads((Path(hf_path) / "config.json").read_text(encoding="utf-8"))
    return {key: config.get(key) for key in SHAPE_KEYS}


def _tokenizer_json(hf_path: Path) -> str | None:
    path = Path(hf_path) / "tokenizer.json"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def check_one_shape(models: list[ModelEntry]) -> ModelEntry:
    """The first model, after checking that every model has its shape and tokenizer (one random-init per command)."""
    first = models[0]
    for model in models[1:]:
        if shape_of(model.hf_path) != shape_of(first.hf_path) or \
                _tokenizer_json(model.hf_path) != _tokenizer_json(first.hf_path):
            raise ModelFolderError(f"--random-init-baseline: models {first.name} and {model.name} differ in shape or "
                                   "tokenizer; evaluate one shape per command, each with its own "
                                   "--random-init-baseline NAME")
    if is_megamlm_encoder(first.hf_path):
        raise ModelFolderError(f"--random-init-baseline: {first.name} is evaluated by megamlm's own model (no Hugging "
                               "Face encoder holds it), which has no random initialisation here; leave the flag out "
                               "for this model")
    return first


def random_init_model(models: list[ModelEntry], name: str, export_root: Path, log=print) -> ModelEntry:
    """The random-init model of ``models``' shape, written under ``export_root/name`` (or reused from there)."""
    template = check_one_shape(models)
    record = {"seed": RANDOM_INIT_SEED, "shape": shape_of(template.hf_path), "made_from": str(template.hf_path),
              "initialisation": "transformers AutoModel.from_config under torch.manual_seed(seed)"}
    target = Path(export_root) / name
    if target.exists():
        try:
            old = json.loads((target / RECORD).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            old = None
        if old is None or old.get("shape") != record["shape"] or old.get("seed") != RANDOM_INIT_SEED:
            raise ModelFolderError(f"{target} exists but is not the random-init model of {template.name}'s shape; "
                                   "use another --random-init-baseline NAME or another --output folder")
        return ModelEntry(name, target, target)
    log(f"writing the random-init model {name} (shape of {template.name}, seed {RANDOM_INIT_SEED}) to {target}")
    _write(template.hf_path, target, record)
    return ModelEntry(name, target, target)


def _write(source: Path, target: Path, record: dict) -> None:
    import transformers
    from transformers import AutoConfig, AutoModel

    transformers.utils.logging.disable_progress_bar()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        for path in Path(source).iterdir():
            if path.is_file() and not path.name.endswith(_WEIGHTS) and not path.name.endswith(".index.json"):
                shutil.copy2(path, tmp / path.name)
        config = AutoConfig.from_pretrained(str(source), trust_remote_code=False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_INIT_SEED)
            model = AutoModel.from_config(config, trust_remote_code=False)
        model.save_pretrained(tmp)
        (tmp / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

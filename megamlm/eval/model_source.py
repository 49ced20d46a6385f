"""--model entries: `name=path` pairs whose path is a Hugging Face folder, a megamlm checkpoint, or a
megamlm run folder (its --save folder). Checkpoints are exported once to Hugging Face folders under the
output folder, through megamlm.hf; a later launch reuses the export. A run folder stands for every
whole checkpoint in it (models NAME-stepN, for data-efficiency curves), or only its newest with
--checkpoints latest."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from megamlm.checkpoint.catalog import list_checkpoints, problem, step_of
from megamlm.eval.megamlm_encoder import write_marker
from megamlm.eval.model_io import ModelFolderError, check_model_folder
from megamlm.hf.export import export_checkpoint
from megamlm.hf.hf_config import default_arch, export_problem, unheld_features
from megamlm.hf.keymaps import EXPORT_ARCHS
from megamlm.hf.megamlm_checkpoint import read_record

CHECKPOINT_CHOICES = ("all", "latest")

MODEL_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")


@dataclass(frozen=True)
class ModelEntry:
    name: str
    path: Path            # what the user gave
    hf_path: Path         # the Hugging Face folder that is evaluated


def parse_model_specs(specs: list[str]) -> list[tuple[str, Path]]:
    """`name=path` or a bare path (named by its folder); names must be unique and file-name safe."""
    pairs = []
    for spec in specs:
        for item in filter(None, (s.strip() for s in spec.split(","))):
            name, sep, path = item.partition("=")
            if not sep:
                name, path = Path(item).name, item
            if not MODEL_NAME.match(name):
                raise ModelFolderError(f"model name {name!r} (from {item!r}) may only use letters, digits and ._+-; "
                                       f"write --model NAME=PATH")
            pairs.append((name, Path(path)))
    names = [n for n, _ in pairs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ModelFolderError(f"model names {duplicates} are given twice; name each model: --model a=PATH1,b=PATH2")
    if not pairs:
        raise ModelFolderError("no model given; pass --model NAME=PATH (a Hugging Face folder or a megamlm checkpoint)")
    return pairs


def is_megamlm_checkpoint(path: Path) -> bool:
    if (path / "latest_checkpointed_iteration.txt").exists() or any(path.glob("iter_*")):
        return True
    config = path / "config.json"
    if config.is_file():
        try:
            return "model_args" in json.loads(config.read_text())
        except json.JSONDecodeError:
            return False
    return False


def resolve_models(name: str, path: Path, export_root: Path, export_arch: str | None = None, checkpoints: str = "all",
                   log=print) -> list[ModelEntry]:
    """One entry per model to evaluate: a run folder gives one per whole checkpoint (or its newest)."""
    if checkpoints not in CHECKPOINT_CHOICES:
        raise ModelFolderError(f"unknown --checkpoints {checkpoints!r}; use one of {', '.join(CHECKPOINT_CHOICES)}")
    path = Path(path)
    runs = list_checkpoints(path) if path.is_dir() and step_of(path) is None else []
    if checkpoints == "latest" or not runs:
        return [resolve_model(name, path, export_root, export_arch, log)]
    whole = [(step, folder) for step, folder in sorted(runs) if problem(folder, deep=False) is None]
    if not whole:
        raise ModelFolderError(f"run folder {path} has no whole checkpoint (its iter_* folders are incomplete); "
                               f"pass one checkpoint folder or a finished run")
    skipped = len(runs) - len(whole)
    if skipped:
        log(f"{path}: {skipped} incomplete checkpoint folders skipped")
    return [resolve_model(f"{name}-step{step}", folder, export_root, export_arch, log) for step, folder in whole]


def resolve_model(name: str, path: Path, export_root: Path, export_arch: str | None = None, log=print) -> ModelEntry:
    """Check an HF folder, or export a megamlm checkpoint (reusing an earlier complete export); ``export_arch``
    None: the model's encoder export (``megamlm.hf.hf_config.default_arch``)."""
    if path.is_dir() and is_megamlm_checkpoint(path):
        target = export_root / name
        if not (target / "config.json").is_file():
            log(f"exporting megamlm checkpoint {path} to {target} ({export_arch or 'its encoder export'})")
            fallback = None if export_arch is not None else _megamlm_encoder_arch(path)
            if fallback is None:
                export_checkpoint(path, target, arch=export_arch, log=log)
            else:  # no Hugging Face encoder holds it: the causal export, evaluated by megamlm's own model
                arch, reason = fallback
                # Says what happens instead of an export refusal, whose advice (run tools/evaluate.py) is this.
                log(f"{path}: {reason}; evaluating it with megamlm's own bidirectional model, read from its causal "
                    f"--arch {arch} export in {target}")
                export_checkpoint(path, target, arch=arch, log=log)
                write_marker(target, reason)
        check_model_folder(target)
        return ModelEntry(name, path, target)
    check_model_folder(path)
    return ModelEntry(name, path, path)


def _megamlm_encoder_arch(path: Path) -> tuple[str, str] | None:
    """(causal arch, why) for a checkpoint whose encoder export is refused but a causal family holds it exactly
    (Qwen3: query/key norms), else None (the encoder export, or its refusal, applies)."""
    args = read_record(path).model_args
    encoder = default_arch(args)
    if export_problem(encoder, args) is None:
        return None
    for arch in ("qwen3",):
        if export_problem(arch, args) is None:
            unheld = unheld_features(encoder, args) or ["features"]  # a Gemma 3 encoder never reaches here
            return arch, (f"no Hugging Face encoder holds its {unheld[0]} ({EXPORT_ARCHS[encoder].architecture} "
                          "has none)")
    return None

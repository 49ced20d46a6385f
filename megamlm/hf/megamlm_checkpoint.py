"""Reading and writing megamlm checkpoint folders for conversion (weights only, single process).

The exporter reads any checkpoint through DCP, which reshards whatever parallel layout wrote it;
the importer writes a step-0 checkpoint in the trainer's layout (megamlm.checkpoint.checkpointer)
with the tokenizer beside it, so `pretrain.py --init-from` and `convert_to_hf.py` both take it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from megamlm.checkpoint import load_model_weights, resolve_checkpoint
from megamlm.checkpoint.catalog import CONFIG
from megamlm.checkpoint.checkpointer import read_train_state, save_state_checkpoint
from megamlm.checkpoint.untrusted import read_metadata
from megamlm.hf.errors import ConversionError
from megamlm.model.config import ModelArgs
from megamlm.model.transformer import Transformer

TOKENIZER_DIR = "tokenizer"


@dataclass
class CheckpointRecord:
    """What a checkpoint folder says about itself (config.json + its train state)."""

    path: Path
    model_args: ModelArgs
    config: dict
    train_state: dict

    @property
    def tokenizer(self) -> dict:
        return self.config.get("tokenizer") or {}

    def tokenizer_path(self) -> Path:
        """The run's tokenizer; a relative path, or one that moved, is looked up beside the checkpoint."""
        recorded = self.tokenizer.get("path")
        save_dir = self.path.parent
        candidates = []
        if recorded:
            recorded_path = Path(recorded)
            candidates += [recorded_path] if recorded_path.is_absolute() else [save_dir / recorded, recorded_path]
        candidates.append(save_dir / TOKENIZER_DIR / "tokenizer.json")
        for candidate in candidates:
            if candidate.exists():
                return candidate
        raise ConversionError(f"tokenizer of checkpoint {self.path} not found (config.json names {recorded!r}, and "
                              f"{save_dir / TOKENIZER_DIR} does not exist); put the tokenizer back or pass --tokenizer")


def read_record(path: str | Path) -> CheckpointRecord:
    ckpt = resolve_checkpoint(path)
    config = json.loads((ckpt / CONFIG).read_text())
    if "model_args" not in config:
        raise ConversionError(f"{ckpt / CONFIG} has no 'model_args'; it was not written by megamlm's trainer")
    train_state = read_train_state(ckpt)
    return CheckpointRecord(ckpt, ModelArgs(**saved_model_args(config, train_state)), config, train_state)


def saved_model_args(config: dict, train_state: dict) -> dict:
    """The checkpoint's model: its run's ModelArgs, with the RoPE bases of the recipe phase it was saved in (a
    context-extension phase changes them, megamlm/config/phases.py); a run without phases, as recorded."""
    args = dict(config["model_args"])
    phases, step = config.get("recipe") or [], int(train_state.get("step", 0))
    saved_in = next((phase for phase in phases if phase["first_step"] <= step <= phase["last_step"]), None)
    if saved_in is not None:
        args["rope_theta"], args["local_rope_theta"] = saved_in["rope_bases"]
    return args


def check_weights_match(record: CheckpointRecord, model: torch.nn.Module) -> None:
    """Compare the shard metadata with the model built from config.json, naming the first mismatch."""
    metadata = read_metadata(record.path / ".metadata").state_dict_metadata
    for name, param in model.state_dict().items():
        key = f"model.{name}"
        if key not in metadata:
            raise ConversionError(f"checkpoint {record.path} has no tensor {name!r} that its config.json "
                                  "implies; the weights and config.json come from different models")
        stored = tuple(getattr(metadata[key], "size", ()))
        if stored != tuple(param.shape):
            raise ConversionError(f"tensor {name!r} in {record.path} has shape {stored} but config.json "
                                  f"implies {tuple(param.shape)}; the weights and config.json do not match")


def load_model(record: CheckpointRecord) -> Transformer:
    """The checkpoint's weights in a single-process fp32 model, whatever layout saved them."""
    model = Transformer(record.model_args)
    check_weights_match(record, model)
    load_model_weights(record.path, model, verify=False)  # read_record resolved and checked it
    return model.eval()


def write_weights_checkpoint(save_dir: Path, state_dict: dict[str, torch.Tensor], config: dict,
                             train_state: dict) -> Path:
    """A step-0 checkpoint holding only model weights, committed like the trainer's (no optimizer)."""
    return save_state_checkpoint(save_dir, 0, {"model": state_dict}, train_state, config)


class AtomicFolder:
    """Build a folder under a temporary sibling name and rename it into place on success.

    An existing destination is refused unless ``force``; with ``force`` it is replaced only once the
    new folder is complete.
    """

    def __init__(self, destination: str | Path, force: bool):
        self.destination = Path(destination)
        self.force = force
        self.tmp = self.destination.with_name(f".{self.destination.name}.tmp{os.getpid()}")

    def check(self) -> None:
        if self.destination.exists() and not self.force:
            raise ConversionError(f"output {self.destination} already exists; pass --force to replace it "
                                  "or choose another --output")
        if self.destination.exists() and not self.destination.is_dir():
            raise ConversionError(f"output {self.destination} exists and is not a folder; choose another --output")

    def __enter__(self) -> Path:
        self.check()
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir(parents=True)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        readable_like_the_rest(self.tmp)
        if self.destination.exists():
            old = self.destination.with_name(f".{self.destination.name}.old{os.getpid()}")
            os.replace(self.destination, old)
            os.replace(self.tmp, self.destination)
            shutil.rmtree(old)
        else:
            os.replace(self.tmp, self.destination)


def readable_like_the_rest(folder: Path) -> None:
    """Give every file in ``folder`` the mode a newly created file gets (0644 under the usual umask 022): some
    writers (safetensors) create theirs private (0600) through a temporary file."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~umask)

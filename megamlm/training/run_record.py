"""Run records: what a run was (resolved config, model shape, schedules, software, git commit, data fingerprint).

The record goes into every checkpoint's ``config.json`` and, per launch, into ``run_record.json`` beside the
checkpoints. Starting compares the checkpoint's record with this launch's (``training/resume.py``, by each setting's
role).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import time
from importlib import metadata
from pathlib import Path

import torch

import megamlm
from megamlm.checkpoint import CheckpointSaveError
from megamlm.checkpoint.checkpointer import CHECKPOINT_FORMAT, describe_failure
from megamlm.config.phases import recipe_of
from megamlm.data.blending import parse_data_path
from megamlm.data.indexed import IndexedDataset, bin_path, idx_path

RUN_RECORD = "run_record.json"
OPTIONAL_PACKAGES = ("numpy", "tokenizers", "safetensors", "triton", "flash-attn", "transformer-engine", "apex",
                     "transformers", "mpi4py")
# Files up to this size are hashed whole; larger ones by evenly spread 1 MiB chunks (first and last included),
# which keeps the fingerprint to seconds on terabyte corpora and still changes with any re-tokenization.
_WHOLE_FILE_BYTES = 64 << 20
_CHUNKS, _CHUNK_BYTES = 64, 1 << 20


def software_versions() -> dict:
    versions: dict = {"python": platform.python_version(), "torch": torch.__version__,
                      "cuda": torch.version.cuda, "rocm": getattr(torch.version, "hip", None)}
    if torch.cuda.is_available():
        try:
            versions["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            versions["nccl"] = None
        versions["device"] = torch.cuda.get_device_name()
    for package in OPTIONAL_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def arithmetic(device: torch.device) -> dict:
    """What decides a run's last bits besides its config and torch's version: the device type, the processor, the
    CPU kernels torch picked for it and the intra-op thread count (threaded matrix products and reductions may add
    up in another order). On the CPU a continuation is bitwise the uninterrupted run only where all of these agree;
    ``training/resume.py`` notes a checkpoint whose differ."""
    return {"device": device.type, "cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "intra_op_threads": torch.get_num_threads()}


def cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_state(folder: Path | None = None) -> dict | None:
    """{"commit", "dirty"} of the git checkout megamlm runs from; None outside one (an installed wheel)."""
    folder = folder or Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def _hash_file(digest, path: Path) -> None:
    size = path.stat().st_size
    digest.update(f"{path.suffix}:{size}".encode())
    with open(path, "rb") as f:
        if size <= _WHOLE_FILE_BYTES:
            digest.update(f.read())
            return
        for i in range(_CHUNKS):
            f.seek((size - _CHUNK_BYTES) * i // (_CHUNKS - 1))
            digest.update(f.read(_CHUNK_BYTES))


def data_fingerprint(data_path: list[str]) -> str:
    """A content hash of the training data (.idx and .bin of every prefix) and the blend weights.

    It does not depend on where the files live, so a run moved to another cluster resumes.
    """
    weights, prefixes = parse_data_path(data_path)
    digest = hashlib.sha256(json.dumps(weights).encode())
    for prefix in prefixes:
        IndexedDataset(prefix)  # a missing or malformed file gets the data package's own error
        for path in (idx_path(prefix), bin_path(prefix)):
            _hash_file(digest, Path(path))
    return digest.hexdigest()[:32]


def _recipe(cfg, plan):
    """The resolved run's recipe; a plan made by hand without one (a planner's or a test's record of a config)
    resolves it from ``cfg``, as the start-up does."""
    recipe = getattr(plan, "recipe", None)
    return recipe if recipe is not None else recipe_of(cfg)


def build_run_record(cfg, plan, world_size: int) -> dict:
    """The record of this launch (``cfg``: Config, ``plan``: ResolvedRun)."""
    tok, objectives = plan.tokenizer, plan.objective_schedule
    # What this module finds out itself first, then what each part of the run says of itself (one part at a time).
    recipe, fingerprint = _recipe(cfg, plan), data_fingerprint(plan.data_path)
    software, arithmetic_, git = software_versions(), arithmetic(plan.device), git_state()
    config, model_args, phases = cfg.to_dict(), plan.model_args.to_dict(), recipe.to_list()
    switch_step, switch_steps, objective_schedule = (objectives.switch_step, list(objectives.switch_steps),
                                                     objectives.state_dict())
    return {
        "megamlm_version": megamlm.__version__, "checkpoint_format": CHECKPOINT_FORMAT,
        "config": config, "model_args": model_args,
        "switch_step": switch_step, "data_path": plan.data_path,
        "switch_steps": switch_steps,
        "recipe": phases,  # the resolved phases (config/phases.py), compared on resume
        "schedule": {"objective_schedule": objective_schedule, "lr_schedule": plan.lr_schedule.state_dict()},
        "seq_length": plan.model_args.max_seq_length,
        "tokenizer": {"path": str(plan.tokenizer_path), "vocab_size": tok.vocab_size, "bos_id": tok.bos_id,
                      "eos_id": tok.eos_id, "pad_id": tok.pad_id, "mask_id": tok.mask_id},
        "data_fingerprint": fingerprint,
        "software": software, "arithmetic": arithmetic_, "git": git,
        "world_size": world_size,
        "host": socket.gethostname(), "launched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_run_record(save_dir: str | Path, record: dict) -> Path:
    """``run_record.json`` beside the checkpoints (rank 0; written to a temporary name, then renamed)."""
    save_dir = Path(save_dir)
    path = save_dir / RUN_RECORD
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        save_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
        os.replace(tmp, path)
    except OSError as err:
        raise CheckpointSaveError(f"cannot write into --save {save_dir}: {describe_failure(err)}; fix the folder's "
                                  "permissions or free disk space, or pass another --save") from None
    return path

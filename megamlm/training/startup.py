"""The start-up check phase: every check of a launch that the Config alone cannot make, run by ``plan_run``
(training/setup.py) before any work.

The Config's own checks ran when it was resolved (megamlm/config/checks.py). These need this launch: the world
size (the layout, megamlm/parallel/dims.py), this machine (the device, a Triton-capable GPU, the installed
optional packages, a compile mode it can run), the files named (the TensorBoard folder, the data and its
tokenizer) and the model's shape (float8's widths). Each raises one line naming the fix: ConfigError, or
LayoutError for the layout. The modules that apply a setting (parallel/compile.py, parallel/float8.py) say what
is wrong; this module is where it is refused.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from megamlm.config import Config, ConfigError, objective_phases, validation_enabled
from megamlm.errors import os_error_text
from megamlm.hf.hf_source import is_hf_model
from megamlm.kernels import check_kernel_backend
from megamlm.model.attention_backends import attention_backend_problem, check_attention_backend
from megamlm.model.config import Backends, ModelArgs
from megamlm.model.transformer import Transformer
from megamlm.parallel.compile import compile_mode_problem, resolve_compile_mode
from megamlm.parallel.dims import ParallelDims, dims_from_config
from megamlm.parallel.float8 import float8_problem, float8_width_problem


@dataclass(frozen=True)
class Launch:
    """What the checks of this launch found: its layout, device, compile mode and model backends."""

    dims: ParallelDims
    device: torch.device
    compile_mode: str
    """``--compile`` resolved for this device and layout (``auto`` measured per device, megamlm/parallel/compile.py)."""
    backends: Backends


def check_launch(cfg: Config) -> Launch:
    """The checks that need no data: the run's own files, the layout, the device and what runs on it."""
    check_run_files(cfg)
    dims = dims_from_config(cfg)
    device = resolve_device(cfg.training.device)
    compile_mode = check_compile(cfg.performance.compile, device, dims)
    if problem := attention_backend_problem(cfg.performance.attention_backend, device.type):
        raise ConfigError(problem)
    if cfg.performance.fp8:
        check_float8(dims)
    check_data_sources(cfg)
    return Launch(dims, device, compile_mode, backends_for(cfg, device))


def check_run_files(cfg: Config) -> None:
    c, tensorboard_dir = cfg.checkpoint, cfg.logging.tensorboard_dir
    if c.init_from and is_hf_model(c.init_from):  # load_config imports it and adopts its shape and tokenizer
        raise ConfigError(f"--init-from {c.init_from} is a Hugging Face model that this config has not adopted: "
                          "build the config with megamlm.cli.load_config, which imports it")
    check_tensorboard_dir(tensorboard_dir)


def check_tensorboard_dir(folder: str | None) -> None:
    """Refuse, before any work, a --tensorboard-dir that is a file or whose disk cannot take a byte (full): the
    events are written by TensorBoard's own thread, where a failure is a traceback, not a line. Probed with a
    temporary file in the folder, or in its nearest existing parent, so a refused launch leaves no folder behind."""
    if not folder:
        return
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--tensorboard-dir {folder} is a file, not a folder; pass a folder for the TensorBoard "
                          "events (it is created if missing)")
    existing = next(p for p in (path, *path.parents) if p.exists())
    try:
        with tempfile.TemporaryFile(dir=existing) as probe:
            probe.write(b"\0")
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as err:
        raise ConfigError(f"--tensorboard-dir {folder} cannot be written ({os_error_text(err)}); free space there or "
                          "pass another folder") from None


def resolve_device(choice: str) -> torch.device:
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but no CUDA/ROCm device is visible; use --device cpu")
    return torch.device(choice)


def check_compile(mode: str, device: torch.device, dims: ParallelDims) -> str:
    """``--compile mode`` resolved for ``device`` and ``dims``, refused where it cannot run."""
    if problem := compile_mode_problem(mode, device, dims):
        raise ConfigError(problem)
    return resolve_compile_mode(mode, device, dims)


def check_float8(dims: ParallelDims) -> None:
    """``--fp8`` runs in this layout and installation."""
    if problem := float8_problem(dims):
        raise ConfigError(problem)


def check_data_sources(cfg: Config) -> None:
    """--data-path and --tokenizer-model go together (no --data-path: the bundled corpus with its own tokenizer)."""
    if not cfg.data.data_path and cfg.data.tokenizer_model:
        raise ConfigError("--tokenizer-model was given without --data-path; the bundled corpus has its own "
                          "tokenizer: pass --data-path too, or drop --tokenizer-model")
    if cfg.data.data_path and not cfg.data.tokenizer_model:
        raise ConfigError("--data-path needs --tokenizer-model (the tokenizer the data was preprocessed with): "
                          "it gives the mask, padding and special-token ids; data from tools/preprocess_data.py "
                          "names it in its sidecar, which this data lacks or whose tokenizer file is not here")


def backends_for(cfg: Config, device: torch.device) -> Backends:
    """The model's kernel and attention backends, checked to run here."""
    perf = cfg.performance
    if perf.kernel_backend == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ConfigError(f"--kernel-backend triton runs Triton kernels on a CUDA/ROCm GPU, and this run is on "
                          f"{device.type}; use --kernel-backend auto (chunked LM-head loss on CPU), or set "
                          "TRITON_INTERPRET=1 to run the kernels in Triton's interpreter (slow, for tests)")
    try:
        return Backends(attention=check_attention_backend(perf.attention_backend),
                        kernels=check_kernel_backend(perf.kernel_backend))
    except (ValueError, RuntimeError, ImportError) as err:
        raise ConfigError(str(err)) from None


def check_tokenizer(cfg: Config, tokenizer) -> None:
    """The tokenizer has the mask token the run needs."""
    if tokenizer.mask_id is None and (objective_phases(cfg.objective.objective) != ("clm",) or validation_enabled(cfg)):
        raise ConfigError(f"tokenizer {tokenizer} has no mask token, which MLM (and validation, which scores MLM "
                          "too) needs; use a tokenizer with one (Llama 3's <|reserved_special_token_0|> is picked "
                          "automatically) or --objective clm without a validation set")


def check_model(cfg: Config, args: ModelArgs) -> None:
    """The model's shape suits the run's settings."""
    if cfg.performance.fp8:
        check_float8_widths(args)


def check_float8_widths(args: ModelArgs) -> None:
    """float8 matmuls take the linear layers of a model of ``args`` (built on the meta device: shapes only)."""
    with torch.device("meta"):
        model = Transformer(args)
    if problem := float8_width_problem(model):
        raise ConfigError(problem)

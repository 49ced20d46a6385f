"""The start-up check phase: every check of a launch that the Config alone cannot make, run by ``resolve_run``
(training/resolved_run.py) before any work.

The Config's own checks ran when it was resolved (megamlm/config/checks.py). These need this launch: the world
size (the layout, ``resolve_parallel_dims``; megamlm/parallel/dims.py holds its arithmetic), this machine (the
device, a Triton-capable GPU, the installed optional packages, a compile mode it can run), the files named (the
TensorBoard folder, the data and its tokenizer) and the model's shape (float8's widths). Each raises one line naming
the fix: ConfigError, or LayoutError for the layout. The modules that apply a setting (parallel/compile.py,
parallel/float8.py) say what is wrong; this module is where it is refused.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, get_args

import torch

from megamlm.config import (
    BatchSizes,
    Config,
    ConfigError,
    DataParallelImpl,
    ParallelConfig,
    PipelineSchedule,
    TrainingConfig,
    launch_world_size,
    objective_stages,
    resolved_shape,
    validation_enabled,
)
from megamlm.config.rampup import layout_problem as rampup_layout_problem
from megamlm.errors import LayoutError, os_error_text
from megamlm.extras import MissingExtra, installed, missing_message
from megamlm.hf.hf_source import is_hf_model
from megamlm.kernels import check_kernel_backend
from megamlm.launcher_env import world_size_from_env
from megamlm.model.attention_table import attention_backend_problem
from megamlm.model.config import Backends, ModelArgs
from megamlm.model.transformer import Transformer
from megamlm.parallel.compile import compile_mode_problem, resolve_compile_mode
from megamlm.parallel.dims import ParallelDims, data_parallel_degrees, layers_per_round
from megamlm.parallel.float8 import float8_problem, float8_width_problem
from megamlm.training.trackers import LIBRARY_TRACKERS


@dataclass(frozen=True)
class Compute:
    """How this launch computes, as its checks found it: its layout, device, compile mode and model backends."""

    dims: ParallelDims
    device: torch.device
    compile_mode: str
    """``--compile`` resolved for this device and layout (``auto`` measured per device, megamlm/parallel/compile.py)."""
    backends: Backends


def check_launch(cfg: Config) -> Compute:
    """The checks that need no data: the run's own files, the layout, the device and what runs on it."""
    check_run_files(cfg)
    dims = dims_from_config(cfg)
    launched = world_size_from_env()
    if dims.world_size != launched:
        raise LayoutError(f"the launcher started {launched} processes but the layout was planned for "
                          f"{dims.world_size}; launch {dims.world_size} processes or drop --world-size")
    device = resolve_device(cfg.training.device)
    compile_mode = check_compile(cfg.performance.compile, device, dims)
    if problem := attention_backend_problem(cfg.performance.attention_backend, device.type):
        raise ConfigError(problem)
    if cfg.performance.fp8:
        check_float8(dims)
    check_data_sources(cfg)
    return Compute(dims, device, compile_mode, backends_for(cfg, device))


def dims_from_config(cfg: Config, world_size: int | None = None) -> ParallelDims:
    """The run's checked layout (world size: the argument, --world-size, else the launcher's environment).

    ``cfg`` is resolved (megamlm/config/resolve.py): its batch sizes are set, fitted to this layout where the user
    left them unset.
    """
    return resolve_parallel_dims(world_size or launch_world_size(cfg), cfg.parallel, cfg.training,
                                 resolved_shape(cfg.model))


def resolve_parallel_dims(world_size: int, parallel: ParallelConfig, training: TrainingConfig,
                          shape: Mapping[str, int | None]) -> ParallelDims:
    """Check the layout ``parallel`` asks for against the world size, the batch sizes of ``training`` and the model
    ``shape`` (by flag name, as ``megamlm.config.resolved_shape`` gives it; ``vocab_size`` None: tokenizer-sized,
    padded to a multiple of TP later); raise LayoutError naming the fix. Returns the layout.

    ``dp_shard = -1`` takes whatever the other degrees leave of the world.
    """
    if world_size < 1:
        raise LayoutError(f"world size must be positive, got {world_size}")
    check_degrees(parallel)
    tp, pp = parallel.tensor_model_parallel_size, parallel.pipeline_model_parallel_size
    if world_size % (tp * pp):
        raise LayoutError(f"world size {world_size} is not divisible by TP {tp} x PP {pp}; launch a multiple of "
                          f"{tp * pp} processes or change --tp/--pp")
    dp = world_size // (tp * pp)
    check_data_parallel(parallel, dp, world_size)
    check_tensor_parallel(tp, shape)
    check_pipeline(parallel, shape["num_layers"])
    check_micro_batches(parallel, training, dp)
    return ParallelDims.of(world_size, parallel, shape["num_layers"])


def check_degrees(parallel: ParallelConfig) -> None:
    """Each degree is positive and each choice known."""
    for flag, value in (("--tensor-model-parallel-size", parallel.tensor_model_parallel_size),
                        ("--pipeline-model-parallel-size", parallel.pipeline_model_parallel_size),
                        ("--dp-replicate", parallel.dp_replicate)):
        if value < 1:
            raise LayoutError(f"{flag} must be >= 1, got {value}")
    if parallel.dp_shard == 0 or parallel.dp_shard < -1:
        raise LayoutError(f"--dp-shard must be >= 1, or -1 for the rest of the world; got {parallel.dp_shard}")
    for flag, value, choices in (("--data-parallel-impl", parallel.data_parallel_impl, get_args(DataParallelImpl)),
                                 ("--pipeline-schedule", parallel.pipeline_schedule, get_args(PipelineSchedule))):
        if value not in choices:
            raise LayoutError(f"unknown {flag} {value!r}; choose one of {', '.join(choices)}")


def check_data_parallel(parallel: ParallelConfig, dp: int, world_size: int) -> None:
    """The ``dp`` data-parallel ranks split into replicas and shards as asked (DDP: replicas only, without TP)."""
    tp, pp = parallel.tensor_model_parallel_size, parallel.pipeline_model_parallel_size
    dp_replicate, dp_shard = parallel.dp_replicate, parallel.dp_shard
    if parallel.data_parallel_impl == "ddp":
        if dp_shard not in (-1, 1):
            raise LayoutError("--dp-shard sets FSDP's sharding degree; with --data-parallel-impl ddp every "
                              "data-parallel rank holds a full replica: drop --dp-shard or use fsdp")
        if dp_replicate not in (1, dp):
            raise LayoutError(f"with --data-parallel-impl ddp all {dp} data-parallel ranks are replicas; "
                              f"drop --dp-replicate or set it to {dp}")
        if tp > 1:
            raise LayoutError("DDP does not compose with tensor parallelism here; use --data-parallel-impl fsdp "
                              "(FSDP2 shards over the data-parallel ranks and keeps TP's DTensors)")
        return
    if dp % dp_replicate:
        raise LayoutError(f"--dp-replicate {dp_replicate} does not divide the data-parallel size {dp} "
                          f"(world {world_size} / (TP {tp} x PP {pp})); pick a divisor of {dp}")
    dp_replicate, dp_shard = data_parallel_degrees(dp, parallel)
    if dp_replicate * dp_shard != dp:
        raise LayoutError(f"--dp-replicate {dp_replicate} x --dp-shard {dp_shard} = {dp_replicate * dp_shard} "
                          f"but world {world_size} / (TP {tp} x PP {pp}) leaves {dp} data-parallel ranks; "
                          "make the product match or pass --dp-shard -1")


def check_tensor_parallel(tp: int, shape: Mapping[str, int | None]) -> None:
    """Tensor parallelism splits the heads, the MLP, the sequence and the vocabulary evenly."""
    if tp == 1:
        return
    for name in ("num_attention_heads", "num_query_groups", "ffn_hidden_size", "seq_length"):
        if shape[name] % tp:
            raise LayoutError(f"--{name.replace('_', '-')} {shape[name]} is not divisible by "
                              f"--tensor-model-parallel-size {tp}; tensor parallelism splits it evenly: pick a TP "
                              "size that divides it")
    vocab_size = shape["vocab_size"]
    if vocab_size is not None and vocab_size % tp:
        raise LayoutError(f"--vocab-size {vocab_size} is not divisible by --tensor-model-parallel-size {tp}; "
                          f"pad it to a multiple of {128 * tp} (128 x TP)")


def check_pipeline(parallel: ParallelConfig, num_layers: int) -> None:
    """Every pipeline stage gets layers; interleaved 1F1B gets whole rounds of virtual stages, at least 2 a rank."""
    pp, schedule = parallel.pipeline_model_parallel_size, parallel.pipeline_schedule
    per_virtual_stage = parallel.num_layers_per_virtual_stage
    if pp == 1:
        if per_virtual_stage is not None or schedule != "1f1b":
            raise LayoutError("--pipeline-schedule/--num-layers-per-virtual-stage need --pipeline-model-parallel-size "
                              "> 1")
        return
    if schedule == "1f1b":
        if per_virtual_stage is not None:
            raise LayoutError("--num-layers-per-virtual-stage is for --pipeline-schedule interleaved_1f1b; "
                              "drop it or switch the schedule")
        if num_layers < pp:
            raise LayoutError(f"--num-layers {num_layers} is fewer than --pipeline-model-parallel-size {pp}; "
                              "every pipeline stage needs at least one layer")
        return
    if per_virtual_stage is None or per_virtual_stage < 1:
        raise LayoutError("--pipeline-schedule interleaved_1f1b needs --num-layers-per-virtual-stage N "
                          "(layers in each virtual stage)")
    per_round = layers_per_round(parallel)
    if num_layers % per_round or num_layers // per_round < 2:
        raise LayoutError(
            f"--num-layers {num_layers} must be a multiple of PP {pp} x --num-layers-per-virtual-stage "
            f"{per_virtual_stage} giving at least 2 stages per rank for interleaved 1F1B; "
            f"lower --num-layers-per-virtual-stage or use --pipeline-schedule 1f1b")


def check_rampup_micro_batches(parallel: ParallelConfig, training: TrainingConfig, dp: int) -> None:
    """Every batch of a ramp-up (config/rampup.py) splits into micro-batches over the data-parallel ranks, enough of
    them for the pipeline, the smallest first."""
    pp, micro, global_ = parallel.pipeline_model_parallel_size, training.micro_batch_size, training.global_batch_size
    sizes = BatchSizes.of(training)
    if problem := rampup_layout_problem(sizes, micro, dp):
        raise LayoutError(problem)
    smallest = sizes.distinct()[0]
    if smallest != global_ and pp > 1 and smallest // (micro * dp) < pp:
        raise LayoutError(f"pipeline parallelism needs at least PP={pp} micro-batches per step per data-parallel "
                          f"rank, and --rampup-batch-size starts at global {smallest} = "
                          f"{smallest // (micro * dp)} micro-batches of {micro} x DP {dp}; raise its START or lower "
                          "--micro-batch-size")
    if pp > 1 and parallel.pipeline_schedule == "interleaved_1f1b" and any(
            (size // (micro * dp)) % pp for size in sizes.distinct()):
        raise LayoutError(f"interleaved 1F1B runs micro-batches in rounds of PP={pp}: make --rampup-batch-size's "
                          f"START and INCREMENT multiples of micro {micro} x DP {dp} x PP {pp}")


def check_micro_batches(parallel: ParallelConfig, training: TrainingConfig, dp: int) -> None:
    """The global batch splits into micro-batches over the data-parallel ranks, enough of them for the pipeline; so
    does every batch of a ramp-up (``check_rampup_micro_batches``), checked first."""
    pp, micro, global_ = parallel.pipeline_model_parallel_size, training.micro_batch_size, training.global_batch_size
    if training.rampup_batch_size is not None:
        check_rampup_micro_batches(parallel, training, dp)
    if global_ % (micro * dp):
        raise LayoutError(f"--global-batch-size {global_} is not divisible by --micro-batch-size "
                          f"{micro} x data-parallel size {dp}; use a multiple of {micro * dp}")
    micro_batches = global_ // (micro * dp)
    if pp > 1 and micro_batches < pp:
        raise LayoutError(f"pipeline parallelism needs at least PP={pp} micro-batches per step per data-parallel "
                          f"rank, got {micro_batches} (global {global_} / (micro {micro} x "
                          f"DP {dp})); raise --global-batch-size or lower --micro-batch-size")
    if pp > 1 and parallel.pipeline_schedule == "interleaved_1f1b" and micro_batches % pp:
        raise LayoutError(f"interleaved 1F1B runs micro-batches in rounds of PP={pp}; {micro_batches} micro-batches "
                          f"per step is not a multiple: make --global-batch-size / (--micro-batch-size x DP) a "
                          f"multiple of {pp}")


def check_run_files(cfg: Config) -> None:
    c, tensorboard_dir = cfg.checkpoint, cfg.logging.tensorboard_dir
    if c.init_from and is_hf_model(c.init_from):  # load_config imports it and adopts its shape and tokenizer
        raise ConfigError(f"--init-from {c.init_from} is a Hugging Face model that this config has not adopted: "
                          "build the config with megamlm.cli.load_config, which imports it")
    check_tensorboard_dir(tensorboard_dir)
    check_trackers(cfg)


def check_trackers(cfg: Config) -> None:
    """--report-to: each tracker's library is installed (one line naming its extra otherwise), and TensorBoard has
    a folder to write in."""
    report_to = cfg.logging.report_to
    for name in LIBRARY_TRACKERS:
        if name in report_to and not installed(name):
            raise MissingExtra(missing_message(name, f"--report-to {name}"))
    if "tensorboard" in report_to and not (cfg.logging.tensorboard_dir or cfg.checkpoint.save):
        raise ConfigError("--report-to tensorboard writes its events under --save (or --tensorboard-dir); pass one")
    steps = cfg.logging.profile_steps
    if steps is not None and (not isinstance(steps, list) or len(steps) != 2 or not 1 <= steps[0] <= steps[1]):
        raise ConfigError(f"--profile-steps takes the first and last step to profile, 1 <= FIRST <= LAST (e.g. "
                          f"--profile-steps 3 5), got {steps}")
    if steps is not None and not cfg.checkpoint.save:
        raise ConfigError("--profile-steps writes its trace under --save/profile; pass --save")


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
    """--data-path needs --tokenizer-model; without --data-path, --tokenizer-model (when given) is the tokenizer
    the bundled corpus is tokenized with (another vocabulary of it, e.g. from tools/train_tokenizer.py)."""
    if not cfg.data.data_path and cfg.data.tokenizer_model and not Path(cfg.data.tokenizer_model).is_file():
        raise ConfigError(f"--tokenizer-model {cfg.data.tokenizer_model}: no such file; without --data-path it is "
                          "the tokenizer.json the bundled corpus is tokenized with (tools/train_tokenizer.py makes "
                          "one), or drop it for the bundled tokenizer")
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
        # the attention backend's name and package were checked with the config (config/checks.check_performance)
        return Backends(attention=perf.attention_backend,
                        kernels=perf.kernel_backend if perf.kernel_backend == "auto" else
                        check_kernel_backend(perf.kernel_backend))
    except (ValueError, RuntimeError, ImportError) as err:
        raise ConfigError(str(err)) from None


def check_tokenizer(cfg: Config, tokenizer) -> None:
    """The tokenizer has the mask token the run needs."""
    if tokenizer.mask_id is None and (objective_stages(cfg.objective.objective) != ("clm",) or validation_enabled(cfg)):
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

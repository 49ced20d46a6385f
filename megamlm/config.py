"""Run configuration: typed sections, the flag parser, the YAML loader, and all validation.

Each section is a dataclass; the string under a field is its help text. Flags are the field names with
dashes (Megatron's names where one exists) plus a few aliases. ``--config run.yaml`` loads sections
from YAML (``{model: {...}, training: {...}}``); flags given on the command line override it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib.util
import inspect
import json
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import yaml

from megamlm.errors import UserError
from megamlm.model.config import PRESETS, AttentionBackend, KernelBackend
from megamlm.model.rope import RopeScaling

# Every choice flag's values, declared once: the parser offers them, --help lists them, validation checks them.
Objective = Literal["mlm", "clm", "clm_then_mlm", "mlm_then_clm"]
LRDecayStyle = Literal["wsd", "cosine", "linear", "constant"]
Precision = Literal["auto", "bf16", "fp32"]
Device = Literal["auto", "cpu", "cuda"]
DataParallelImpl = Literal["fsdp", "ddp"]
PipelineSchedule = Literal["1f1b", "interleaved_1f1b"]
OptimizerImpl = Literal["torch", "apex"]
CompileMode = Literal["auto", "none", "blocks", "model", "cudagraphs"]


class ConfigError(UserError, ValueError):
    """A bad flag, flag combination or input path; the message names the fix."""


@dataclass
class ModelConfig:
    model: str = "tiny"
    """Preset: tiny (CPU demos/tests), 210m, 610m or 1b (the paper's sizes)."""
    num_layers: int | None = None
    """Transformer blocks (default: the preset's)."""
    hidden_size: int | None = None
    """Hidden width (default: the preset's)."""
    ffn_hidden_size: int | None = None
    """SwiGLU inner width (default: the preset's)."""
    num_attention_heads: int | None = None
    """Query heads (default: the preset's)."""
    num_query_groups: int | None = None
    """Key/value heads for grouped-query attention (default: the preset's)."""
    seq_length: int | None = None
    """Tokens per sample; also the longest sequence the model accepts (default: the preset's, tiny 128, others
    2048)."""
    vocab_size: int | None = None
    """Embedding rows; default: the preset's (Llama 3: 128,256) or, for tiny, the tokenizer's padded size."""
    make_vocab_size_divisible_by: int = 128
    """Pad the tokenizer's vocabulary up to a multiple of this."""
    rope_theta: float = 10_000.0
    """Rotary embedding base."""
    norm_epsilon: float = 1e-5
    """RMSNorm epsilon."""
    init_method_std: float = 0.02
    """Std of the normal weight init (output projections scaled by 1/sqrt(2*layers))."""
    head_dim: int | None = None
    """Width of one attention head (default: hidden / heads); set by --init-from a model that sets it apart."""
    attention_bias: bool = False
    """Biases on the q/k/v projections (Qwen2); set by --init-from a model that has them."""
    attention_out_bias: bool = False
    """A bias on the attention output projection (Llama-style attention_bias=true sets this and --attention-bias)."""
    rope_scaling: str | None = None
    """RoPE frequency scaling as JSON, Hugging Face's rope_parameters keys: '{"rope_type": "llama3", "factor": 32,
    "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}'; types linear, llama3,
    yarn; set by --init-from (default: no scaling)."""
    tie_word_embeddings: bool = False
    """One matrix for the embedding and the LM head (kept tied under TP, PP and FSDP); set by --init-from."""


@dataclass
class ObjectiveConfig:
    objective: Objective = "mlm"
    """Training objective (two-phase schedules switch at --switch or --switch-step)."""
    switch: float | None = None
    """Fraction of --train-iters spent in the first objective of a two-phase schedule; switch step =
    round(F * iters); default 0.25 unless --switch-step is given."""
    switch_step: int | None = None
    """The last step of the first objective, as a step (instead of --switch): branches never depend on rounding
    (default: from --switch)."""
    mask_ratio: float = 0.4
    """MLM: probability that a non-special token is selected for prediction."""
    mask_replace_prob: float = 1.0
    """MLM: probability that a selected token is replaced by the mask token."""
    mask_random_prob: float = 0.0
    """MLM: probability that a selected token is replaced by a random token."""
    mask_keep_prob: float = 0.0
    """MLM: probability that a selected token is left unchanged."""


@dataclass
class DataConfig:
    data_path: list[str] = field(default_factory=list)
    """Dataset prefixes (.bin/.idx), Megatron syntax: `prefix` or `0.7 a 0.3 b` (default: the bundled Austen
    corpus)."""
    tokenizer_model: str | None = None
    """Tokenizer of the data: tokenizer.json / HF folder, tiktoken BPE file or sentencepiece model (needed with
    --data-path; default: the bundled corpus's)."""
    data_cache_path: str | None = None
    """Folder for the sample-index cache (.npy files reused by later launches) and the tokenized bundled corpus
    (default: no index cache, the indices are rebuilt in memory at each launch; the bundled corpus goes to
    $MEGAMLM_CACHE or ~/.cache/megamlm)."""
    num_workers: int = 0
    """Data loader worker processes (never changes the sample order)."""
    split: str | None = None
    """Megatron's train,validation,test weights, e.g. 969,30,1: each corpus's documents are split in file order
    into contiguous ranges; training samples come from the first range only, validation samples from the second
    (the third is left unused; default: no split, every document trains)."""
    valid_data_path: list[str] = field(default_factory=list)
    """Validation data (prefixes or a blend, like --data-path), instead of --split (default: none)."""


@dataclass
class TrainingConfig:
    train_iters: int = 300
    """Optimizer steps of the run."""
    micro_batch_size: int | None = None
    """Samples per forward/backward pass (default: fitted to the layout and logged; 16 on one process, 12 for the
    paper presets)."""
    global_batch_size: int | None = None
    """Samples per optimizer step; gradient accumulation = global / (micro x data-parallel) (default: 16, or 1,152
    for the paper presets, raised only where the layout needs more micro-batches; logged)."""
    lr: float = 3e-3
    """Peak learning rate."""
    min_lr: float = 0.0
    """Learning rate at the end of the decay."""
    lr_decay_style: LRDecayStyle = "wsd"
    """LR schedule: wsd (warmup-stable-decay), cosine, linear or constant."""
    lr_warmup_iters: int | None = None
    """Linear warmup steps; default 5% of --train-iters (the paper: 2,000 of 42,000)."""
    lr_warmup_fraction: float | None = None
    """Linear warmup as a fraction of --train-iters (instead of --lr-warmup-iters; default: unset)."""
    lr_wsd_decay_iters: int | None = None
    """WSD: steps of the final linear decay; default 5% of --train-iters, at least 1 in runs of 2+ steps (the paper:
    2,000 of 42,000)."""
    lr_wsd_decay_fraction: float | None = None
    """WSD: the final decay as a fraction of --train-iters (instead of --lr-wsd-decay-iters;
    default: unset)."""
    weight_decay: float = 0.1
    """AdamW weight decay, applied to matrices only."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.95
    """AdamW beta2."""
    adam_eps: float = 1e-5
    """AdamW epsilon."""
    clip_grad: float = 1.0
    """Gradient-norm clipping threshold (0 disables)."""
    seed: int = 1234
    """Seeds the weights, the sample order and the MLM masks."""
    precision: Precision = "auto"
    """auto (bf16 autocast on GPU, fp32 on CPU), bf16 or fp32."""
    device: Device = "auto"
    """Where to train (auto: CUDA/ROCm when visible, else CPU)."""
    exit_interval: int | None = None
    """Save a checkpoint and exit 0 after the first step divisible by N (Megatron's name; default: never)."""
    exit_duration_in_mins: float | None = None
    """Save a checkpoint and exit 0 after the first step that ends N minutes after the run started (default:
    never)."""
    max_skipped_steps: int = 10
    """Steps with a non-finite loss or gradient norm are skipped (no update); this many in a row stop the run."""


@dataclass
class CheckpointConfig:
    save: str | None = None
    """Folder to write checkpoints to (iter_NNNNNNN/ plus a `latest` pointer); relaunching with it resumes there
    (default: no checkpoints)."""
    save_interval: int | None = None
    """Save every N steps (default: only at the objective switch and at the end, when --save is set)."""
    load: str | None = None
    """Resume from this folder's newest whole checkpoint (or an iter_NNNNNNN folder); once --save holds checkpoints,
    they win, and --load equal to --save starts fresh while that folder is still empty (default: none)."""
    init_from: str | None = None
    """Load weights only (continued pretraining): a megamlm checkpoint, a Hugging Face model folder or a .gguf file;
    fresh optimizer, schedule and data (default: none)."""
    continue_from: str | None = None
    """Continued pretraining that continues the data: a megamlm checkpoint's weights, a fresh optimizer and LR
    schedule, steps counted from 0, and the sample stream continuing where that checkpoint stopped (its seed, data
    and --split must be this run's; default: none)."""
    save_at: list[int] = field(default_factory=list)
    """Steps whose checkpoints --keep-last never deletes (branch points), e.g. 10000,21000
    (default: none)."""
    keep_last: int | None = None
    """Keep only the N newest complete checkpoints (and the objective-switch and --save-at ones); default: keep all."""
    override_data: bool = False
    """Resume even though the checkpoint was trained on other data (its data fingerprint differs)."""
    override_schedule: bool = False
    """Continue a checkpoint whose history (objective and LR of every step so far, optimizer settings) differs from
    this launch's schedule, with this launch's values from the next step (each change is logged); without it
    such a resume is refused. A schedule that agrees up to the checkpoint's step (a branch) needs no override."""
    overwrite_damaged: bool = False
    """When every checkpoint in --save is damaged, start anyway (from scratch, --load or --init-from) and let this
    run's checkpoints replace them; without it such a launch is refused."""


@dataclass
class LoggingConfig:
    log_interval: int = 10
    """Print a log line every N steps."""
    tensorboard_dir: str | None = None
    """Write TensorBoard scalars here (default: none written)."""


@dataclass
class ValidationConfig:
    eval_interval: int | None = None
    """Evaluate on the validation set every N steps (also at the objective switch and the last step); default
    1000 when --split or --valid-data-path gives a validation set."""
    eval_iters: int | None = None
    """Global batches of validation samples per evaluation (the same samples and masks every time); default 10."""
    eval_mask_ratio: float | None = None
    """MLM mask ratio of the validation masks; default --mask-ratio (arms of a study that compare mask ratios
    should share one)."""


@dataclass
class ParallelConfig:
    tensor_model_parallel_size: int = 1
    """Tensor-parallel degree (Megatron layout: heads, MLP and vocabulary split over TP ranks)."""
    pipeline_model_parallel_size: int = 1
    """Pipeline stages over ranks (layers split evenly; embedding on the first, head and loss on the last)."""
    dp_replicate: int = 1
    """FSDP2 hybrid sharding: number of replica groups (parameters sharded within each, replicated across)."""
    dp_shard: int = -1
    """FSDP2 sharding degree; -1: the rest of world / (TP x PP x dp-replicate)."""
    data_parallel_impl: DataParallelImpl = "fsdp"
    """Data parallelism: fsdp (FSDP2 fully_shard per block) or ddp (full replicas, all-reduce)."""
    pipeline_schedule: PipelineSchedule = "1f1b"
    """Pipeline schedule: 1f1b or interleaved_1f1b (needs --num-layers-per-virtual-stage)."""
    num_layers_per_virtual_stage: int | None = None
    """Interleaved 1F1B: layers in each virtual stage (each rank holds layers / (PP x this) stages; default: unset,
    required by interleaved_1f1b)."""
    recompute: bool = False
    """Activation checkpointing per transformer block (recompute activations in the backward pass)."""
    world_size: int | None = None
    """With --dry-run: the number of processes to plan for (default: the launcher's world size)."""
    dry_run: bool = False
    """Validate the layout and print per-rank parameters and estimated memory, then exit (no GPU needed)."""


@dataclass
class PerformanceConfig:
    kernel_backend: KernelBackend = "auto"
    """Hot-path kernels: auto (Triton on GPU, chunked LM-head loss on CPU), triton, chunked or reference."""
    attention_backend: AttentionBackend = "sdpa"
    """Attention: sdpa (scaled_dot_product_attention), sdpa_flash / sdpa_cudnn (SDPA held to its flash or cuDNN kernel,
    GPU), flex (FlexAttention, GPU), flash (flash-attn), or auto (each measured at start on this GPU for the run's
    shapes, the fastest kept for bidirectional and for causal attention; sdpa on CPU)."""
    document_mask: bool = False
    """Attend only within each document of a packed window (causal and bidirectional alike)."""
    compile: CompileMode = "auto"
    """torch.compile: auto (the mode measured fastest: none on CPU, blocks on GPU), none, blocks (each transformer
    block), model (the whole model; blocks under pipeline parallelism) or cudagraphs (the whole model replayed as
    CUDA graphs; one GPU process). A bare --compile means blocks, --no-compile none."""
    fp8: bool = False
    """Train the transformer blocks' linear layers in float8 (torchao; H100-class GPUs); embedding, norms and LM head
    keep their precision."""
    optimizer_impl: OptimizerImpl = "torch"
    """AdamW implementation: torch (fused kernel on GPU) or apex (apex.optimizers.FusedAdam)."""


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    data: DataConfig = field(default_factory=DataConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    performance: PerformanceConfig = field(default_factory=PerformanceConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Config":
        cfg = cls()
        for section_name, values in data.items():
            if section_name not in SECTIONS:
                raise ConfigError(f"unknown config section {section_name!r}; known: {', '.join(SECTIONS)}")
            section = getattr(cfg, section_name)
            if values is not None and not isinstance(values, dict):
                raise ConfigError(f"section {section_name} must be a mapping of keys to values, got {values!r}")
            known = {f.name for f in dataclasses.fields(section)}
            hints = get_type_hints(type(section))
            for key, value in (values or {}).items():
                if key not in known:
                    raise ConfigError(f"unknown key {section_name}.{key}; known: {', '.join(sorted(known))}")
                if key in FORMER_SWITCHES and isinstance(value, bool):
                    value = FORMER_SWITCHES[key][value]
                setattr(section, key, _typed(f"{section_name}.{key}", hints[key], value))
        return cfg

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _typed(name: str, annotation, value):
    """A value read from YAML, checked against (and for lists and whole floats, converted to) the field's type."""
    if value is None:
        if type(None) in get_args(annotation):
            return None
        raise ConfigError(f"{name} needs a value, got nothing (null)")
    if get_origin(annotation) is list:
        items = value if isinstance(value, list) else [value]
        if get_args(annotation) == (int,):
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
                raise ConfigError(f"{name} must be a list of whole numbers (e.g. [10000, 21000]), got {value!r}")
            return list(items)
        if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in items):
            raise ConfigError(f"{name} must be a list of strings, got {value!r}")
        return [str(v) for v in items]
    expected = _scalar_type(annotation)
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is float:
        if isinstance(value, str):  # PyYAML reads 5e-4 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        if isinstance(value, dict):  # a JSON-valued setting (--rope-scaling) written as a YAML mapping
            value = json.dumps(value)
        ok = isinstance(value, str)
    if not ok:
        kind = {bool: "true or false", float: "a number", int: "a whole number", str: "a string"}[expected]
        raise ConfigError(f"{name} must be {kind}, got {value!r}")
    return value


SECTIONS = {f.name: f.type for f in dataclasses.fields(Config)}
SECTION_CLASSES = {
    "model": ModelConfig, "objective": ObjectiveConfig, "data": DataConfig,
    "training": TrainingConfig, "checkpoint": CheckpointConfig, "logging": LoggingConfig,
    "validation": ValidationConfig, "parallel": ParallelConfig, "performance": PerformanceConfig,
}
FLAG_ALIASES = {"tensor_model_parallel_size": ["--tp"], "pipeline_model_parallel_size": ["--pp"]}
# Settings that can be given two ways: at most one of each pair; on the command line, one replaces the other
# given in --config.
ALTERNATIVES = (("objective", "switch", "switch_step"), ("training", "lr_warmup_iters", "lr_warmup_fraction"),
                ("training", "lr_wsd_decay_iters", "lr_wsd_decay_fraction"))
DEFAULT_SWITCH = 0.25
DEFAULT_EVAL_INTERVAL, DEFAULT_EVAL_ITERS = 1000, 10
# Choice flags that were on/off switches before: the bare flag, --no-FLAG and YAML booleans keep their old meaning.
FORMER_SWITCHES = {"compile": {True: "blocks", False: "none"}}


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The string literal under each field of a dataclass (attribute docstrings); read once per class."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def choices_of(annotation) -> tuple | None:
    """The allowed values of a Literal field (also inside ``X | None``), else None."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    for arg in get_args(annotation):
        if get_origin(arg) is Literal:
            return get_args(arg)
    return None


def _scalar_type(annotation) -> type:
    choices = choices_of(annotation)
    if choices is not None:
        return type(choices[0])
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if args else annotation


class _IntList(argparse.Action):
    """A list of integers given as separate or comma-separated values: ``--save-at 10000,21000`` or ``10000 21000``."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            items = [int(v) for value in values for v in str(value).split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"{option_string} takes integers (e.g. 10000,21000), got {' '.join(values)}") from None
        setattr(namespace, self.dest, items)


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are ConfigErrors: the entry point prints them as one line and exits 2."""

    def error(self, message: str):
        raise ConfigError(f"{message}; see pretrain.py --help")


def help_text(f: dataclasses.Field, doc: str) -> str:
    """The field's doc with its default named once: a doc that explains its default (every field whose default is
    unset or empty does) is printed as written, any other gets "(default: VALUE)"."""
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if "default" not in doc and default not in (None, []):
        doc = f"{doc} (default: {default})"
    return doc.replace("%", "%%")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pretrain.py",
        description="Pretrain a text encoder with MLM, CLM or a CLM-then-MLM schedule.",
    )
    parser.add_argument("--config", help="YAML file with config sections; flags override it.")
    for section, cls in SECTION_CLASSES.items():
        group = parser.add_argument_group(section)
        docs = field_docs(cls)
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            flags = ["--" + f.name.replace("_", "-"), *FLAG_ALIASES.get(f.name, [])]
            kwargs: dict[str, Any] = dict(dest=f"{section}.{f.name}", help=help_text(f, docs.get(f.name, "")),
                                          default=argparse.SUPPRESS)
            hint = hints[f.name]
            if get_origin(hint) is list:
                kwargs["nargs"], kwargs["metavar"] = "+", f.name.upper()
                if get_args(hint) == (int,):
                    kwargs["action"] = _IntList
            elif hint is bool:
                kwargs["action"] = argparse.BooleanOptionalAction
            else:
                kwargs["type"] = _scalar_type(hint)
                if choices_of(hint) is not None:
                    kwargs["choices"] = choices_of(hint)
                else:
                    kwargs["metavar"] = f.name.upper()
                if f.name in FORMER_SWITCHES:
                    kwargs.update(nargs="?", const=FORMER_SWITCHES[f.name][True])
                    group.add_argument("--no-" + f.name.replace("_", "-"), dest=kwargs["dest"], action="store_const",
                                       const=FORMER_SWITCHES[f.name][False], default=argparse.SUPPRESS,
                                       help=argparse.SUPPRESS)
            group.add_argument(*flags, **kwargs)
    return parser


def parse_args(argv: list[str] | None = None) -> Config:
    """Flags (and an optional YAML file) -> a validated Config."""
    ns = vars(build_parser().parse_args(argv))
    config_file = ns.pop("config", None)
    cfg = load_yaml(config_file) if config_file else Config()
    for dest, value in ns.items():
        section, name = dest.split(".", 1)
        setattr(getattr(cfg, section), name, value)
        for pair_section, *pair in ALTERNATIVES:
            if section == pair_section and name in pair and f"{section}.{other(pair, name)}" not in ns:
                setattr(getattr(cfg, section), other(pair, name), None)  # the command line replaces the YAML's
    validate(cfg)
    return cfg


def other(pair: list[str], name: str) -> str:
    return pair[1] if name == pair[0] else pair[0]


def load_yaml(path: str) -> Config:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {path} not found; pass an existing YAML file to --config")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {err.start}); pass a YAML file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"config file {path} is not valid YAML{where}: {problem}; fix that line") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold sections ({', '.join(SECTIONS)}) as a mapping, "
                          f"not a {type(data).__name__}")
    try:
        return Config.from_dict(data or {})
    except ConfigError as err:
        raise ConfigError(f"config file {path}: {err}") from None


def _check_choices(cfg: Config) -> None:
    """A Literal field set from YAML (flags are checked by the parser) must hold one of its values."""
    for section, cls in SECTION_CLASSES.items():
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            choices = choices_of(hints[f.name])
            value = getattr(getattr(cfg, section), f.name)
            if choices is not None and value not in choices and value is not None:
                raise ConfigError(f"unknown --{f.name.replace('_', '-')} {value!r}; choose one of "
                                  f"{', '.join(map(str, choices))}")


def validate(cfg: Config) -> None:
    """Every check of the config on its own, before any work starts. Raises ConfigError naming the fix.

    (The parallel layout is checked against the world size by ``megamlm.parallel.dims.dims_from_config``.)
    """
    m, o, t, c = cfg.model, cfg.objective, cfg.training, cfg.checkpoint
    _check_numbers(cfg)
    if m.model not in PRESETS:
        raise ConfigError(f"unknown --model {m.model!r}; choose one of {', '.join(PRESETS)}")
    _check_choices(cfg)
    shape = resolved_shape(m)
    if shape["num_attention_heads"] % shape["num_query_groups"]:
        raise ConfigError(
            f"--num-attention-heads {shape['num_attention_heads']} is not divisible by --num-query-groups "
            f"{shape['num_query_groups']}; choose a number of KV heads that divides the number of heads")
    if m.head_dim is None and shape["hidden_size"] % shape["num_attention_heads"]:
        raise ConfigError(f"--hidden-size {shape['hidden_size']} is not divisible by --num-attention-heads "
                          f"{shape['num_attention_heads']}; pick divisible sizes or set --head-dim")
    head_dim = m.head_dim if m.head_dim is not None else shape["hidden_size"] // shape["num_attention_heads"]
    if head_dim <= 0 or head_dim % 2:
        raise ConfigError(f"the head dimension ({head_dim}) must be positive and even for rotary embeddings")
    try:
        model_features(m)
    except ValueError as err:  # json.JSONDecodeError is a ValueError too
        raise ConfigError(f"--rope-scaling {m.rope_scaling!r}: {err}") from None
    for name in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                 "seq_length"):
        if shape[name] <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {shape[name]}")

    for section, first, second in ALTERNATIVES:
        values = getattr(cfg, section)
        if getattr(values, first) is not None and getattr(values, second) is not None:
            raise ConfigError(f"--{first.replace('_', '-')} and --{second.replace('_', '-')} give the same setting "
                              "two ways; pass one of them")
    if o.switch is not None and not 0.0 < o.switch < 1.0:
        raise ConfigError(f"--switch must be a fraction strictly between 0 and 1, got {o.switch}")
    step = switch_step(o, t.train_iters)
    if step is not None and not 0 < step < t.train_iters:
        given = f"--switch-step {o.switch_step}" if o.switch_step is not None else f"--switch {switch_fraction(o)}"
        raise ConfigError(f"{given} with --train-iters {t.train_iters} puts the switch at step {step}, leaving one "
                          "phase empty; raise --train-iters or move the switch")
    if not 0.0 < o.mask_ratio < 1.0:
        raise ConfigError(f"--mask-ratio must be strictly between 0 and 1, got {o.mask_ratio}")
    probs = (o.mask_replace_prob, o.mask_random_prob, o.mask_keep_prob)
    if any(p < 0 for p in probs) or abs(sum(probs) - 1.0) > 1e-6:
        raise ConfigError(f"--mask-replace-prob/--mask-random-prob/--mask-keep-prob must be >= 0 and sum to 1, "
                          f"got {probs}")

    if t.train_iters <= 0:
        raise ConfigError(f"--train-iters must be positive, got {t.train_iters}")
    for flag, value in (("--micro-batch-size", t.micro_batch_size), ("--global-batch-size", t.global_batch_size)):
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be positive, got {value}")
    if t.micro_batch_size and t.global_batch_size and t.global_batch_size % t.micro_batch_size:
        raise ConfigError(f"--global-batch-size {t.global_batch_size} is not divisible by --micro-batch-size "
                          f"{t.micro_batch_size}; pick a global batch that is a multiple of the micro-batch")
    if t.lr_warmup_fraction is not None and not 0.0 <= t.lr_warmup_fraction < 1.0:
        raise ConfigError(f"--lr-warmup-fraction must be in [0, 1), got {t.lr_warmup_fraction}")
    if t.lr_wsd_decay_fraction is not None and not 0.0 < t.lr_wsd_decay_fraction <= 1.0:
        raise ConfigError(f"--lr-wsd-decay-fraction must be in (0, 1], got {t.lr_wsd_decay_fraction}")
    warmup, decay = warmup_iters(t), wsd_decay_iters(t)
    if warmup + (decay if t.lr_decay_style == "wsd" else 0) > t.train_iters:
        raise ConfigError(f"warmup ({warmup}) plus decay ({decay}) steps exceed --train-iters {t.train_iters}; "
                          "lower --lr-warmup-iters / --lr-wsd-decay-iters, or give them as fractions of the run "
                          "(--lr-warmup-fraction / --lr-wsd-decay-fraction)")
    if cfg.logging.log_interval <= 0:
        raise ConfigError("--log-interval must be positive")
    if c.save_interval is not None and c.save_interval <= 0:
        raise ConfigError("--save-interval must be positive")
    planning = cfg.parallel.dry_run  # a dry run writes nothing: the flags that need --save are checked in the run
    if c.save_interval is not None and not c.save and not planning:
        raise ConfigError("--save-interval needs --save DIR to know where to write checkpoints")
    starts = [f"--{name.replace('_', '-')}" for name in ("load", "init_from", "continue_from") if getattr(c, name)]
    if len(starts) > 1:
        raise ConfigError(f"{' and '.join(starts)} exclude each other: --load continues a run (or branches it), "
                          "--init-from takes weights only, --continue-from takes weights and the data position; "
                          "pick one")
    validate_save_at(c, t.train_iters)
    if c.keep_last is not None and c.keep_last < 1:
        raise ConfigError(f"--keep-last must be at least 1 (the checkpoint to resume from), got {c.keep_last}")
    if c.keep_last is not None and not c.save and not planning:
        raise ConfigError("--keep-last needs --save DIR, the folder whose checkpoints it prunes")
    for flag, value in (("--override-data", c.override_data), ("--override-schedule", c.override_schedule)):
        if value and not (c.load or c.save) and not planning:
            raise ConfigError(f"{flag} only matters when resuming: pass --load DIR, or --save DIR of the run "
                              "to continue")
    if c.overwrite_damaged and not c.save and not planning:
        raise ConfigError("--overwrite-damaged concerns the checkpoints of --save DIR; pass the --save folder")
    if t.exit_interval is not None and t.exit_interval <= 0:
        raise ConfigError(f"--exit-interval must be positive, got {t.exit_interval}")
    if t.exit_duration_in_mins is not None and t.exit_duration_in_mins <= 0:
        raise ConfigError(f"--exit-duration-in-mins must be positive, got {t.exit_duration_in_mins}")
    if (t.exit_interval is not None or t.exit_duration_in_mins is not None) and not c.save and not planning:
        raise ConfigError("--exit-interval / --exit-duration-in-mins stop the run with a checkpoint: pass --save DIR")
    if t.max_skipped_steps < 1:
        raise ConfigError(f"--max-skipped-steps must be at least 1, got {t.max_skipped_steps}")
    if cfg.data.num_workers < 0:
        raise ConfigError("--num-workers must be >= 0")
    validate_validation(cfg)
    p = cfg.parallel
    if p.world_size is not None and p.world_size < 1:
        raise ConfigError(f"--world-size must be positive, got {p.world_size}")
    if p.world_size is not None and not p.dry_run:
        raise ConfigError("--world-size only plans a layout with --dry-run; a real run takes its world size from "
                          "the launcher (torchrun, srun or mpirun)")
    validate_performance(cfg.performance)


def validate_save_at(c: CheckpointConfig, train_iters: int) -> None:
    if not c.save_at:
        return
    if not isinstance(c.save_at, list) or not all(isinstance(s, int) for s in c.save_at):
        raise ConfigError(f"--save-at takes a list of steps (YAML: save_at: [10000, 20000]), got {c.save_at!r}")
    if not c.save:
        raise ConfigError("--save-at needs --save DIR, the folder to write its checkpoints to")
    if any(b <= a for a, b in zip(c.save_at, c.save_at[1:])):
        raise ConfigError(f"--save-at {','.join(map(str, c.save_at))} is not strictly increasing; list each step "
                          "once, in increasing order")
    if c.save_at[0] < 1 or c.save_at[-1] > train_iters:
        bad = c.save_at[0] if c.save_at[0] < 1 else c.save_at[-1]
        raise ConfigError(f"--save-at step {bad} is outside this run's steps 1-{train_iters}; drop it or raise "
                          "--train-iters")


def validate_validation(cfg: Config) -> None:
    d, v = cfg.data, cfg.validation
    if d.split is not None and d.valid_data_path:
        raise ConfigError("--split and --valid-data-path both give a validation set; pass one of them")
    weights = split_weights(d)
    if weights is not None and weights[1] == 0:
        raise ConfigError(f"--split {d.split} leaves no validation documents; give the second weight a share "
                          "(e.g. 969,30,1), or drop --split")
    if v.eval_mask_ratio is not None and not 0.0 < v.eval_mask_ratio < 1.0:
        raise ConfigError(f"--eval-mask-ratio must be strictly between 0 and 1, got {v.eval_mask_ratio}")
    for name in ("eval_interval", "eval_iters", "eval_mask_ratio"):
        value = getattr(v, name)
        if value is not None and value <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {value}")
        if value is not None and not validation_enabled(cfg):
            raise ConfigError(f"--{name.replace('_', '-')} needs a validation set: pass --split (e.g. 969,30,1) or "
                              "--valid-data-path")


def split_weights(d: DataConfig) -> tuple[float, float, float] | None:
    """--split as normalised (train, validation, test) weights, Megatron's way: up to three numbers separated by
    commas or slashes, missing ones 0 ("99,1" is 0.99, 0.01, 0)."""
    if d.split is None:
        return None
    parts = [p.strip() for p in d.split.replace("/", ",").split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 3 or any(not v >= 0 for v in values) or sum(values) <= 0:
        raise ConfigError(f"--split {d.split} does not parse: give up to three non-negative weights for training, "
                          "validation and test, e.g. 969,30,1")
    values += [0.0] * (3 - len(values))
    total = sum(values)
    return values[0] / total, values[1] / total, values[2] / total


def validation_enabled(cfg: Config) -> bool:
    return cfg.data.split is not None or bool(cfg.data.valid_data_path)


def eval_interval(cfg: Config) -> int:
    v = cfg.validation.eval_interval
    return v if v is not None else DEFAULT_EVAL_INTERVAL


def eval_iters(cfg: Config) -> int:
    v = cfg.validation.eval_iters
    return v if v is not None else DEFAULT_EVAL_ITERS


def switch_fraction(o: ObjectiveConfig) -> float:
    return o.switch if o.switch is not None else DEFAULT_SWITCH


# Numeric flags with a range: (section, field, lowest, highest, lowest allowed, highest allowed); None: unbounded.
_RANGES = (
    ("model", "vocab_size", 1, None, True, True),
    ("model", "make_vocab_size_divisible_by", 1, None, True, True),
    ("model", "rope_theta", 0, None, False, True),
    ("model", "norm_epsilon", 0, None, False, True),
    ("model", "init_method_std", 0, None, False, True),
    ("training", "lr", 0, None, False, True),
    ("training", "min_lr", 0, None, True, True),
    ("training", "lr_warmup_iters", 0, None, True, True),
    ("training", "lr_wsd_decay_iters", 0, None, True, True),
    ("training", "weight_decay", 0, None, True, True),
    ("training", "adam_beta1", 0, 1, True, False),
    ("training", "adam_beta2", 0, 1, True, False),
    ("training", "adam_eps", 0, None, False, True),
    ("training", "clip_grad", 0, None, True, True),
    ("training", "seed", 0, 2**63 - 1, True, True),
)


def _check_numbers(cfg: Config) -> None:
    """Every number finite, and the ones with a natural range inside it."""
    for section, cls in SECTION_CLASSES.items():
        for f in dataclasses.fields(cls):
            value = getattr(getattr(cfg, section), f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"--{f.name.replace('_', '-')} must be a finite number, got {value}")
    for section, name, low, high, low_ok, high_ok in _RANGES:
        value = getattr(getattr(cfg, section), name)
        if value is None:
            continue
        too_low = low is not None and (value < low if low_ok else value <= low)
        too_high = high is not None and (value > high if high_ok else value >= high)
        if too_low or too_high:
            bounds = " and ".join(part for part in (
                f"{'>=' if low_ok else '>'} {low}" if low is not None else "",
                f"{'<=' if high_ok else '<'} {high}" if high is not None else "") if part)
            raise ConfigError(f"--{name.replace('_', '-')} must be {bounds}, got {value}")
    t = cfg.training
    if t.min_lr > t.lr:
        raise ConfigError(f"--min-lr {t.min_lr} is above the peak --lr {t.lr}; the decay ends at --min-lr, so lower "
                          "it (or raise --lr)")


def switch_step(o: ObjectiveConfig, train_iters: int) -> int | None:
    """The last step of the first objective of a two-phase schedule (None for one objective): --switch-step, else
    round(--switch x iters). The one place the switch step is computed."""
    if "_then_" not in o.objective:
        return None
    if o.switch_step is not None:
        return o.switch_step
    return round(switch_fraction(o) * train_iters)


def resolved_shape(m: ModelConfig) -> dict:
    """The preset's shape with the explicit flags applied (vocab_size may stay None: tokenizer-sized)."""
    shape = dict(PRESETS[m.model])
    shape["seq_length"] = shape.pop("max_seq_length")
    for key in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                "seq_length", "vocab_size"):
        if getattr(m, key) is not None:
            shape[key] = getattr(m, key)
    return shape


def model_features(m: ModelConfig) -> dict:
    """The ModelArgs features set by flags (head width, attention biases, RoPE scaling, tied embeddings).

    ``--rope-scaling`` is JSON on the command line, a mapping in YAML; a bad one raises ValueError.
    """
    scaling = json.loads(m.rope_scaling) if isinstance(m.rope_scaling, str) else m.rope_scaling
    if scaling is not None and not isinstance(scaling, dict):
        raise ValueError("expected a JSON object such as {\"rope_type\": \"linear\", \"factor\": 2}")
    return {"head_dim": m.head_dim, "attention_bias": m.attention_bias, "attention_out_bias": m.attention_out_bias,
            "rope_scaling": RopeScaling.from_dict(scaling) if scaling else None,
            "tie_word_embeddings": m.tie_word_embeddings}


def _steps(iters: int | None, fraction: float | None, train_iters: int) -> int:
    if iters is not None:
        return iters
    return round((fraction if fraction is not None else 0.05) * train_iters)


def warmup_iters(t: TrainingConfig) -> int:
    """--lr-warmup-iters, else round(--lr-warmup-fraction x iters), else 5% of --train-iters."""
    return _steps(t.lr_warmup_iters, t.lr_warmup_fraction, t.train_iters)


def wsd_decay_iters(t: TrainingConfig) -> int:
    """--lr-wsd-decay-iters, else round(--lr-wsd-decay-fraction x iters), else 5% of the run: at least one step, so
    that a short WSD run decays too, but never the only step."""
    if t.lr_wsd_decay_iters is not None or t.lr_wsd_decay_fraction is not None:
        return _steps(t.lr_wsd_decay_iters, t.lr_wsd_decay_fraction, t.train_iters)
    return min(max(1, round(0.05 * t.train_iters)), t.train_iters - 1)


def validate_performance(p: PerformanceConfig) -> None:
    """Optional accelerators asked for must be installed (looked up, never imported, here)."""
    if p.attention_backend == "flash" and importlib.util.find_spec("flash_attn") is None:
        raise ConfigError("--attention-backend flash needs the flash-attn package, which is not installed; "
                          "pip install flash-attn, or use --attention-backend sdpa")
    if p.optimizer_impl == "apex" and importlib.util.find_spec("apex") is None:
        raise ConfigError("--optimizer-impl apex needs NVIDIA apex, which is not installed; use --optimizer-impl torch")
    if p.kernel_backend == "triton" and importlib.util.find_spec("triton") is None:
        raise ConfigError("--kernel-backend triton needs the triton package; pip install triton, or use auto")
    if p.fp8 and importlib.util.find_spec("torchao") is None:
        raise ConfigError("--fp8 needs torchao, which is not installed; pip install torchao, or drop --fp8")

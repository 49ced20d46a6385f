"""The run configuration as data: one frozen dataclass per section; the string under a field is its help text.

Flags are the field names with dashes (Megatron's names where one exists). Nothing here computes: ``loader.py``
reads YAML and dicts, ``flags.py`` the command line, ``checks.py`` validates, ``derived.py`` holds the values
computed from settings, and ``resolve.py`` is the one place that fills values in before the single validation.
Every section is frozen: a validated Config changes only through ``dataclasses.replace`` in ``resolve.py``.

Every field declares its role beside its declaration (``setting(default, role)``, ``config/roles.py``): what a
difference in it means to a resume, a run's history and the study planner.

The model section is generated: its shape and feature flags are ``ModelArgs``' fields (megamlm/model/config.py),
each declared there once with its docstring, plus the preset name and the vocabulary padding (role ``shape``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Literal, get_type_hints

from megamlm.config.docs import field_docs
from megamlm.config.phase_fields import RecipeConfig
from megamlm.config.roles import section_class, setting
from megamlm.kernel_backends import KernelBackend
from megamlm.model.attention_table import ATTENTION_TABLE
from megamlm.model.config import AttentionBackend, ModelArgs

# The objectives and the stages each trains in order (the ObjectiveSchedule's), declared once (the Literal below
# is built from it).
OBJECTIVE_STAGES: dict[str, tuple[str, ...]] = {
    "mlm": ("mlm",),
    "clm": ("clm",),
    "clm_then_mlm": ("clm", "mlm"),
    "mlm_then_clm": ("mlm", "clm"),
}
PHASE_OBJECTIVES = ("mlm", "clm", "mntp")
"""What one stage of the objective schedule (or one recipe phase) trains; ``--objective`` also takes them joined by
commas (``mlm,clm,mlm``)."""
# Every choice flag's values, declared once: the parser offers them, --help lists them, validation checks them.
Objective = Literal[tuple(OBJECTIVE_STAGES)]
"""The named objectives (a sequence of stages such as ``mlm,clm,mlm`` is a str beside them)."""
LRDecayStyle = Literal["wsd", "cosine", "linear", "constant"]
WSDDecayStyle = Literal["linear", "cosine", "exponential", "minus_sqrt"]
"""The shape of WSD's final decay, by Megatron's names (``--lr-wsd-decay-style``; minus_sqrt is the 1-sqrt decay)."""
OptimizerName = Literal["adamw", "stableadamw"]
Precision = Literal["auto", "bf16", "fp32"]
Device = Literal["auto", "cpu", "cuda"]
DataParallelImpl = Literal["fsdp", "ddp"]
PipelineSchedule = Literal["1f1b", "interleaved_1f1b"]
OptimizerImpl = Literal["torch", "apex"]
CompileMode = Literal["auto", "none", "blocks", "model", "cudagraphs"]
Tracker = Literal["tensorboard", "trackio", "wandb", "mlflow"]
"""The experiment trackers --report-to feeds (training/trackers.py)."""
SampleMode = Literal["windows", "packed_documents", "document_per_row"]
"""How a sample is cut from the data (``--sample-mode``, megamlm/data/documents.py)."""
EvalSamples = Literal["run", "phase"]
"""Whose sequence length, masking and sample mode validation scores at (``--eval-samples``)."""

# ---- the model section: the preset, then one flag per ModelArgs field ---------------------------------------------

MODEL_FLAG_NAMES = {"max_seq_length": "seq_length"}
"""ModelArgs fields whose flag has another (Megatron's) name."""
_UNSET_MEANS = {
    "max_seq_length": "the preset's, tiny 128, others 2048",
    "vocab_size": "the preset's (Llama 3: 128,256) or, for tiny, the tokenizer's padded size",
    "head_dim": "hidden / heads; set by --init-from a model that sets it apart",
    "rope_scaling": "no scaling",
    "query_pre_attn_scalar": "1/sqrt(head dim)",
    "sliding_window": "no window",
    "layer_types": "every layer full",
    "local_rope_theta": "--rope-theta",
}
"""What an unset model flag means, where it is more than "the preset's"."""
_FLAG_REMARKS = {
    "attention_bias": "; set by --init-from a model that has them",
    "attention_out_bias": " (Llama-style attention_bias=true sets this and --attention-bias)",
    "tie_word_embeddings": " (kept tied under TP, PP and FSDP); set by --init-from",
    "rope_scaling": ", as JSON with Hugging Face's rope_parameters keys: '{\"rope_type\": \"llama3\", \"factor\": 32, "
                    "\"low_freq_factor\": 1, \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}'; "
                    "types linear, llama3, yarn (a mapping in YAML); set by --init-from",
}
"""Remarks of the flag only, appended to the ModelArgs field's docstring."""


def _model_flag(arg: dataclasses.Field, hint, doc: str) -> tuple[tuple, str]:
    """(make_dataclass entry, help text) of one ModelArgs field's flag: a field without a default is the preset's
    until set (None); one with a default keeps it; RoPE scaling is JSON text on the command line."""
    name = MODEL_FLAG_NAMES.get(arg.name, arg.name)
    help_doc = doc.split("; None:")[0].rstrip(".") + _FLAG_REMARKS.get(arg.name, "")
    if arg.name == "rope_scaling":
        hint = str | None
    if arg.default is dataclasses.MISSING:
        unset = _UNSET_MEANS.get(arg.name, "the preset's")
        return (name, hint | None, setting(None, "shape")), f"{help_doc} (default: {unset})"
    if arg.default is None:
        return (name, hint, setting(None, "shape")), f"{help_doc} (default: {_UNSET_MEANS.get(arg.name, 'off')})"
    return (name, hint, setting(arg.default, "shape")), help_doc + "."


def _model_section() -> type:
    entries: list[tuple] = [("model", str, setting("tiny", "shape"))]
    docs = {"model": "Preset: tiny (CPU demos/tests), 210m, 610m or 1b (the paper's sizes), modernbert-base or "
                     "modernbert-large (ModernBERT's released shapes and block), modernbert-tiny (its block, "
                     "CPU-sized). A preset's block features fill the flags left at their defaults."}
    hints, arg_docs = get_type_hints(ModelArgs), field_docs(ModelArgs)
    for arg in dataclasses.fields(ModelArgs):
        entry, doc = _model_flag(arg, hints[arg.name], arg_docs.get(arg.name, ""))
        entries.append(entry)
        docs[entry[0]] = doc
    entries.append(("make_vocab_size_divisible_by", int, setting(128, "shape")))
    docs["make_vocab_size_divisible_by"] = "Pad the tokenizer's vocabulary up to a multiple of this."
    entries.append(("global_attn_every_n_layers", int | None, setting(None, "shape")))
    docs["global_attn_every_n_layers"] = ("A full-attention layer every N layers and sliding-window ones between, "
                                          "as ModernBERT's global_attn_every_n_layers (layer i full iff i % N == 0): "
                                          "fills --layer-types (default: --layer-types, or the preset's pattern).")
    return section_class("ModelConfig", entries, docs, __name__,
                         "The model: a preset, and one flag per ModelArgs field that overrides it.")


ModelConfig = _model_section()


@dataclass(frozen=True)
class ObjectiveConfig:
    objective: str = setting("mlm", "objective")
    """Training objective: mlm, clm, mntp (masked next-token prediction), clm_then_mlm, mlm_then_clm, or stages
    joined by commas, e.g. mlm,clm,mlm (one switch between each two stages, at --switch or --switch-step)."""
    switch: float | list[float] | None = setting(None, "objective")
    """Where each stage of the objective ends, as fractions of --train-iters (one per switch, increasing: 0.6,0.9);
    switch step = round(F * iters); default 0.25 for a two-stage schedule unless --switch-step is given."""
    switch_step: int | list[int] | None = setting(None, "objective")
    """The last step of each stage but the last, as steps (instead of --switch; increasing: 6000,9000): branches
    never depend on rounding (default: from --switch)."""
    mask_ratio: float = setting(0.4, "masking")
    """MLM: probability that a non-special token is selected for prediction."""
    mask_replace_prob: float = setting(1.0, "masking")
    """MLM: probability that a selected token is replaced by the mask token."""
    mask_random_prob: float = setting(0.0, "masking")
    """MLM: probability that a selected token is replaced by a random token."""
    mask_keep_prob: float = setting(0.0, "masking")
    """MLM: probability that a selected token is left unchanged."""


@dataclass(frozen=True)
class DataConfig:
    data_path: list[str] = setting(factory=list, role="stream")
    """Dataset prefixes (.bin/.idx), Megatron syntax: `prefix` or `0.7 a 0.3 b` (default: the bundled Austen
    corpus)."""
    tokenizer_model: str | None = setting(None, "stream")
    """Tokenizer of the data: tokenizer.json / HF folder, tiktoken BPE file or sentencepiece model (needed with
    --data-path; without --data-path, a tokenizer.json the bundled corpus is tokenized with, e.g. a smaller
    vocabulary from tools/train_tokenizer.py; default: the bundled corpus's)."""
    data_cache_path: str | None = setting(None, "output")
    """Folder for the sample-index cache (.npy files reused by later launches) and the tokenized bundled corpus
    (default: no index cache, the indices are rebuilt in memory at each launch; the bundled corpus goes to
    $MEGAMLM_CACHE or ~/.cache/megamlm)."""
    num_workers: int = setting(0, "layout")
    """Data loader worker processes (never changes the sample order)."""
    split: str | None = setting(None, "stream")
    """Megatron's train,validation,test weights, e.g. 969,30,1: each corpus's documents are split in file order
    into contiguous ranges; training samples come from the first range only, validation samples from the second
    (the third is left unused; default: no split, every document trains)."""
    valid_data_path: list[str] = setting(factory=list, role="evaluation")
    """Validation data (prefixes or a blend, like --data-path), instead of --split (default: none)."""
    sample_mode: SampleMode = setting("windows", "stream")
    """How a sample is cut: windows (seq-length tokens of the packed stream, documents split where a window ends),
    packed_documents (ModernBERT's packer: whole documents, cut at seq-length, packed into a row with attention
    and RoPE positions kept inside each; the rest of the row is padding) or document_per_row (Ettin: one document
    per row, cut at seq-length, padded). Padding is never masked, predicted or counted in the log's tokens and
    tokens/s (--train-tokens and a phase's tokens still count rows x length). Validation uses the same mode."""


@dataclass(frozen=True)
class TrainingConfig:
    train_iters: int = setting(300, "schedule")
    """Optimizer steps of the run."""
    train_tokens: int | None = setting(None, "schedule")
    """The run's length in tokens, instead of --train-iters: it ends at the first step by which it has trained this
    many (tokens per step = global batch x sequence length; default: unset, --train-iters counts)."""
    micro_batch_size: int | None = setting(None, "layout")
    """Samples per forward/backward pass (default: fitted to the layout and logged; 16 on one process, 12 for the
    paper presets)."""
    global_batch_size: int | None = setting(None, "batch")
    """Samples per optimizer step; gradient accumulation = global / (micro x data-parallel) (default: 16, or 1,152
    for the paper presets, raised only where the layout needs more micro-batches; logged)."""
    rampup_batch_size: list[int] | None = setting(None, "batch")
    """Batch-size ramp-up, Megatron's START INCREMENT SAMPLES: the first steps take START samples each, and the
    batch grows by INCREMENT every SAMPLES / ((global - START) / INCREMENT) samples consumed, up to
    --global-batch-size once SAMPLES are consumed; each size a multiple of micro x data-parallel. A warmup counted
    in tokens (ModernBERT's: from B0 to the global batch over T tokens, one micro-batch per device at a time) is
    START B0, INCREMENT micro x data-parallel, SAMPLES T / --seq-length (default: no ramp-up)."""
    lr: float = setting(3e-3, "schedule")
    """Peak learning rate."""
    min_lr: float = setting(0.0, "schedule")
    """Learning rate at the end of the decay."""
    lr_decay_style: LRDecayStyle = setting("wsd", "schedule")
    """LR schedule: wsd (warmup-stable-decay), cosine, linear or constant."""
    lr_warmup_iters: int | None = setting(None, "schedule")
    """Linear warmup steps; default 5% of --train-iters (the paper: 2,000 of 42,000)."""
    lr_warmup_fraction: float | None = setting(None, "schedule")
    """Linear warmup as a fraction of --train-iters (instead of --lr-warmup-iters; default: unset)."""
    lr_wsd_decay_iters: int | None = setting(None, "schedule")
    """WSD: steps of the final linear decay; default 5% of --train-iters, at least 1 in runs of 2+ steps (the paper:
    2,000 of 42,000)."""
    lr_wsd_decay_fraction: float | None = setting(None, "schedule")
    """WSD: the final decay as a fraction of --train-iters (instead of --lr-wsd-decay-iters;
    default: unset)."""
    lr_wsd_decay_style: WSDDecayStyle = setting("linear", "schedule")
    """WSD: the shape of the final decay, Megatron's names for the factor on (lr - min-lr) when a fraction r of the
    decay is done: linear 1 - r, cosine (1 + cos(pi r)) / 2, exponential 2 x 0.5^r - 1, or minus_sqrt 1 - sqrt(r)
    (the 1-sqrt decay of ModernBERT and Ettin)."""
    optimizer: OptimizerName = setting("adamw", "optimizer")
    """adamw (torch's AdamW; --optimizer-impl picks its kernel) or stableadamw (StableAdamW of torch-optimi, as
    ModernBERT trains: AdamW whose step is scaled down per tensor where the gradient outgrows its second moment;
    needs pip install "megamlm[optimi]"). Both take --lr, --weight-decay, --adam-beta1/2 and --adam-eps alike."""
    weight_decay: float = setting(0.1, "optimizer")
    """AdamW weight decay, applied to matrices only."""
    adam_beta1: float = setting(0.9, "optimizer")
    """AdamW beta1."""
    adam_beta2: float = setting(0.95, "optimizer")
    """AdamW beta2."""
    adam_eps: float = setting(1e-5, "optimizer")
    """AdamW epsilon."""
    clip_grad: float = setting(1.0, "optimizer")
    """Gradient-norm clipping threshold (0 disables)."""
    seed: int = setting(1234, "stream")
    """Seeds the weights, the sample order and the MLM masks."""
    precision: Precision = setting("auto", "numerics")
    """auto (bf16 autocast on GPU, fp32 on CPU), bf16 or fp32."""
    device: Device = setting("auto", "layout")
    """Where to train (auto: CUDA/ROCm when visible, else CPU)."""
    exit_interval: int | None = setting(None, "output")
    """Save a checkpoint and exit 0 after the first step divisible by N (Megatron's name; default: never)."""
    exit_duration_in_mins: float | None = setting(None, "output")
    """Save a checkpoint and exit 0 after the first step that ends N minutes after the run started (default:
    never)."""
    max_skipped_steps: int = setting(10, "output")
    """Steps with a non-finite loss or gradient norm are skipped (no update); this many in a row stop the run."""


@dataclass(frozen=True)
class CheckpointConfig:
    save: str | None = setting(None, "output")
    """Folder to write checkpoints to (iter_NNNNNNN/ plus a `latest` pointer); relaunching with it resumes there
    (default: no checkpoints)."""
    save_interval: int | None = setting(None, "output")
    """Save every N steps (default: only at the objective switch and at the end, when --save is set)."""
    load: str | None = setting(None, "start")
    """Resume from this folder's newest whole checkpoint (or an iter_NNNNNNN folder); once --save holds checkpoints,
    they win, and --load equal to --save starts fresh while that folder is still empty (default: none)."""
    init_from: str | None = setting(None, "start")
    """Load weights only (continued pretraining): a megamlm checkpoint, a Hugging Face model folder or a .gguf file;
    fresh optimizer, schedule and data (default: none)."""
    continue_from: str | None = setting(None, "start")
    """Continued pretraining that continues the data: a megamlm checkpoint's weights, a fresh optimizer and LR
    schedule, steps counted from 0, and the sample stream continuing where that checkpoint stopped (its seed, data
    and --split must be this run's; default: none)."""
    save_at: list[int] = setting(factory=list, role="output")
    """Steps whose checkpoints --keep-last never deletes (branch points), e.g. 10000,21000
    (default: none)."""
    save_at_tokens: list[int] = setting(factory=list, role="output")
    """--save-at counted in tokens: the first step by which the run has trained each many tokens joins --save-at,
    e.g. 1000000000 (default: none)."""
    keep_last: int | None = setting(None, "output")
    """Keep only the N newest complete checkpoints (and the objective-switch and --save-at ones); default: keep all."""
    override_data: bool = setting(False, "start")
    """Resume even though the checkpoint was trained on other data (its data fingerprint differs)."""
    override_schedule: bool = setting(False, "start")
    """Continue a checkpoint whose history (objective and LR of every step so far, optimizer settings) differs from
    this launch's schedule, with this launch's values from the next step (each change is logged); without it
    such a resume is refused. A schedule that agrees up to the checkpoint's step (a branch) needs no override."""
    overwrite_damaged: bool = setting(False, "start")
    """When every checkpoint in --save is damaged, start anyway (from scratch, --load or --init-from) and let this
    run's checkpoints replace them; without it such a launch is refused."""


@dataclass(frozen=True)
class LoggingConfig:
    log_interval: int = setting(10, "output")
    """Print a log line every N steps."""
    tensorboard_dir: str | None = setting(None, "output")
    """Write TensorBoard scalars here (default: none written; --report-to tensorboard writes under --save)."""
    report_to: list[Tracker] = setting(factory=list, role="output")
    """Experiment trackers fed from metrics.jsonl's records (configuration and run record at start, every scalar,
    phase changes, lineage; rank 0), e.g. --report-to trackio wandb (trackio: local, no account). Each is an
    optional extra; one that fails warns once and the run goes on (default: none)."""
    tracker_project: str = setting("megamlm", "output")
    """The trackers' project (wandb, trackio; MLflow's experiment when --tracker-group is unset)."""
    tracker_group: str | None = setting(None, "output")
    """The trackers' group of runs (wandb and trackio group, MLflow experiment); a study's runs get the study's
    name (default: none)."""
    tracker_run_name: str | None = setting(None, "output")
    """The run's name in the trackers (default: the --save folder's name)."""
    profile_steps: list[int] | None = setting(None, "output")
    """Record a torch.profiler trace of steps FIRST to LAST (e.g. --profile-steps 3 5) under <save>/profile and
    print a one-screen summary after them: top operators, share of compute and of waiting (default: off)."""
    profile_all_ranks: bool = setting(False, "output")
    """With --profile-steps: every rank writes its own trace and summary (default: rank 0 only)."""


@dataclass(frozen=True)
class ValidationConfig:
    eval_interval: int | None = setting(None, "evaluation")
    """Evaluate on the validation set every N steps (also at the objective switch and the last step); default
    1000 when --split or --valid-data-path gives a validation set."""
    eval_iters: int | None = setting(None, "evaluation")
    """Global batches of validation samples per evaluation (the same samples and masks every time); default 10."""
    eval_mask_ratio: float | None = setting(None, "evaluation")
    """MLM mask ratio of the validation masks; default --mask-ratio (arms of a study that compare mask ratios
    should share one)."""
    eval_samples: EvalSamples = setting("run", "evaluation")
    """run: every validation at --seq-length and the run's masking and --sample-mode (the same samples throughout);
    phase: each phase's at its own length, masking and sample mode, as a stage launched alone evaluates (a context
    extension at 8,192 scores 8,192-token samples). Records name the length and masking (``validation_plan``)."""


@dataclass(frozen=True)
class ParallelConfig:
    tensor_model_parallel_size: int = setting(1, "layout")
    """Tensor-parallel degree (Megatron layout: heads, MLP and vocabulary split over TP ranks)."""
    pipeline_model_parallel_size: int = setting(1, "layout")
    """Pipeline stages over ranks (layers split evenly; embedding on the first, head and loss on the last)."""
    dp_replicate: int = setting(1, "layout")
    """FSDP2 hybrid sharding: number of replica groups (parameters sharded within each, replicated across)."""
    dp_shard: int = setting(-1, "layout")
    """FSDP2 sharding degree; -1: the rest of world / (TP x PP x dp-replicate)."""
    data_parallel_impl: DataParallelImpl = setting("fsdp", "layout")
    """Data parallelism: fsdp (FSDP2 fully_shard per block) or ddp (full replicas, all-reduce)."""
    pipeline_schedule: PipelineSchedule = setting("1f1b", "layout")
    """Pipeline schedule: 1f1b or interleaved_1f1b (needs --num-layers-per-virtual-stage)."""
    num_layers_per_virtual_stage: int | None = setting(None, "layout")
    """Interleaved 1F1B: layers in each virtual stage (each rank holds layers / (PP x this) stages; default: unset,
    required by interleaved_1f1b)."""
    recompute: bool = setting(False, "layout")
    """Activation checkpointing per transformer block (recompute activations in the backward pass)."""
    world_size: int | None = setting(None, "layout")
    """With --dry-run: the number of processes to plan for (default: the launcher's world size)."""
    dry_run: bool = setting(False, "layout")
    """Validate the layout and print per-rank parameters and estimated memory, then exit (no GPU needed)."""
    distributed_timeout_minutes: float = setting(30.0, "layout")
    """How long a rank waits in a collective for a peer gone without closing its connections (a dropped link, a hung
    node) before the run fails: torch.distributed's process-group timeout, logged at start (Megatron's flag)."""


@dataclass(frozen=True)
class PerformanceConfig:
    kernel_backend: KernelBackend = setting("auto", "layout")
    """Hot-path kernels: auto (Triton on GPU, chunked LM-head loss on CPU), triton, chunked or reference."""
    attention_backend: AttentionBackend = setting("sdpa", "layout")
    """Attention: {backends}, or auto (each measured at start on this GPU for the run's shapes, the fastest kept for
    bidirectional and for causal attention; sdpa on CPU)."""
    document_mask: bool = setting(False, "layout")
    """Attend only within each document of a packed window (causal and bidirectional alike)."""
    compile: CompileMode = setting("auto", "layout")
    """torch.compile: auto (the mode measured fastest: none on CPU, blocks on GPU), none, blocks (each transformer
    block), model (the whole model; blocks under pipeline parallelism) or cudagraphs (the whole model replayed as
    CUDA graphs; one GPU process). A bare --compile means blocks, --no-compile none."""
    fp8: bool = setting(False, "layout")
    """Train the transformer blocks' linear layers in float8 (torchao; H100-class GPUs); embedding, norms and LM head
    keep their precision."""
    optimizer_impl: OptimizerImpl = setting("torch", "layout")
    """AdamW implementation: torch (fused kernel on GPU) or apex (apex.optimizers.FusedAdam)."""


def _with_backend_help(cls: type) -> None:
    """The --attention-backend help ({backends} in its docstring) names each backend of the one table
    (megamlm/model/attention_backends.py), what it is and where it runs."""
    docs = field_docs(cls)
    backends = ", ".join(f"{name} ({spec.summary}{', GPU' if spec.gpu_only else ''})"
                         for name, spec in ATTENTION_TABLE.items())
    cls.__field_docs__ = {**docs, "attention_backend": docs["attention_backend"].replace("{backends}", backends)}
    field_docs.cache_clear()


_with_backend_help(PerformanceConfig)


@dataclass(frozen=True)
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
    recipe: RecipeConfig = field(default_factory=RecipeConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


SECTION_CLASSES: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(Config)}
"""Section name -> its dataclass, in the order of ``Config``'s fields (the one list of the sections)."""

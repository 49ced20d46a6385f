"""The study file (YAML): the grid of encoders to pretrain, the settings they share, and how to evaluate them.

Every field below is a key of the file; the string under it is its documentation. ``study.load.load_study``
reads a file into a frozen ``Study`` with the config loader's converter (``config.loader.typed_dataclass``) and
checks it completely (``study.checks``), raising one ``StudyError`` naming the key and the fix, before any plan is
made. Paths the planner reads itself (``pretrain.config``, ``cost.benchmarks``, ``report``) are relative to the
study file; the settings under ``pretrain`` are pretrain.py settings, passed to it as written (data paths are
relative to the folder runs are launched from). The evaluation's fine-tuning and task settings are
tools/evaluate.py's own dataclasses (``Hyperparameters``, ``TaskSettings``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from megamlm.config import field_docs, fraction_step, objective_name
from megamlm.config.loader import keys_of
from megamlm.config.phase_fields import PhaseConfig
from megamlm.errors import UserError
from megamlm.eval.aggregate import TieRule
from megamlm.eval.finetune import Hyperparameters
from megamlm.eval.runner import PAPER_LRS, PAPER_SEEDS
from megamlm.eval.tasks import TaskSettings

ContinuationObjective = Literal["mlm", "clm"]
ExportArch = Literal["eurobert", "llama", "gemma3_encoder"]
EVALUATE_OWN_SETTINGS = ("lr", "seed", "eurobert_inputs")
"""Fine-tuning and task settings the study does not take: the grid (lrs, seeds) and the export set them per run."""


class StudyError(UserError, ValueError):
    """A study file that cannot be planned; the message names the key and the fix."""


@dataclass(frozen=True)
class Grid:
    budgets: list[int]
    """Steps of each model (pretrain.py --train-iters)."""
    clm_fractions: list[float] = field(default_factory=list)
    """Share of the budget trained with CLM before switching to MLM: 0 = MLM only, 1 = CLM only, else CLM then MLM
    switching after step round(fraction x budget)."""
    switch_steps: list[int] = field(default_factory=list)
    """Instead of clm_fractions: CLM for the first N steps, then MLM (0 = MLM only; N >= budget = CLM only)."""
    mask_ratios: list[float] = field(default_factory=lambda: [0.4])
    """MLM mask ratios, each its own arm (runs branch from each other only at the same mask ratio)."""
    reproduces_paper: bool = False
    """True: this grid's arms are models the paper trained (arXiv 2507.00994, at this size, budget and mask ratio);
    the planner's table then marks every run `paper` or `extension` (an arm any marked grid holds is the paper's)."""
    seeds: list[int] = field(default_factory=list)
    """Pretraining seeds of this grid's arms (default: the study's `seeds`), e.g. more seeds for the arms a claim
    compares alone and fewer for arms a claim pools."""


@dataclass(frozen=True)
class Schedule:
    phases: list[str]
    """The objectives trained one after the other (mlm, clm, mntp = masked next-token prediction), e.g. [mlm, clm,
    mlm] (the CLM detour) or [mntp, mlm]; one phase trains that objective throughout (pretrain.py --objective)."""
    budgets: list[int]
    """Steps of each model (pretrain.py --train-iters): one arm per budget and mask ratio."""
    switches: list[float] = field(default_factory=list)
    """Where each phase but the last ends, as fractions of the budget, strictly increasing in (0, 1): [0.6, 0.9]
    switches after steps round(0.6 x budget) and round(0.9 x budget) (pretrain.py --switch); one per boundary."""
    switch_steps: list[int] = field(default_factory=list)
    """Instead of switches: the last step of each phase but the last, strictly increasing and inside every budget
    (pretrain.py --switch-step), e.g. [300, 450]."""
    mask_ratios: list[float] = field(default_factory=lambda: [0.4])
    """Mask ratios of the phases that mask (mlm, mntp), each its own arm (runs branch from each other only at the
    same mask ratio)."""
    reproduces_paper: bool = False
    """True: these arms are models the paper trained (as grids[].reproduces_paper)."""
    seeds: list[int] = field(default_factory=list)
    """Pretraining seeds of these arms (default: the study's `seeds`)."""


@dataclass(frozen=True)
class PhaseArm:
    label: str
    """The arm's name in run names and the report ({size}-{label}[-s{seed}]), e.g. decay-m15."""
    phases: list[PhaseConfig] = field(default_factory=list)
    """Changes to pretrain.config's phases, one mapping per phase in order, each holding only what this arm
    changes ({} keeps a phase as written; phases left out are kept): [{}, {mask_ratio: 0.15}] lowers the second
    phase's mask rate. A key is any a phase sets (mask_ratio, data_path, objective, seq_length, rope_theta, steps,
    global_batch_size, ...: the phases: keys of pretrain.py)."""


@dataclass(frozen=True)
class PhaseArms:
    arms: list[PhaseArm]
    """The arms, each pretrain.config's phases with its changes: every arm shares the steps it trains alike with
    the others (a stable phase they share is trained once; each branches where its phases first differ)."""
    budgets: list[int]
    """Steps of each model (pretrain.py --train-iters): one arm per budget (the label gets -BUDGET when there are
    several); the phases' lengths must fit it (the last phase may leave its length out to fill the rest)."""
    reproduces_paper: bool = False
    """True: these arms are models the paper trained (as grids[].reproduces_paper)."""
    seeds: list[int] = field(default_factory=list)
    """Pretraining seeds of these arms (default: the study's `seeds`)."""


@dataclass(frozen=True)
class Continuation:
    parents: list[str]
    """Arms to continue from their last (decayed) checkpoint, named without size and seed (e.g. clm42k-m40);
    the continuation takes the parent's weights, a fresh optimizer and LR schedule, and the next samples of its
    stream (pretrain.py --continue-from)."""
    steps: list[int]
    """Steps of each continuation (one arm per parent and length)."""
    objective: ContinuationObjective = "mlm"
    """Objective of the continued pretraining."""
    reproduces_paper: bool = False
    """True: these continuations are models the paper trained (as grids[].reproduces_paper)."""
    pretrain: dict = field(default_factory=dict)
    """pretrain.py settings of these runs on top of the study's (sections as in pretrain: e.g. training:
    {lr_warmup_fraction: 0.05, lr_wsd_decay_fraction: 0.1})."""


@dataclass(frozen=True)
class Evaluation:
    tasks: list[str]
    """Fine-tuning tasks (tools/evaluate.py --tasks names: the paper's 12 datasets, local tasks, TYPE:PATH)."""
    lrs: list[float] = field(default_factory=lambda: list(PAPER_LRS))
    """Fine-tuning learning-rate grid."""
    seeds: list[int] = field(default_factory=lambda: list(PAPER_SEEDS))
    """Fine-tuning seeds (the protocol's mean and 95% CI are over these)."""
    random_init_seeds: list[int] = field(default_factory=list)
    """Fine-tuning seeds of each size's random-init model (default: seeds): where the models have one fine-tuning
    seed, several here give the informative test (arms against the random-init model) a spread on its side."""
    checkpoint_steps: list[int] = field(default_factory=list)
    """Steps whose checkpoints are evaluated too (score against pretraining steps): each is kept from --keep-last
    and evaluated in the run that trains that step."""
    hyperparameters: Hyperparameters = field(default_factory=Hyperparameters)
    """Fine-tuning settings (megamlm.eval.finetune.Hyperparameters: batch_size, micro_batch_size, max_steps, ...;
    lr and seed come from lrs and seeds)."""
    task_settings: TaskSettings = field(default_factory=TaskSettings)
    """Task settings (megamlm.eval.tasks.TaskSettings: max_length, doc_stride, max_query_length, ...)."""
    max_train_examples: int = 0
    """At most this many train examples per task (a fixed subset); 0 = all."""
    max_eval_examples: int = 0
    """At most this many validation and test examples per task; 0 = all."""
    informative_margin: float = 1.0
    """Score points by which some arm must beat both its size's random-init model and the task's best trivial
    baseline, on validation scores, for the claims to use the task (megamlm/study/evidence/informative.py)."""
    tie_rule: TieRule = "smaller"
    """Fine-tuning LRs tied at the best validation mean: their smaller LR, their larger, or the mean of their test
    scores; fixed before the run. The report decides each claim under every rule and calls a verdict that changes
    with the rule fragile (megamlm/study/evidence/rules.py)."""
    data_dir: str | None = None
    """Folder of the local tasks' labelled sets (default: ../shared/data beside the repository)."""
    hf_datasets_dir: str | None = None
    """Folder of save_to_disk copies of the paper's datasets (tools/fetch_eval_datasets.py --save-to)."""
    retrieval_corpus: str = "judged"
    """The paper's retrieval sets: judged (EncodEval's corpus) or full."""
    export_arch: ExportArch = "eurobert"
    """Hugging Face architecture the checkpoints are exported as: eurobert, llama, or gemma3_encoder (a study of
    encoders continued from Gemma 3, exported as the native bidirectional Gemma 3)."""


@dataclass(frozen=True)
class Cost:
    tokens_per_second: float | None = None
    """Training tokens per second of one GPU, for every size and objective (--tokens-per-second wins)."""
    benchmarks: list[str] = field(default_factory=list)
    """benchmarks/train_step.py result files (--json) whose megamlm_tokens_per_s prices the runs of their preset and
    objective (relative to the study file)."""


@dataclass(frozen=True)
class Slurm:
    nodes: int = 1
    """Nodes per pretraining job."""
    gpus_per_node: int = 8
    """GPUs per node (one rank each); 0 for a CPU partition (ranks from the allocation's CPUs, --device cpu)."""
    cpus_per_task: int = 64
    """CPUs of the one task per node (torchrun and its ranks)."""
    time: str = "24:00:00"
    """Time limit of each pretraining job (a longer run is requeued from its checkpoint)."""
    partition: str | None = None
    """SLURM partition (none: the cluster's default)."""
    account: str | None = None
    """SLURM account (none: yours by default)."""
    extra: list[str] = field(default_factory=list)
    """More #SBATCH options for every job, e.g. ["--qos=high", "--constraint=h100"]."""
    eval_gpus: int = 8
    """GPUs of each evaluation job (one node; one fine-tuning worker per GPU); 0: one worker on the CPUs."""
    eval_time: str = "48:00:00"
    """Time limit of each evaluation job."""


@dataclass(frozen=True)
class Study:
    name: str
    """The study's name (file names, job names)."""
    sizes: list[str]
    """Model presets (tiny, 210m, 610m, 1b)."""
    grids: list[Grid] = field(default_factory=list)
    """The arms of the paper's kind trained from scratch: each grid is budgets x CLM fractions (or switch steps) x
    mask ratios; the study is the union of its grids and schedules."""
    schedules: list[Schedule] = field(default_factory=list)
    """More arms trained from scratch, each a sequence of phases of any length (e.g. the CLM detour mlm, clm, mlm,
    or mntp then mlm) x budgets x mask ratios; every arm shares its common prefix with the others."""
    seeds: list[int] = field(default_factory=lambda: [1234])
    """Pretraining seeds: each arm is trained once per seed (weights, sample order and masks)."""
    pretrain: dict = field(default_factory=dict)
    """pretrain.py settings shared by every run: `config` (a pretrain.py YAML file, relative to the study file) and
    config sections (model, data, training, checkpoint, logging, validation, parallel, performance), which win over
    the file's."""
    phase_arms: list[PhaseArms] = field(default_factory=list)
    """Arms trained from scratch that differ in the settings of pretrain.config's recipe phases (its phases:
    list): data, mask rate, objective, sequence length, RoPE base, batch, lengths (e.g. one stable phase and decay
    phases of several mask rates, the WSD-branching ablation: examples/studies/wsd_branches.yaml). A study whose
    pretrain.config has phases declares its arms here only."""
    continued_pretraining: list[Continuation] = field(default_factory=list)
    """Continued-pretraining arms from finished arms."""
    evaluation: Evaluation | None = None
    """Fine-tuning after each run (none: pretraining only)."""
    cost: Cost = field(default_factory=Cost)
    """Where GPU-hour estimates come from."""
    slurm: Slurm = field(default_factory=Slurm)
    """Resources of the emitted SLURM jobs."""
    root: str | None = None
    """Folder of the runs, exports, evaluations and report (default runs/NAME; --root wins)."""
    report: str | None = None
    """Where the report is written (a Markdown file, relative to the study file; its figures go beside it in
    figures/); default ROOT/report/REPORT.md."""
    claims: str | None = None
    """The claims table the report answers (a YAML file, relative to the study file, of a paper's claims as
    comparisons of arms: claims/clm_mlm_2507.00994.yaml beside the example studies); none: no claims section."""
    source: Path = field(default=Path("."), metadata={"internal": True})
    """The study file (set by load_study)."""
    scale: float = field(default=1.0, metadata={"internal": True})
    """The --scale every step count was multiplied by (set by load_study): below 1 the study is a rehearsal."""
    own_report: str | None = field(default=None, metadata={"internal": True})
    """The study file's own report key, before any --set (a rehearsal never writes there)."""

    @property
    def is_rehearsal(self) -> bool:
        """A smaller copy of the study (--scale < 1): it rehearses the pipeline and answers none of its questions."""
        return self.scale < 1

    @property
    def default_root(self) -> str:
        return self.root or f"runs/{self.name}"

    def resolve(self, path: str) -> Path:
        """A path given in the study file, relative to the file."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.source.parent / p


class ArmSpec(NamedTuple):
    """One arm trained from scratch, as a grid or a schedule declares it."""

    objective: str
    """pretrain.py --objective: a named objective (mlm, clm, clm_then_mlm, ...) or phases joined by commas."""
    train_iters: int
    switch_steps: tuple[int, ...]
    """The last step of each phase but the last (empty for one phase)."""
    mask_ratio: float


def grid_arms(grid: Grid) -> list[ArmSpec]:
    """Every arm of a grid: MLM, CLM or CLM-then-MLM at one switch step."""
    arms = []
    for mask_ratio in grid.mask_ratios:
        for budget in grid.budgets:
            switches = ([fraction_step(f, budget) for f in grid.clm_fractions] if grid.clm_fractions
                        else list(grid.switch_steps))
            for switch in switches:
                if switch <= 0:
                    arms.append(ArmSpec("mlm", budget, (), mask_ratio))
                elif switch >= budget:
                    arms.append(ArmSpec("clm", budget, (), mask_ratio))
                else:
                    arms.append(ArmSpec("clm_then_mlm", budget, (switch,), mask_ratio))
    return arms


def schedule_arms(schedule: Schedule) -> list[ArmSpec]:
    """Every arm of a schedule, named as pretrain.py stores its objective (``clm, mlm`` is clm_then_mlm: the same
    arm as a grid's)."""
    objective = objective_name(tuple(schedule.phases))
    arms = []
    for mask_ratio in schedule.mask_ratios:
        for budget in schedule.budgets:
            switches = (tuple(fraction_step(f, budget) for f in schedule.switches) if schedule.switches
                        else tuple(schedule.switch_steps))
            arms.append(ArmSpec(objective, budget, switches, mask_ratio))
    return arms


class StudyArm(NamedTuple):
    spec: ArmSpec
    reproduces_paper: bool
    """Its grid or schedule marks it the paper's."""
    seeds: list[int]
    """Its pretraining seeds: its grid's or schedule's, else the study's."""


def study_arms(study: Study) -> list[StudyArm]:
    """Every arm trained from scratch: the grids' first, then the schedules'."""
    return ([StudyArm(arm, grid.reproduces_paper, grid.seeds or study.seeds)
             for grid in study.grids for arm in grid_arms(grid)]
            + [StudyArm(arm, s.reproduces_paper, s.seeds or study.seeds)
               for s in study.schedules for arm in schedule_arms(s)])


def all_seeds(study: Study) -> list[int]:
    """Every pretraining seed of the study: its own and its grids', schedules' and phase arms'."""
    return sorted({*study.seeds, *(seed for arm in study_arms(study) for seed in arm.seeds),
                   *(seed for group in study.phase_arms for seed in group.seeds)})


def key_reference() -> str:
    """Every study key with its documentation, as a Markdown table (examples/studies/README.md prints it)."""
    lines = ["| key | meaning |", "|---|---|"]
    sections = (("", Study), ("grids[].", Grid), ("schedules[].", Schedule), ("phase_arms[].", PhaseArms),
                ("phase_arms[].arms[].", PhaseArm),
                ("continued_pretraining[].", Continuation), ("evaluation.", Evaluation), ("cost.", Cost),
                ("slurm.", Slurm))
    for prefix, cls in sections:
        docs = field_docs(cls)
        for name in keys_of(cls):
            text = " ".join(docs.get(name, "").split()).replace("|", "\\|")
            lines.append(f"| `{prefix}{name}` | {text} |")
    return "\n".join(lines) + "\n"

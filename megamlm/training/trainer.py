"""The training loop: resolve -> decide the start -> build -> (restore) -> announce -> steps -> validations ->
checkpoints.

Read top to bottom: ``pretrain`` builds the run (``build_trainer``: resolves the run, reads the checkpoint it starts
from once and decides how it starts, ``training/resume.py``, so that all user errors surface there, before any work;
builds this rank's share of the model in the run's layout, one process being the trivial layout; acts on the start
decision: restores what it takes from the checkpoint), announces it
(``announce``: the start-up lines) and runs it. ``Trainer.train`` runs one optimizer step per global batch:
``Trainer.run_step`` makes the step's batch (the ObjectiveSchedule's objective, masks and targets) and runs
``train_step`` (training/step.py: forward/backward, the non-finite skip, clipping, the update), then
``Trainer.after_step`` scores the validation set and saves checkpoints when due. The loop keeps no per-step history:
tests and tools observe steps through the ``on_step`` callback (a ``StepOutcome`` per step), and every logged step
and validation goes to ``metrics.jsonl``. The non-finite skip is decided on the device; on a GPU the host also does
not wait for the steps, reading their numbers at log lines (training/reporter.py).
"""

from __future__ import annotations

import time
from array import array
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from megamlm.checkpoint import load_model_weights
from megamlm.checkpoint.checkpointer import CheckpointSaveError
from megamlm.checkpoint.lock import lock_save_folder
from megamlm.checkpoint.manager import CheckpointManager, SavePolicy
from megamlm.checkpoint.saved_run import find_saved_run
from megamlm.config import BatchSizes, Config, unused_lr_settings
from megamlm.config.derived import validation_enabled
from megamlm.config.phases import Recipe, StepPlan
from megamlm.data import GlobalBatchSampler, MicroBatchLoader
from megamlm.data.documents import tokens_through
from megamlm.extras import detect_optional_extras
from megamlm.hf.init_from import warn_if_context_shorter
from megamlm.log import log, rank
from megamlm.model.rope import set_rotary_bases
from megamlm.model.transformer import Transformer, count_parameters
from megamlm.objectives import Batch, ObjectiveSchedule
from megamlm.parallel.dry_run import memory_note
from megamlm.parallel.parallelize import ParallelModel, parallelize
from megamlm.parallel.runtime import start_parallel
from megamlm.training.metrics import format_duration
from megamlm.training.nonfinite import NonFiniteGuard
from megamlm.training.optim import LRSchedule, build_optimizer, set_hyperparameters
from megamlm.training.recipe_run import recipe_dataset, recipe_notes
from megamlm.training.reporter import PendingStep, RunReporter, StepLedger
from megamlm.training.resolved_run import ResolvedRun, backends_on_device, resolve_run
from megamlm.training.resume import LaunchPlan, StartDecision, TrainProgress, decide_start
from megamlm.training.run_profiler import RunProfiler
from megamlm.training.run_record import build_run_record, write_run_record
from megamlm.training.step import SkipStreak, StepOutcome, StepSetup, skip_streak, train_step
from megamlm.training.stopping import ExitSignalHandler, StopPolicy, WriteFailure
from megamlm.training.validation import ValidationSet, load_validation_set


@dataclass
class RunResult:
    """What a launch did, in summary."""

    start_step: int
    last_step: int
    switch_step: int | None
    """The first objective switch (the only one of a two-phase schedule)."""
    resumed_from: Path | None = None
    start: str = "fresh"
    """How the run started (training/resume.py): fresh, init, continue, resume, branch or override."""
    stop_reason: str | None = None
    """Why the run stopped before --train-iters (signal, --exit-interval, --exit-duration-in-mins)."""
    last_checkpoint: Path | None = None
    total_skipped: int = 0
    switch_steps: tuple[int, ...] = ()
    """Every phase boundary: the last step of each phase but the last."""


def pretrain(cfg: Config, on_step: Callable[[StepOutcome], None] | None = None,
             read_on_device: bool | None = None) -> RunResult:
    """Train; SIGTERM/SIGUSR1/SIGINT during the run save a checkpoint and return early (training/stopping.py), and
    the --save folder is locked for the run (checkpoint/lock.py).

    ``read_on_device``: read the step numbers (left on the device by ``train_step``) only when needed, not every
    step (training/reporter.py). None: where it pays, on a GPU with the fused AdamW; True also on CPU (tests).
    """
    started = time.monotonic()  # --exit-duration-in-mins counts from here: setup included, the process's age not
    with ExitSignalHandler() as signals, ExitStack() as held:
        t = cfg.training
        stop = StopPolicy(signals, t.exit_interval, t.exit_duration_in_mins, started)
        trainer = build_trainer(cfg, stop, held, on_step, read_on_device)
        if trainer.progress.step >= cfg.training.train_iters:  # a finished run relaunched: nothing to do
            log(complete_note(trainer.progress.step, cfg.training.train_iters))
            return trainer.result
        announce(trainer)
        trainer.train()
        return trainer.result


def complete_note(step: int, train_iters: int) -> str:
    """What a relaunch of a finished run says (it exits 0 without training)."""
    return (f"the run is already complete at step {step} (--train-iters {train_iters}); nothing to train. Raise "
            "--train-iters to continue it, or give another --save to start a new run")


def unsaved_note(steps: int) -> str:
    """The last line of a run without --save."""
    return (f"nothing was saved: this run had no --save, so its {steps} steps are gone when it exits; relaunch with "
            "--save DIR (and --load DIR to resume it later) to keep the weights")


@dataclass
class Trainer:
    """One run, built and restored by ``build_trainer``: what its loop reads and the state the loop advances."""

    cfg: Config
    plan: ResolvedRun
    pm: ParallelModel
    optimizer: torch.optim.Optimizer
    loader: MicroBatchLoader
    progress: TrainProgress
    guard: NonFiniteGuard
    manager: CheckpointManager
    validation: ValidationSet | None
    stop: StopPolicy
    device: torch.device
    result: RunResult
    end_sample: int
    """The run's samples end here (the sample stream itself does not depend on it)."""
    on_step: Callable[[StepOutcome], None] | None = None
    read_on_device: bool | None = None
    streak: SkipStreak | None = field(default=None, init=False)
    """The guard's streak mirrored on the device, when the host reads the step numbers only when needed
    (training/step.py)."""
    step_setup: StepSetup | None = field(default=None, init=False)
    """What every step reads and none changes (training/step.py), decided before the first step."""
    lrs: array | None = field(default=None, init=False)
    """The learning rate of each step (``LRSchedule.table``: step k at index k - 1)."""
    batch_sizes: array | None = field(default=None, init=False)
    """The global batch of each step (``BatchSizes.sizes``, config/rampup.py: step k at index k - 1)."""
    reporter: RunReporter | None = field(default=None, init=False)
    ledger: StepLedger | None = field(default=None, init=False)
    """The finished steps the host has not read yet (training/reporter.py)."""
    recipe: Recipe | None = field(default=None, init=False)
    """The run's phases, resolved once at start-up (``ResolvedRun.recipe``): the step asks it what it is."""
    schedule: ObjectiveSchedule | None = field(default=None, init=False)
    """The resolved run's ObjectiveSchedule, built from the recipe."""
    rope_bases: tuple | None = field(default=None, init=False)
    """The RoPE bases the model's rotary tables hold (a recipe phase may set others: ``enter_phase``)."""
    plans: tuple[StepPlan, ...] = field(default=(), init=False)
    phase_of: array | None = field(default=None, init=False)
    """What every step is (``Recipe.step_table``): the plan of step k is ``plans[phase_of[k - 1]]``."""

    def __post_init__(self) -> None:
        self.recipe, self.schedule = self.plan.recipe, self.plan.objective_schedule

    @property
    def boundaries(self) -> tuple[int, ...]:
        """Every boundary (the objective's switches and the recipe's phases'): a validation and a checkpoint follow
        each."""
        return tuple(sorted({*self.schedule.switch_steps, *self.recipe.boundaries}))

    @property
    def lr_schedule(self) -> LRSchedule:
        return self.plan.lr_schedule

    def train(self) -> None:
        """One optimizer step per global batch up to --train-iters, or until a stop (``after_step``)."""
        t, log_cfg = self.cfg.training, self.cfg.logging
        self.streak = skip_streak(self.guard, self.optimizer, self.device, self.read_on_device)
        self.step_setup = StepSetup.of(self.pm, self.device, t.clip_grad, t.precision)
        self.lrs = self.lr_schedule.table(t.train_iters)
        self.rope_bases = (self.plan.model_args.rope_theta, self.plan.model_args.local_rope_theta)
        self.plans, self.phase_of = self.recipe.step_table()
        self.batch_sizes = self.recipe.step_sizes()  # the run's ramp-up or global batch, or a phase's own
        self.reporter = RunReporter(self.cfg.checkpoint.save, log_cfg.tensorboard_dir, log_cfg.log_interval,
                                    t.train_iters, self.result.start_step, self.plan.model_args, self.device,
                                    self.plan.dims.world_size)
        self.reporter.recipe = self.recipe  # tokens per step by phase
        self.reporter.open_trackers(self.cfg, self.manager.record)  # --report-to (training/trackers.py)
        if any(p.sample_mode != "windows" for p in self.recipe.phases):  # tokens counted without rows' padding
            self.reporter.tokens_through = partial(tokens_through, self.loader.dataset)
        self.ledger = StepLedger(self.guard, self.reporter, self.batch_sizes, self.on_step)
        run_start = time.perf_counter()
        batches = iter(self.loader)
        self.pm.train()
        if self.progress.step < t.train_iters:
            log(first_step_note(self.pm.compile_mode, self.progress.step + 1, t.train_iters))
        profiler = RunProfiler.of(self.cfg, self.device)  # --profile-steps (training/run_profiler.py)
        while self.progress.step < t.train_iters:
            with profiler.step(self.progress.step + 1):
                self.ledger.add(self.run_step(next(batches)))
            if self.after_step(self.progress.step):
                break
        profiler.close()
        self.reporter.close()
        if self.reporter.failure is not None:  # the last events' flush (the checkpoint is written)
            raise WriteFailure(f"{self.reporter.failure}; the run finished, its checkpoints are whole"
                               + ("" if self.manager.save_dir is None else f" ({self.result.last_checkpoint})"))
        log(f"done: {self.progress.step - self.result.start_step} steps in "
            f"{format_duration(time.perf_counter() - run_start)}")
        if self.manager.save_dir is None and self.result.stop_reason is None:
            log(unsaved_note(self.progress.step - self.result.start_step))

    def run_step(self, loaded: list[dict]) -> PendingStep:
        """One optimizer step on the next global batch (``loaded``: this rank's micro-batches from the loader)."""
        schedule = self.schedule
        step = self.progress.step + 1
        now = self.plans[self.phase_of[step - 1]]  # what this step is (Recipe.at's): phase, objective, RoPE bases...
        if step == now.phase.first_step or step == self.result.start_step + 1:
            self.enter_phase(step, now)
        objective = now.objective
        whole = now.phase.sample_mode != "windows"  # whole documents: their ids always reach attention
        document_mask = self.cfg.performance.document_mask or whole
        micro_batches = [schedule.make_batch(step, mb["tokens"].numpy(), mb["sample_ids"].tolist(),
                                             mb["document_ids"].numpy() if document_mask else None, whole)
                         for mb in loaded]
        if self.device.type == "cuda":  # pinned: the copies to the device do not make the host wait
            micro_batches = [pin_batch(b) for b in micro_batches]
        lr = self.lrs[step - 1]
        result = train_step(self.step_setup, self.optimizer, micro_batches, lr, streak=self.streak)
        self.progress.advance(self.batch_sizes[step - 1])
        self.result.last_step = step
        return PendingStep(result, step, objective, lr, [k for b in micro_batches for k in b.sample_ids],
                           self.progress.consumed_samples, schedule.is_switch_step(step))

    def enter_phase(self, step: int, now: StepPlan) -> None:
        """Before a phase's first step, and a launch's first: the model's rotary tables at the phase's RoPE bases (on
        every rank and pipeline stage alike), and the line saying which phase the run is in."""
        if now.rope_bases != self.rope_bases:
            set_rotary_bases(self.pm.model, *now.rope_bases)
            self.rope_bases = now.rope_bases
        if step > 1:
            log(f"{'in' if step == self.result.start_step + 1 else 'entering'} {now.phase.describe()}")

    def after_step(self, step: int) -> bool:
        """What is due after ``step``: its accounting, the switch, a validation, a checkpoint; True to stop here."""
        t, schedule, manager, result = self.cfg.training, self.schedule, self.manager, self.result
        validating = self.validation is not None and self.validation.due(step, t.train_iters, self.boundaries)
        if (self.streak is None or self.on_step is not None or validating or manager.due(step)
                or self.reporter.logs_at(step, schedule.is_switch_step(step))):
            self.settle(step)
        if schedule.is_switch_step(step):
            log(f"objective switch after step {step}: {schedule.objective_at(step)} -> "
                f"{schedule.objective_at(step + 1)}")
        if validating:
            self.reporter.validation(self.validation.evaluate(self.pm, step, self.device, t.precision),
                                     self.progress.consumed_samples)
        if manager.due(step):
            result.last_checkpoint = manager.save(step)
        self.stop.failure = self.reporter.failure
        reason = self.stop.reason_to_stop(step)
        if self.stop.failed:
            self.stop_on_failure(step, reason)
        if step < t.train_iters and reason:
            self.settle(step)
            result.last_checkpoint = manager.save(step) or result.last_checkpoint
            result.stop_reason = reason
            log(f"stopping after step {step} ({reason}); " + ("relaunch the same command to continue from here"
                                                           if manager.save_dir else "nothing saved (no --save)"))
            return True
        return False

    def stop_on_failure(self, step: int, reason: str) -> None:
        """A write that failed (a full disk under metrics.jsonl or the TensorBoard events) stops the run as a signal
        does, saving a checkpoint if it can; then a WriteFailure (exit 2) says what happened."""
        self.settle(step)
        manager = self.manager
        if manager.save_dir is None:
            saved = "nothing saved (no --save)"
        else:
            try:
                saved = f"saved checkpoint {manager.save(step)}: free space, then relaunch the same command"
            except CheckpointSaveError as err:
                saved = f"no checkpoint could be written either ({err})"
                if self.result.last_checkpoint is not None:
                    saved += f"; the last one is {self.result.last_checkpoint}"
        self.result.stop_reason = reason
        self.reporter.close()
        raise WriteFailure(f"stopped after step {step}: {reason}; {saved}")

    def settle(self, step: int) -> None:
        """Account for the steps up to ``step`` (training/reporter.py); raise NonFiniteError, after saving a
        checkpoint of the last good state, when the guard's streak is complete."""
        guard, manager = self.guard, self.manager
        stopped_at = self.ledger.settle()
        self.result.total_skipped = guard.total_skipped
        if stopped_at is None:
            return
        saved = "No checkpoint was written (no --save)."
        if manager.save_dir is not None:
            saved = (f"Checkpoint {manager.save(step)} holds the weights and optimizer state of step "
                     f"{guard.last_good_step} (the last good state) with the data position after step {step}.")
        if step > stopped_at:
            saved += (f" Steps {stopped_at + 1}-{step} ran before the host read the step flags; their updates were "
                      "held back.")
        raise guard.error(saved)


def pin_batch(batch: Batch) -> Batch:
    document_ids = batch.document_ids.pin_memory() if batch.document_ids is not None else None
    position_ids = batch.position_ids.pin_memory() if batch.position_ids is not None else None
    return replace(batch, input_ids=batch.input_ids.pin_memory(), targets=batch.targets.pin_memory(),
                   positions=batch.positions.pin_memory(), document_ids=document_ids, position_ids=position_ids)


def build_trainer(cfg: Config, stop: StopPolicy, held: ExitStack,
                  on_step: Callable[[StepOutcome], None] | None = None,
                  read_on_device: bool | None = None) -> Trainer:
    """Resolve the run and check the checkpoint it starts from (every user error surfaces here, before any work),
    then build this rank's share of the model, data and optimizer and restore what the run takes from the
    checkpoint. ``held`` keeps the --save folder locked for the run; ``stop`` (the stop signals and --exit-*
    limits, counted from the launch) ends it early."""
    t, c = cfg.training, cfg.checkpoint
    plan = resolve_run(cfg)  # the start-up checks (training/startup.py)
    mesh, device = (start_parallel(plan.dims, plan.device, cfg.parallel.distributed_timeout_minutes)
                    if plan.dims.is_parallel else (None, plan.device))
    launch = LaunchPlan(cfg, build_run_record(cfg, plan, plan.dims.world_size), plan.segment)
    # One run per --save folder: an existing folder is locked before its checkpoints are read, a new one only before
    # the first write, so that a refused launch leaves nothing behind.
    save_exists = bool(c.save) and Path(c.save).exists()
    if save_exists:
        held.enter_context(lock_save_folder(c.save))
    # The checkpoint this launch starts from, read once; every difference from it is honoured or refused here.
    may_resume = save_exists or c.load or c.continue_from or c.init_from  # a checkpoint this launch could start from
    start = decide_start(find_saved_run(c) if may_resume else None, launch)
    record = {**launch.record, "lineage": start.lineage}
    for note in start.notes:
        log(note)

    progress = start.progress()
    validation, dataset, end_sample = load_data(cfg, plan, progress)
    pm = build_parallel_model(cfg, plan, mesh, device)
    optimizer = build_optimizer(pm.model, t.lr, t.weight_decay, (t.adam_beta1, t.adam_beta2), t.adam_eps,
                                impl=cfg.performance.optimizer_impl, name=t.optimizer)
    sizes = plan.recipe.step_sizes()  # each step's global batch: the ramp-up's, or a recipe phase's own
    ramp = sizes[progress.step:] if t.rampup_batch_size is not None or len(set(sizes)) > 1 else None
    sampler = GlobalBatchSampler(total_samples=end_sample, global_batch_size=t.global_batch_size,
                                 micro_batch_size=t.micro_batch_size, dp_rank=pm.dp_rank, dp_size=pm.dp_size,
                                 consumed_samples=progress.consumed_samples, batch_sizes=ramp)
    guard = NonFiniteGuard(t.max_skipped_steps)
    schedule = plan.objective_schedule
    boundaries = (*schedule.switch_steps, *plan.recipe.boundaries)
    policy = SavePolicy(c.save, t.train_iters, c.save_interval, c.keep_last, pinned_steps(cfg, boundaries))
    manager = CheckpointManager(policy, pm.model, optimizer,
                                {"progress": progress, "sampler": sampler, "guard": guard,
                                 "objective_schedule": schedule, "lr_schedule": plan.lr_schedule,
                                 "history": start.history}, record)
    restore(start, manager, cfg, plan.model_args.max_seq_length)
    if not save_exists:
        held.enter_context(lock_save_folder(c.save))
    if c.save and rank() == 0:
        write_run_record(c.save, record)

    result = RunResult(start_step=progress.step, last_step=progress.step, switch_step=schedule.switch_step,
                       resumed_from=start.path if start.restores_state else None, start=start.kind,
                       switch_steps=schedule.switch_steps)
    loader = MicroBatchLoader(dataset, sampler, num_workers=cfg.data.num_workers, pin_memory=device.type == "cuda")
    return Trainer(cfg, plan, pm, optimizer, loader, progress, guard, manager, validation, stop, device, result,
                   end_sample, on_step, read_on_device)


def load_data(cfg: Config, plan: ResolvedRun, progress: TrainProgress):
    """The validation set, then the training samples up to the run's last; returns (validation, dataset,
    end_sample)."""
    # The run's samples end here; the sample stream itself does not depend on it.
    end_sample = progress.consumed_samples + sum(plan.recipe.step_sizes()[progress.step:])
    group = dist.group.WORLD if plan.dims.is_parallel else None
    vocab_size = plan.model_args.vocab_size
    # The (small) validation set first: its errors come before the training index is built.
    validation = load_validation_set(cfg, plan, group) if validation_enabled(cfg) else None
    dataset = recipe_dataset(cfg, plan.recipe, plan.data_path, end_sample, vocab_size, plan.split, group)
    return validation, dataset, end_sample


def build_parallel_model(cfg: Config, plan: ResolvedRun, mesh, device: torch.device) -> ParallelModel:
    """The full model from the run's seed (the same weights on every rank), then this rank's share of it."""
    backends = backends_on_device(plan, cfg, device) if plan.backends.attention == "auto" else plan.backends
    if backends.attention == "auto":
        log(f"attention auto: {backends.auto_attention[0]} for bidirectional, {backends.auto_attention[1]} for causal "
            "(fastest measured on this device)")
    torch.manual_seed(cfg.training.seed)
    model = Transformer(plan.model_args, backends).to(device)
    return parallelize(model, plan.dims, mesh, device, cfg.training.precision, cfg.parallel.recompute,
                       plan.compile_mode, cfg.performance.fp8)


def pinned_steps(cfg: Config, switch_steps: tuple[int, ...]) -> dict[int, str]:
    """Steps whose checkpoints --keep-last never deletes, and why: --save-at and every phase boundary (a branch
    point)."""
    pinned = {step: "--save-at" for step in cfg.checkpoint.save_at}
    pinned.update((step, "phase boundary") for step in switch_steps)
    return pinned


def restore(start: StartDecision, manager: CheckpointManager, cfg: Config, seq_length: int) -> None:
    """Load what ``start`` takes from its checkpoint: the whole state, or the weights only."""
    t = cfg.training
    if start.restores_state:
        # The history is the one decide_start continued; this launch's schedules replace a branch's.
        schedules = () if start.restores_schedules else ("objective_schedule", "lr_schedule")
        manager.restore(start.path, start.saved.train_state, skip=("history", *schedules))
        set_hyperparameters(manager.optimizer, t.weight_decay, (t.adam_beta1, t.adam_beta2), t.adam_eps)
        progress = start.saved.progress
        verb = {"resume": "resumed", "branch": "branched", "override": "resumed (schedule overridden)"}[start.kind]
        log(f"{verb} from {start.path} at step {progress['step']} ({progress['consumed_samples']} samples consumed)")
    elif start.kind == "continue":
        load_model_weights(start.path, manager.model, verify=False)  # find_saved_run verified it
        log(f"continued pretraining from the weights of {start.path} at sample {start.progress().consumed_samples} "
            "of the stream (fresh optimizer and schedule, step 0)")
    elif start.kind == "init":
        load_model_weights(start.path, manager.model, verify=False)  # find_saved_run verified it
        log(f"initialised weights from {start.path} (fresh optimizer, schedule and data position)")
        warn_if_context_shorter(start.path, seq_length)


# What a run says before its first step, so a long first step is never silent: the model, schedule, data,
# validation and performance settings, the estimated memory per device (the dry-run estimator, with a warning when
# it exceeds the device) and, in Trainer.train, when step 1 starts (and compiles).

def announce(trainer: Trainer) -> None:
    """The start-up lines, once the run is built and restored."""
    cfg, plan, args = trainer.cfg, trainer.plan, trainer.plan.model_args
    log(f"model: {rank_parameters_note(trainer.pm.model, plan.dims.world_size)} "
        f"without the LM head ({args.num_layers} layers, hidden {args.hidden_size}, "
        f"vocab {args.vocab_size}, seq {args.max_seq_length})")
    log(trainer.schedule.describe())
    for line in recipe_notes(trainer.recipe):
        log(line)
    unused = unused_lr_settings(cfg.training)
    log(plan.lr_schedule.describe() + (f" ({unused})" if unused else ""))
    if cfg.training.rampup_batch_size is not None:
        log(BatchSizes.of(cfg.training).describe())
    phase_data = any(phase.data_path for phase in trainer.recipe.phases)
    data = "each phase's (above)" if phase_data else ", ".join(plan.data_path)
    log(f"data: {data} | samples {trainer.progress.consumed_samples}-{trainer.end_sample - 1} "
        f"of the stream | tokenizer {plan.tokenizer_path} | device {trainer.device}")
    if trainer.validation is not None:
        log(f"validation: {trainer.validation.describe()}, every {trainer.validation.interval} "
            f"steps, at the switch and at the end ({trainer.validation.scored()})")
    log(describe_performance(cfg))
    log(memory_note(cfg, plan.dims, args, trainer.device))


def rank_parameters_note(model: torch.nn.Module, world_size: int) -> str:
    """``1.4M parameters on this rank (1.8M unsharded)``: the tensor-parallel and FSDP shards this rank holds, and
    its (pipeline stage's) parameters whole."""
    held = count_parameters(model, include_lm_head=False, local=True)
    whole = count_parameters(model, include_lm_head=False)
    if world_size == 1 or held == whole:
        return f"{held / 1e6:.1f}M parameters" + (" on this rank" if world_size > 1 else "")
    return f"{held / 1e6:.1f}M parameters on this rank ({whole / 1e6:.1f}M unsharded)"


def describe_performance(cfg: Config) -> str:
    perf = cfg.performance
    extras = ", ".join(f"{name} {version or 'absent'}" for name, version in detect_optional_extras().items())
    return (f"kernels {perf.kernel_backend} | attention {perf.attention_backend}"
            f"{' with document masks' if perf.document_mask else ''}"
            f" | compile {perf.compile}{' | fp8 linears' if perf.fp8 else ''} | optional extras: {extras}")


def first_step_note(compile_mode: str, step: int, train_iters: int) -> str:
    """``compile_mode``: the resolved ``--compile`` mode (``ParallelModel.compile_mode``)."""
    note = f"step {step}/{train_iters} starting"
    if compile_mode != "none":
        what = "every block" if compile_mode == "blocks" else "the model"
        return note + f": torch.compile compiles {what} during this first step, which can take minutes"
    return note + " (the first step also warms up the kernels and allocator)"

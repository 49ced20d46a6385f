"""One optimizer step, batch to update, for every parallel layout; ``train_step`` reads top to bottom.

The step: the global count of predicted tokens, forward/backward of this rank's micro-batches (``forward_backward``;
a pipeline runs its schedule, parallel/pipeline.py), the global loss, the global gradient norm, the non-finite skip,
clipping, and the AdamW update. With one process every reduction is the identity.

The loss is the sum of token losses over the *global* batch divided by the global batch's predicted-token count, so
the gradient does not depend on how the batch is split into micro-batches or ranks. Each data-parallel rank scales
its share by DP because FSDP/DDP average gradients over DP ranks; the pipeline schedule is told not to rescale.

The skip: a step whose global loss or global pre-clip gradient norm is not finite changes no parameter and no
optimizer state (no weight decay, no moment update, no step count); only the gradients are dropped. Both numbers are
reduced over every rank, so every rank takes the same decision without another collective. The decision is a 0-d
flag on the device, handed to torch's fused AdamW (GPU and CPU) as ``found_inf``, the mechanism
``torch.amp.GradScaler`` uses: the host reads nothing during the step, and the step's numbers stay 0-d device tensors
(``StepResult``) until training/reporter.py reads them (``StepOutcome``). An optimizer that cannot take the flag
(apex's FusedAdam) is the one branch where the host reads it.

What does not change between steps (the precision context, the data-parallel size, the parameters the norm sums,
the clipping threshold) is decided once before the first step (``StepSetup.of``) and read here as plain values, so
that one step calls into the model, the loss and the optimizer only.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, ContextManager

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from megamlm.objectives import Batch
from megamlm.parallel.launch import host_collective_device
from megamlm.parallel.parallelize import ParallelModel
from megamlm.parallel.pipeline import pipeline_runner
from megamlm.parallel.vocab_parallel_loss import parallel_sparse_lm_loss
from megamlm.precision import autocast_for
from megamlm.training.nonfinite import NonFiniteGuard


@dataclass(frozen=True)
class StepSetup:
    """What every optimizer step of a run reads and none changes, decided once before the first step."""

    pm: ParallelModel
    device: torch.device
    autocast: Callable[[], ContextManager]
    """The forward's precision context (``with setup.autocast():``), megamlm/precision.py's ``autocast_for``."""
    dp: int
    """The data-parallel size (``ParallelDims.dp``)."""
    parameters: list[torch.Tensor]
    """This rank's parameters, a tied embedding counted once over the ranks: what the global gradient norm sums
    (``ParallelModel.unique_parameters``)."""
    clip_grad: float
    """The gradient norm is clipped to this (0: no clipping)."""

    @classmethod
    def of(cls, pm: ParallelModel, device: torch.device, clip_grad: float, precision: str = "auto") -> StepSetup:
        return cls(pm, device, autocast_for(device, precision), pm.dims.dp, pm.unique_parameters(), clip_grad)


@dataclass(frozen=True)
class StepResult:
    """What ``train_step`` returns: the step's numbers as 0-d device tensors, which the host has not read."""

    loss: torch.Tensor
    """Mean token loss over the global batch (fp64)."""
    grad_norm: torch.Tensor
    """Global L2 norm of the gradients before clipping (fp32)."""
    applied: torch.Tensor
    """False (bool) when the update was skipped on every rank: the loss or the norm was not finite, or a complete
    skip streak held the update back (``SkipStreak``)."""
    predicted_tokens: int
    """Tokens of the global batch that carried a loss (counted on the host's copy of the targets)."""


@dataclass
class StepOutcome:
    """One optimizer step as the host reads it (training/reporter.py): what the loop's ledger and reporter account
    for and what an ``on_step`` callback receives."""

    loss: float
    """Mean token loss over the global batch."""
    grad_norm: float
    """Global L2 norm of the gradients before clipping."""
    applied: bool
    """False when the update was skipped on every rank."""
    predicted_tokens: int
    lr: float
    sample_ids: list[int]
    """The global sample ids this rank trained on."""
    step: int
    """The 1-based step."""
    objective: str
    consumed_samples: int
    """Samples of the stream consumed after this step."""
    is_switch_step: bool = False


class SkipStreak:
    """The NonFiniteGuard's streak (training/nonfinite.py, the source of truth) mirrored on the device, between two
    reads of the step numbers by the host.

    ``count`` is the number of skipped steps in a row (it starts from the guard's, a resumed run's streak); once a
    skip brings it to the limit, ``stopped`` latches and every later update is held back until the host reads the
    numbers and stops the run (training/reporter.py): the run's state is still that of its last good step, as when
    a loop that reads every step stops at once. It counts the very ``applied`` flags that the host accounts for, in
    the same order, so at every read it equals the guard's count.
    """

    def __init__(self, in_a_row: int, max_in_a_row: int, device: torch.device):
        self.count = torch.full((), in_a_row, dtype=torch.int64, device=device)  # a fill: no blocking copy
        self.max_in_a_row = max_in_a_row
        self.stopped = torch.zeros((), dtype=torch.bool, device=device)

    def record(self, applied: torch.Tensor) -> None:
        self.count = torch.where(applied, 0, self.count + 1)
        self.stopped = self.stopped | (self.count >= self.max_in_a_row)


def skip_streak(guard: NonFiniteGuard, optimizer: torch.optim.Optimizer, device: torch.device,
                read_on_device: bool | None) -> SkipStreak | None:
    """The device mirror of ``guard``'s streak when the host reads the step numbers only when it needs them: on a GPU
    (where reading every step would make the host wait) or where ``read_on_device`` asks, and only with the fused
    AdamW (an optimizer that cannot take ``found_inf`` makes the host read every step's flag anyway). None: the host
    reads every step and stops the run as soon as the guard's streak is complete."""
    if read_on_device is None:
        read_on_device = device.type == "cuda"
    if not (read_on_device and optimizer.defaults.get("fused")):
        return None
    return SkipStreak(len(guard.in_a_row), guard.max_in_a_row, device)


def train_step(setup: StepSetup, optimizer: torch.optim.Optimizer, micro_batches: list[Batch], lr: float,
               streak: SkipStreak | None = None) -> StepResult:
    """Forward/backward this rank's micro-batches, then skip or clip globally and apply one update at ``lr``.

    ``streak``: the device mirror of the skip streak (``skip_streak``); a complete one holds the update back.
    """
    pm = setup.pm
    loss, predicted = forward_backward(setup, micro_batches)
    grad_norm = global_grad_norm(setup)
    # The skip, decided before clipping: clipped by an infinite norm, the gradients would turn into finite zeros.
    found_inf = (~(torch.isfinite(loss) & torch.isfinite(grad_norm))).to(torch.float32)
    if streak is not None:
        found_inf = torch.maximum(found_inf, streak.stopped.to(torch.float32))
    if setup.clip_grad > 0:
        # Under a set found_inf a non-finite norm turns the gradients into zeros or NaNs here; the update that would
        # read them is skipped.
        params = [p for p in pm.model.parameters() if p.grad is not None]
        torch.nn.utils.clip_grads_with_norm_(params, setup.clip_grad, grad_norm)
    for group in optimizer.param_groups:
        group["lr"] = lr
    if optimizer.defaults.get("fused"):
        # torch's fused AdamW reads the flag and, where it is 1, leaves every parameter, both moments and the step
        # count exactly as they were (on every rank alike: the flag comes from global numbers).
        optimizer.found_inf = found_inf
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif not found_inf.item():
        # An optimizer without found_inf (apex's FusedAdam; torch's AdamW where its fused kernel does not run): the
        # host reads the flag, waiting for the step here.
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # skipped or not: the gradients are dropped
    applied = found_inf == 0
    if streak is not None:
        streak.record(applied)
    return StepResult(loss, grad_norm, applied, predicted)


def forward_backward(setup: StepSetup, micro_batches: list[Batch]) -> tuple[torch.Tensor, int]:
    """Accumulate this step's gradients on every rank; returns (global mean token loss, a 0-d fp64 device tensor
    the host does not wait for; global predicted tokens, counted on the host's copy of the targets)."""
    pm, device, dims = setup.pm, setup.device, setup.pm.dims
    local_tokens = sum(b.positions.numel() for b in micro_batches)
    # Every TP and PP rank of a data-parallel replica computes the same count.
    total_tokens = round(_global_sum(pm, local_tokens, dims.tp * dims.pp))
    scale = setup.dp / max(total_tokens, 1)
    if dims.pp > 1:
        runner = pipeline_runner(pm, len(micro_batches), device, micro_batches[0].input_ids.shape[1])
        local_loss = runner.run(micro_batches, scale, device, setup.autocast)
    else:
        part = pm.parts[0]
        local_loss = torch.zeros((), dtype=torch.float32, device=device)
        for i, batch in enumerate(micro_batches):
            input_ids = batch.input_ids.to(device, non_blocking=True)
            targets = batch.targets.to(device, non_blocking=True)
            # Selected by indices the host computed: a boolean selection on the device would make the host wait.
            positions = batch.positions.to(device, non_blocking=True)
            document_ids = batch.document_ids.to(device, non_blocking=True) if batch.document_ids is not None else None
            position_ids = batch.position_ids.to(device, non_blocking=True) if batch.position_ids is not None else None
            with _gradient_sync(part, i == len(micro_batches) - 1):
                with setup.autocast():
                    hidden = part(input_ids, causal=batch.causal, document_ids=document_ids,
                                  position_ids=position_ids)
                    # The LM head's weight is read after the forward: FSDP2 has gathered it there.
                    loss, _ = parallel_sparse_lm_loss(hidden, pm.model.lm_head.weight, targets,
                                                      pm.model.backends.kernels, positions, pm.model.head,
                                                      pm.model.lm_head.bias)
                (loss * scale).backward()
            local_loss += loss.detach()
    # Losses live on the last pipeline stage, repeated on each of its TP ranks.
    return _global_loss(pm, local_loss, dims.tp) / max(total_tokens, 1), total_tokens


def global_grad_norm(setup: StepSetup) -> torch.Tensor:
    """The L2 norm of every rank's gradients together (DTensor shards and pipeline stages), in fp32.

    Not finite when any gradient anywhere is not finite, or when the finite gradients' norm overflows.
    """
    pm = setup.pm
    grads = [p.grad for p in setup.parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, 2.0) if grads else torch.zeros(())
    if isinstance(total, DTensor):
        total = total.full_tensor()
    total = total.float()
    if pm.dims.pp > 1:
        # Stages hold disjoint parameters (a tied embedding counted on the first only): add the squares.
        squared = total.pow(2)
        dist.all_reduce(squared, group=pm.mesh["pp"].get_group())
        total = squared.sqrt()
    return total


def _gradient_sync(part: torch.nn.Module, sync: bool):
    """FSDP2: skip the reduce-scatter on non-final micro-batches; DDP: no_sync."""
    if isinstance(part, FSDPModule):
        part.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    if isinstance(part, DistributedDataParallel) and not sync:
        return part.no_sync()
    return contextlib.nullcontext()


def _global_sum(pm: ParallelModel, value: float, replicas: int) -> float:
    """Sum over the layout's ranks of a per-rank number held identically by ``replicas`` ranks each (a host number:
    reduced on the CPU where the group can, so the host does not wait for the device's queued work)."""
    if pm.mesh is None:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=host_collective_device())
    dist.all_reduce(t)
    return float(t) / replicas


def _global_loss(pm: ParallelModel, local_sum: torch.Tensor, replicas: int) -> torch.Tensor:
    """``_global_sum`` of a loss sum kept on the device (fp64, 0-d): nothing is read by the host."""
    total = local_sum.double().reshape(())
    if pm.mesh is not None:
        dist.all_reduce(total)
        total = total / replicas
    return total

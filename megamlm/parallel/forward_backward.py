"""Forward and backward of one global batch in any layout, and the global gradient norm.

The loss is the sum of token losses over the *global* batch divided by the global batch's predicted-token
count, so the gradient does not depend on how the batch is split into micro-batches or ranks. Each
data-parallel rank scales its share by DP because FSDP/DDP average gradients over DP ranks; the pipeline
schedule is told not to rescale. With one process every reduction is the identity.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor, Shard
from torch.nn.parallel import DistributedDataParallel

from megamlm.objectives import IGNORE_INDEX, Batch
from megamlm.objectives.loss import predicted_positions
from megamlm.parallel.launch import host_collective_device
from megamlm.parallel.parallelize import ParallelModel
from megamlm.parallel.pipeline import build_schedule
from megamlm.parallel.tied_embeddings import sync_gradients
from megamlm.parallel.vocab_parallel_loss import (
    parallel_sparse_lm_loss,
    parallel_top1_correct,
)
from megamlm.precision import autocast_context


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


def global_grad_norm(pm: ParallelModel) -> torch.Tensor:
    """The L2 norm of every rank's gradients together (DTensor shards and pipeline stages), in fp32.

    Not finite when any gradient anywhere is not finite, or when the finite gradients' norm overflows.
    """
    grads = [p.grad for p in pm.unique_parameters() if p.grad is not None]
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


def clip_gradients_(pm: ParallelModel, max_norm: float, total_norm: torch.Tensor) -> None:
    """Scale every gradient by min(1, max_norm / total_norm) (foreach kernels)."""
    params = [p for p in pm.model.parameters() if p.grad is not None]
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total_norm)


def _gradient_sync(part: torch.nn.Module, sync: bool):
    """FSDP2: skip the reduce-scatter on non-final micro-batches; DDP: no_sync."""
    if isinstance(part, FSDPModule):
        part.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    if isinstance(part, DistributedDataParallel) and not sync:
        return part.no_sync()
    return contextlib.nullcontext()


def _forward_backward_plain(pm: ParallelModel, micro_batches: list[Batch], scale: float, device,
                            precision) -> torch.Tensor:
    part = pm.parts[0]
    loss_sum = torch.zeros((), dtype=torch.float32, device=device)
    for i, batch in enumerate(micro_batches):
        input_ids = batch.input_ids.to(device, non_blocking=True)
        targets = batch.targets.to(device, non_blocking=True)
        # Selected by indices the host computes: a boolean selection on the device would make the host wait.
        positions = predicted_positions(batch.targets).to(device, non_blocking=True)
        document_ids = batch.document_ids.to(device, non_blocking=True) if batch.document_ids is not None else None
        with _gradient_sync(part, i == len(micro_batches) - 1):
            with autocast_context(device, precision):
                hidden = part(input_ids, causal=batch.causal, document_ids=document_ids)
                loss, _ = parallel_sparse_lm_loss(hidden, pm.head_weight(), targets, pm.model.backends.kernels,
                                                  positions)
            (loss * scale).backward()
        loss_sum += loss.detach()
    return loss_sum


class PipelineRunner:
    """This rank's pipeline schedule, built once; the loss scale of the current step is set before each run."""

    def __init__(self, pm: ParallelModel, n_microbatches: int, device: torch.device):
        self.pm = pm
        self.scale = 1.0
        self.sums: list[torch.Tensor] = []
        self.measure = None
        """While evaluating: the function of (output, targets) whose results ``evaluate`` collects."""
        self.measured: list[tuple[float, int, int]] = []
        self.n_microbatches = n_microbatches
        self.schedule, self.stages = build_schedule(pm.parts, pm.stage_ids, pm.dims.num_stages,
                                                    pm.dims.pipeline_schedule, n_microbatches, self.loss_fn,
                                                    pm.mesh["pp"].get_group(), device)

    def loss_fn(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        tp_mesh = self.pm.tp_mesh
        if tp_mesh is not None:
            output = DTensor.from_local(output, tp_mesh, [Shard(1)], run_check=False)
        if self.measure is not None:
            self.measured.append(self.measure(output, targets))
            return torch.zeros((), device=output.device)
        loss, _ = parallel_sparse_lm_loss(output, self.pm.head_weight(), targets, self.pm.model.backends.kernels)
        self.sums.append(loss.detach())
        return loss * self.scale

    def _inputs(self, micro_batches: list[Batch], device) -> tuple[tuple, torch.Tensor | None, dict]:
        """(first-stage args, last-stage target, keyword arguments of every stage) of one schedule call."""
        if len(micro_batches) != self.n_microbatches:
            raise ValueError(f"the pipeline was built for {self.n_microbatches} micro-batches, got {len(micro_batches)}")
        causal = micro_batches[0].causal
        if any(b.causal != causal for b in micro_batches):
            raise ValueError("all micro-batches of a step share one objective")
        # The attention mode (and document ids) reach every stage as keyword arguments of the schedule.
        kwargs: dict = {"causal": causal}
        if micro_batches[0].document_ids is not None:
            kwargs["document_ids"] = torch.cat([b.document_ids for b in micro_batches]).to(device, non_blocking=True)
        pm = self.pm
        args = ((torch.cat([b.input_ids for b in micro_batches]).to(device, non_blocking=True),)
                if pm.has_first_stage else ())
        target = (torch.cat([b.targets for b in micro_batches]).to(device, non_blocking=True)
                  if pm.has_last_stage else None)
        return args, target, kwargs

    def run(self, micro_batches: list[Batch], scale: float, device, precision) -> torch.Tensor:
        args, target, kwargs = self._inputs(micro_batches, device)
        self.scale, self.sums = scale, []
        with autocast_context(device, precision):
            self.schedule.step(*args, target=target, losses=[], return_outputs=False, **kwargs)
        # On its first run the schedule infers shapes with one extra call of the loss on placeholder tensors.
        real = self.sums[len(self.sums) - self.n_microbatches:] if self.sums else []
        return sum(real) if real else torch.zeros((), device=device)

    def evaluate(self, micro_batches: list[Batch], measure, device, precision) -> list[tuple[float, int, int]]:
        """Forward only (the schedule's ``eval``): ``measure(output, targets)`` of each micro-batch, on the last
        stage (empty elsewhere)."""
        args, target, kwargs = self._inputs(micro_batches, device)
        self.measure, self.measured = measure, []
        try:
            with autocast_context(device, precision):
                self.schedule.eval(*args, target=target, losses=[], return_outputs=False, **kwargs)
        finally:
            self.measure = None
        return self.measured[len(self.measured) - self.n_microbatches:] if self.measured else []


def _pipeline(pm: ParallelModel, n_microbatches: int, device: torch.device) -> PipelineRunner:
    if pm.pipeline is None:
        pm.pipeline = PipelineRunner(pm, n_microbatches, device)
    return pm.pipeline


def forward_backward(pm: ParallelModel, micro_batches: list[Batch], device: torch.device,
                     precision: str = "auto") -> tuple[float, int]:
    """Accumulate this step's gradients on every rank; returns (global mean loss, global predicted tokens)."""
    loss, total_tokens = forward_backward_on_device(pm, micro_batches, device, precision)
    return float(loss), total_tokens


def forward_backward_on_device(pm: ParallelModel, micro_batches: list[Batch], device: torch.device,
                               precision: str = "auto") -> tuple[torch.Tensor, int]:
    """``forward_backward`` with the loss left on the device (a 0-d fp64 tensor, the same value): the host does
    not wait for the step. The predicted-token count comes from the host's copy of the targets."""
    dims = pm.dims
    local_tokens = sum(int((b.targets != IGNORE_INDEX).sum()) for b in micro_batches)
    # Every TP and PP rank of a data-parallel replica computes the same count.
    total_tokens = round(_global_sum(pm, local_tokens, dims.tp * dims.pp))
    scale = dims.dp / max(total_tokens, 1)
    if dims.pp > 1:
        local_loss = _pipeline(pm, len(micro_batches), device).run(micro_batches, scale, device, precision)
        sync_gradients(pm.model, pm.embedding_group)
    else:
        local_loss = _forward_backward_plain(pm, micro_batches, scale, device, precision)
    # Losses live on the last pipeline stage, repeated on each of its TP ranks.
    return _global_loss(pm, local_loss, dims.tp) / max(total_tokens, 1), total_tokens


def forward_metrics(pm: ParallelModel, micro_batches: list[Batch], device: torch.device, precision: str = "auto",
                    accuracy: bool = False) -> tuple[float, int, int]:
    """Forward only, no gradients (validation): (sum of token losses, predicted tokens, top-1 correct predictions
    when ``accuracy``) over the micro-batches of every data-parallel rank; the same numbers on every rank."""
    def measure(hidden: torch.Tensor, targets: torch.Tensor) -> tuple[float, int, int]:
        loss, predicted = parallel_sparse_lm_loss(hidden, pm.head_weight(), targets, pm.model.backends.kernels)
        correct = parallel_top1_correct(hidden, pm.head_weight(), targets) if accuracy else 0
        return float(loss), predicted, correct

    with torch.no_grad():
        if pm.dims.pp > 1:
            measured = _pipeline(pm, len(micro_batches), device).evaluate(micro_batches, measure, device, precision)
        else:
            measured = []
            for batch in micro_batches:
                document_ids = batch.document_ids.to(device) if batch.document_ids is not None else None
                with autocast_context(device, precision):
                    hidden = pm.parts[0](batch.input_ids.to(device), causal=batch.causal, document_ids=document_ids)
                    measured.append(measure(hidden, batch.targets.to(device)))
    sums = torch.tensor([sum(m[i] for m in measured) for i in range(3)], dtype=torch.float64, device=device)
    if pm.mesh is not None:  # the numbers live on the last pipeline stage, repeated on each of its TP ranks
        dist.all_reduce(sums)
        sums /= pm.dims.tp
    loss, predicted, correct = sums.tolist()
    return loss, round(predicted), round(correct)

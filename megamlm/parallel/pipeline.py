"""Pipeline parallelism's schedule: this rank's stages (``parallel/pipeline_stages.py``, applied by
``parallel/parallelize.py``) run 1F1B or interleaved 1F1B through ``torch.distributed.pipelining``.

``PipelineRunner`` runs this rank's schedule for the step (training/step.py) and for validation.
"""

from __future__ import annotations

from typing import Callable, ContextManager

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor, Shard

from megamlm.objectives import Batch
from megamlm.parallel.parallelize import ParallelModel
from megamlm.parallel.tied_embeddings import sync_gradients
from megamlm.parallel.vocab_parallel_loss import parallel_sparse_lm_loss


def build_schedule(stage_modules: list[nn.Module], stage_ids: list[int], num_stages: int, schedule_name: str,
                   n_microbatches: int, loss_fn, pp_group, device: torch.device):
    """torch.distributed.pipelining stages + the 1F1B / interleaved 1F1B schedule of this rank."""
    # Imported here, by the pipeline layouts only: torch.distributed.pipelining adds about 2 s (CPU) to the start
    # of every run, and most runs have no pipeline.
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

    stages = [PipelineStage(module, stage_index=s, num_stages=num_stages, device=device, group=pp_group)
              for module, s in zip(stage_modules, stage_ids)]
    # scale_grads=False: the loss is already normalised by the global batch's token count.
    if schedule_name == "1f1b":
        return Schedule1F1B(stages[0], n_microbatches=n_microbatches, loss_fn=loss_fn, scale_grads=False), stages
    return ScheduleInterleaved1F1B(stages, n_microbatches=n_microbatches, loss_fn=loss_fn,
                                   scale_grads=False), stages


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
        model = self.pm.model
        loss, _ = parallel_sparse_lm_loss(output, model.lm_head.weight, targets, model.backends.kernels,
                                          prediction_head=model.head, bias=model.lm_head.bias)
        self.sums.append(loss.detach())
        return loss * self.scale

    def _inputs(self, micro_batches: list[Batch], device) -> tuple[tuple, torch.Tensor | None, dict]:
        """(first-stage args, last-stage target, keyword arguments of every stage) of one schedule call."""
        if len(micro_batches) != self.n_microbatches:
            raise ValueError(f"the pipeline was built for {self.n_microbatches} micro-batches, got "
                             f"{len(micro_batches)}")
        causal = micro_batches[0].causal
        if any(b.causal != causal for b in micro_batches):
            raise ValueError("all micro-batches of a step share one objective")
        # The attention mode (and document ids) reach every stage as keyword arguments of the schedule.
        kwargs: dict = {"causal": causal}
        for name in ("document_ids", "position_ids"):
            if getattr(micro_batches[0], name) is not None:
                kwargs[name] = torch.cat([getattr(b, name) for b in micro_batches]).to(device, non_blocking=True)
        pm = self.pm
        args = ((torch.cat([b.input_ids for b in micro_batches]).to(device, non_blocking=True),)
                if pm.has_first_stage else ())
        target = (torch.cat([b.targets for b in micro_batches]).to(device, non_blocking=True)
                  if pm.has_last_stage else None)
        return args, target, kwargs

    def run(self, micro_batches: list[Batch], scale: float, device,
            autocast: Callable[[], ContextManager]) -> torch.Tensor:
        """Forward and backward of this step's micro-batches, each loss times ``scale``, under ``autocast()``
        (megamlm/precision.py): this rank's sum of token losses (0-d; zero off the last stage)."""
        args, target, kwargs = self._inputs(micro_batches, device)
        self.scale, self.sums = scale, []
        with autocast():
            self.schedule.step(*args, target=target, losses=[], return_outputs=False, **kwargs)
        # On its first run the schedule infers shapes with one extra call of the loss on placeholder tensors.
        real = self.sums[len(self.sums) - self.n_microbatches:] if self.sums else []
        local_loss = sum(real) if real else torch.zeros((), device=device)
        sync_gradients(self.pm.model, self.pm.embedding_group)  # the two copies of a tied embedding
        return local_loss

    def evaluate(self, micro_batches: list[Batch], measure, device,
                 autocast: Callable[[], ContextManager]) -> list[tuple[float, int, int]]:
        """Forward only (the schedule's ``eval``): ``measure(output, targets)`` of each micro-batch, on the last
        stage (empty elsewhere)."""
        args, target, kwargs = self._inputs(micro_batches, device)
        self.measure, self.measured = measure, []
        try:
            with autocast():
                self.schedule.eval(*args, target=target, losses=[], return_outputs=False, **kwargs)
        finally:
            self.measure = None
        return self.measured[len(self.measured) - self.n_microbatches:] if self.measured else []


def pipeline_runner(pm: ParallelModel, n_microbatches: int, device: torch.device,
                    seq_length: int | None = None) -> PipelineRunner:
    """``pm``'s runner for steps of ``n_microbatches`` micro-batches of ``seq_length`` tokens, built on its first
    use: a schedule sizes its stages' messages by its first run's shapes, so a recipe's phase of another sequence
    length (or validation at the model's length) gets a runner of its own."""
    if pm.pipeline is None:
        pm.pipeline = {}
    key = (n_microbatches, seq_length)
    if key not in pm.pipeline:
        pm.pipeline[key] = PipelineRunner(pm, n_microbatches, device)
    return pm.pipeline[key]

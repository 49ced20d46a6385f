"""Pipeline parallelism: split a Transformer into stages by layer ranges, and build the schedule.

Stage s of S owns a contiguous range of about L / S layers; stage 0 also owns the embedding and stage S-1
the final norm and the LM head (the loss runs there). With interleaved 1F1B each pipeline rank holds
several stages, assigned round-robin (rank r: stages r, r + PP, r + 2 PP, ...), as torch's schedules
expect. A rank keeps one pruned Transformer with every module it owns under its original name (for
the optimizer and checkpoints), and each of its stages runs a pruned copy of that model: the same class,
sharing the modules, with only the stage's layers. ``PipelineRunner`` runs this rank's schedule for the step
(training/step.py) and for validation.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, ContextManager

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor, Shard

from megamlm.model.transformer import Transformer
from megamlm.objectives import Batch
from megamlm.parallel.tied_embeddings import sync_gradients
from megamlm.parallel.vocab_parallel_loss import parallel_sparse_lm_loss

if TYPE_CHECKING:  # parallelize.py imports this module
    from megamlm.parallel.parallelize import ParallelModel


def stage_layers(num_layers: int, num_stages: int, stage: int) -> list[str]:
    """Layer names of ``stage``: an even split, the first ``num_layers % num_stages`` stages taking one more
    (the last stage also runs the LM head and the loss)."""
    base, extra = divmod(num_layers, num_stages)
    start = stage * base + min(stage, extra)
    return [str(i) for i in range(start, start + base + (1 if stage < extra else 0))]


def rank_stages(pp_rank: int, pp: int, stages_per_rank: int) -> list[int]:
    return [pp_rank + k * pp for k in range(stages_per_rank)]


def prune_to_stages(model: Transformer, stages: list[int], num_stages: int) -> Transformer:
    """Drop, in place, every module that none of ``stages`` owns.

    With tied embeddings the last stage keeps the embedding module as well (its parameter is the LM head's),
    so the matrix has the same names in every layout; only the first stage runs it (see tied_embeddings).
    """
    keep = {name for s in stages for name in stage_layers(model.args.num_layers, num_stages, s)}
    for name in list(model.layers.keys()):
        if name not in keep:
            del model.layers[name]
    if num_stages - 1 not in stages:
        model.norm = None
        model.lm_head = None
    if 0 not in stages and not (model.args.tie_word_embeddings and model.lm_head is not None):
        model.embed_tokens = None
    return model


def stage_copy(model: Transformer, stage: int, num_stages: int) -> Transformer:
    """A Transformer that shares ``model``'s modules but keeps only those of ``stage``.

    The shell is built on the meta device (no memory) with one layer, then given the real modules.
    """
    with torch.device("meta"):
        part = Transformer(dataclasses.replace(model.args, num_layers=1, layer_types=None), model.backends)
    part.args = model.args
    part.layers = nn.ModuleDict({n: model.layers[n] for n in stage_layers(model.args.num_layers, num_stages, stage)})
    part.embed_tokens = model.embed_tokens if stage == 0 else None
    part.norm = model.norm if stage == num_stages - 1 else None
    part.lm_head = model.lm_head if stage == num_stages - 1 else None
    for name in ("rope_cos", "rope_sin", "rope_cos_local", "rope_sin_local"):
        part.register_buffer(name, getattr(model, name), persistent=False)
    return part


def exchange_local_tensors(part: Transformer, stage: int, num_stages: int, tp_mesh) -> None:
    """Under TP, the pipeline moves stage outputs (to the next stage, or to the loss) as local sequence shards:
    re-wrap them as DTensors on arrival and unwrap them on the way out."""
    if tp_mesh is None:
        return
    if stage > 0:
        def wrap(module, args, kwargs):
            return (DTensor.from_local(args[0], tp_mesh, [Shard(1)], run_check=False), *args[1:]), kwargs

        part.register_forward_pre_hook(wrap, with_kwargs=True)
    part.register_forward_hook(lambda module, args, out: out.to_local() if isinstance(out, DTensor) else out)


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
        loss, _ = parallel_sparse_lm_loss(output, self.pm.model.lm_head.weight, targets, self.pm.model.backends.kernels)
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
        if micro_batches[0].document_ids is not None:
            kwargs["document_ids"] = torch.cat([b.document_ids for b in micro_batches]).to(device, non_blocking=True)
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


def pipeline_runner(pm: ParallelModel, n_microbatches: int, device: torch.device) -> PipelineRunner:
    """``pm``'s runner, built on its first use."""
    if pm.pipeline is None:
        pm.pipeline = PipelineRunner(pm, n_microbatches, device)
    return pm.pipeline

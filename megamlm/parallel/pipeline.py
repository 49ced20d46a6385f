"""Pipeline parallelism: split a Transformer into stages by layer ranges, and build the schedule.

Stage s of S owns a contiguous range of about L / S layers; stage 0 also owns the embedding and stage S-1
the final norm and the LM head (the loss runs there). With interleaved 1F1B each pipeline rank holds
several stages, assigned round-robin (rank r: stages r, r + PP, r + 2 PP, ...), as torch's schedules
expect. A rank keeps one pruned Transformer with every module it owns under its original name (for
the optimizer and checkpoints) and one small stage module per stage that runs its slice.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor, Shard

from megamlm.model.transformer import Transformer


def stage_layers(num_layers: int, num_stages: int, stage: int) -> list[str]:
    """Layer names of ``stage``: an even split, the first ``num_layers % num_stages`` stages taking one more
    (the last stage also runs the LM head and the loss)."""
    base, extra = divmod(num_layers, num_stages)
    start = stage * base + min(stage, extra)
    return [str(i) for i in range(start, start + base + (1 if stage < extra else 0))]


def rank_stages(pp_rank: int, pp: int, stages_per_rank: int) -> list[int]:
    return [pp_rank + k * pp for k in range(stages_per_rank)]


def prune_to_stages(model: Transformer, stages: list[int], num_stages: int) -> Transformer:
    """Drop, in place, every module that none of ``stages`` owns."""
    keep = {name for s in stages for name in stage_layers(model.args.num_layers, num_stages, s)}
    for name in list(model.layers.keys()):
        if name not in keep:
            del model.layers[name]
    if 0 not in stages:
        model.embed_tokens = None
    if num_stages - 1 not in stages:
        model.norm = None
        model.lm_head = None
    return model


class PipelineStageModule(nn.Module):
    """Runs one stage's slice of a (pruned) Transformer.

    Activations travel between ranks as plain tensors; under tensor parallelism they are the local
    sequence shards of the residual stream and are re-wrapped as DTensors on arrival.
    """

    def __init__(self, model: Transformer, stage: int, num_stages: int, tp_mesh=None):
        super().__init__()
        self.is_first = stage == 0
        self.is_last = stage == num_stages - 1
        self.tp_mesh = tp_mesh
        self.embed_tokens = model.embed_tokens if self.is_first else None
        self.layers = nn.ModuleDict({n: model.layers[n] for n in stage_layers(model.args.num_layers, num_stages,
                                                                              stage)})
        self.norm = model.norm if self.is_last else None
        self.lm_head = model.lm_head if self.is_last else None
        self._args = model.args
        self.backends = model.backends  # the blocks carry them too; kept so the stage reads like the model
        self.register_buffer("rope_cos", model.rope_cos, persistent=False)
        self.register_buffer("rope_sin", model.rope_sin, persistent=False)

    def forward(self, x: torch.Tensor, causal: bool, document_ids: torch.Tensor | None = None) -> torch.Tensor:
        if not self.is_first and self.tp_mesh is not None:
            x = DTensor.from_local(x, self.tp_mesh, [Shard(1)], run_check=False)
        # The slice runs through Transformer.forward itself, so stages compute exactly what the full model does.
        h = Transformer.forward(self, x, causal=causal, document_ids=document_ids)
        return h.to_local() if isinstance(h, DTensor) else h

    @property
    def args(self):
        return self._args


def build_schedule(stage_modules: list[nn.Module], stage_ids: list[int], num_stages: int, schedule_name: str,
                   n_microbatches: int, loss_fn, pp_group, device: torch.device):
    """torch.distributed.pipelining stages + the 1F1B / interleaved 1F1B schedule of this rank."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

    stages = [PipelineStage(module, stage_index=s, num_stages=num_stages, device=device, group=pp_group)
              for module, s in zip(stage_modules, stage_ids)]
    # scale_grads=False: the loss is already normalised by the global batch's token count.
    if schedule_name == "1f1b":
        return Schedule1F1B(stages[0], n_microbatches=n_microbatches, loss_fn=loss_fn, scale_grads=False), stages
    return ScheduleInterleaved1F1B(stages, n_microbatches=n_microbatches, loss_fn=loss_fn,
                                   scale_grads=False), stages

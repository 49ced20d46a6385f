"""Pipeline stages: a Transformer split by layer ranges, one pruned model per rank and one copy per stage.

Stage s of S owns a contiguous range of about L / S layers; stage 0 also owns the embedding and stage S-1
the final norm and the LM head (the loss runs there). With interleaved 1F1B each pipeline rank holds
several stages, assigned round-robin (rank r: stages r, r + PP, r + 2 PP, ...), as torch's schedules
expect. A rank keeps one pruned Transformer with every module it owns under its original name (for
the optimizer and checkpoints), and each of its stages runs a pruned copy of that model: the same class,
sharing the modules, with only the stage's layers. ``parallel/parallelize.py`` applies the split;
``parallel/pipeline.py`` runs the schedule over the stages.
"""

from __future__ import annotations

import dataclasses

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
        model.head = None
        model.lm_head = None
    if 0 not in stages:
        model.embed_norm = None
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
    part.embed_norm = model.embed_norm if stage == 0 else None
    part.norm = model.norm if stage == num_stages - 1 else None
    part.head = model.head if stage == num_stages - 1 else None
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

"""Both sides of test_decoder_family_layouts.py: MLM steps of an imported decoder in one process (the reference)
and in a parallel layout, from the same imported checkpoint and the same batches.

(Kept out of the test module so spawned processes can import it by name.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from helpers import layout_dims

from megamlm.objectives import MaskingSpec, ObjectiveSchedule

STEPS = 3
RESUME_AT = 1
SEQ = 32
LR, CLIP = 1e-3, 1.0
LAYOUTS = {"tp2": dict(tp=2), "pp2": dict(pp=2), "fsdp_dp2": dict()}
FOUR_RANK_LAYOUTS = {"tp2_pp2": dict(tp=2, pp=2), "pp2_fsdp2": dict(pp=2)}


def schedule(record: dict, first_word: int, words: int) -> ObjectiveSchedule:
    tok = record["tokenizer"]
    specials = tuple(sorted(i for i in (tok["bos_id"], tok["eos_id"], tok["pad_id"], tok["mask_id"]) if i is not None))
    masking = MaskingSpec(mask_ratio=0.4, replace_prob=0.8, random_prob=0.1, keep_prob=0.1, mask_id=tok["mask_id"],
                          special_ids=tuple(sorted(set(specials) | set(range(first_word)))),
                          random_vocab_size=first_word + words)
    return ObjectiveSchedule("mlm", None, STEPS, masking, seed=5)


def batches(sched: ObjectiveSchedule, step: int, ids_per_micro: list[list[int]], first_word: int, words: int):
    offset = (step - 1) * 8
    out = []
    for ids in ids_per_micro:
        tokens = np.stack([np.random.default_rng(1000 + offset + k).integers(first_word, first_word + words, SEQ)
                           for k in ids]).astype(np.int64)
        out.append(sched.make_batch(step, tokens, [offset + k for k in ids]))
    return out


def _record(ckpt: str) -> tuple:
    from megamlm.hf.megamlm_checkpoint import read_record

    record = read_record(ckpt)
    return record, record.model_args


def global_ids(world: int) -> list[list[int]]:
    """A step's global batch: one micro-batch of one sample per rank of the world (2 or 4), so that every
    layout's data-parallel ranks get whole micro-batches and a pipeline of 2 stages has 2 to schedule."""
    return [[k] for k in range(world)]


def reference(ckpt: str, first_word: int, words: int, resume_dir: str, world: int) -> dict:
    """Single process: the losses and pre-clip norms of STEPS MLM steps, and a checkpoint after RESUME_AT."""
    from megamlm.checkpoint import load_model_weights, save_checkpoint
    from megamlm.model.transformer import Transformer
    from megamlm.parallel.dims import ParallelDims
    from megamlm.parallel.parallelize import parallelize
    from megamlm.training.optim import build_optimizer
    from megamlm.training.step import StepSetup, train_step

    record, args = _record(ckpt)
    cpu = torch.device("cpu")
    model = Transformer(args)
    load_model_weights(ckpt, model)
    pm = parallelize(model, ParallelDims(world_size=1), None, cpu)
    optimizer = build_optimizer(model, LR, 0.1, (0.9, 0.95), 1e-5)
    sched = schedule(record.config, first_word, words)
    setup = StepSetup.of(pm, cpu, CLIP)
    losses, norms = [], []
    for step in range(1, STEPS + 1):
        out = train_step(setup, optimizer, batches(sched, step, global_ids(world), first_word, words), LR)
        losses.append(out.loss)
        norms.append(out.grad_norm)
        if step == RESUME_AT:
            save_checkpoint(resume_dir, step, model, optimizer, {"consumed_samples": world * step}, record.config)
    weights = {name: t.detach().clone() for name, t in model.state_dict().items()}
    return {"losses": losses, "norms": norms, "weights": weights}  # the caller keeps the weights


def _check(name: str, got: list[float], want: list[float], rel: float, first: int = 1) -> None:
    for step, (g, w) in enumerate(zip(got, want), start=first):
        if abs(g - w) > rel * abs(w):
            raise AssertionError(f"{name}: step {step}: {g} != {w} (rel {rel})")


def check_family(rank: int, world: int, layouts: dict, family: str, ckpt: str, first_word: int, words: int,
                 expected: dict, resume_dir: str, out_dir: str) -> None:
    """Every layout trains STEPS steps from the import with the reference's losses and norms and saves its
    weights; a pipeline layout also resumes the single-process checkpoint of step RESUME_AT (optimizer state
    included)."""
    from megamlm.checkpoint import load_model_weights, save_checkpoint
    from megamlm.checkpoint.checkpointer import load_checkpoint
    from megamlm.model.transformer import Transformer
    from megamlm.parallel.parallelize import parallelize
    from megamlm.training.optim import build_optimizer
    from megamlm.training.step import StepSetup, train_step

    record, args = _record(ckpt)
    sched = schedule(record.config, first_word, words)
    cpu = torch.device("cpu")
    for layout_name, layout in layouts.items():
        dims = layout_dims(world, layout, args, micro_batch_size=1, global_batch_size=world, seq_length=SEQ)
        mesh = dims.build_mesh("cpu")

        def build(dims=dims, mesh=mesh):
            model = Transformer(args)
            load_model_weights(ckpt, model)
            pm = parallelize(model, dims, mesh, cpu)
            return pm, build_optimizer(pm.model, LR, 0.1, (0.9, 0.95), 1e-5)

        per_rank = world // dims.dp
        pm, optimizer = build()
        mine = global_ids(world)[pm.dp_rank * per_rank:(pm.dp_rank + 1) * per_rank]
        setup = StepSetup.of(pm, cpu, CLIP)
        losses, norms = [], []
        for step in range(1, STEPS + 1):
            out = train_step(setup, optimizer, batches(sched, step, mine, first_word, words), LR)
            losses.append(out.loss)
            norms.append(out.grad_norm)
        _check(f"{family} {layout_name} loss", losses, expected["losses"], 1e-5)
        # Pre-clip norms drift apart over AdamW steps (sharp attention amplifies summation-order noise): the first
        # two. Step 1's is the layout's own sum (1e-4); step 2's follows AdamW's first update, m / sqrt(v) = sign(g):
        # a gradient entry near zero flips with the summation order, so on some processors step 2's norm differs by
        # more (Mistral at TP=2: 1.09e-4 on this project's CI machine, 2026-12-03), within 1e-3.
        _check(f"{family} {layout_name} grad norm", norms[:1], expected["norms"][:1], 1e-4)
        _check(f"{family} {layout_name} grad norm", norms[1:2], expected["norms"][1:2], 1e-3, first=2)
        save_checkpoint(Path(out_dir) / f"{family}-{layout_name}", STEPS, pm.model, optimizer,
                        {"consumed_samples": world * STEPS}, record.config)

        if dims.pp > 1:  # the single-process checkpoint, resharded onto the pipeline, continues exactly
            pm, optimizer = build()
            load_checkpoint(Path(resume_dir) / f"iter_{RESUME_AT:07d}", pm.model, optimizer)
            setup = StepSetup.of(pm, cpu, CLIP)
            resumed = [train_step(setup, optimizer, batches(sched, step, mine, first_word, words), LR).loss
                       for step in range(RESUME_AT + 1, STEPS + 1)]
            _check(f"{family} {layout_name} resumed loss", resumed, expected["losses"][RESUME_AT:], 1e-5)


def check_families(rank: int, world: int, layouts: dict, cases: list[tuple]) -> None:
    """All families in one spawned world (process start-up dominates on small CPUs)."""
    for case in cases:
        check_family(rank, world, layouts, *case)

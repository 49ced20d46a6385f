"""Worker side of test_layouts.py: one rank's comparison of a layout with the single-process run.

(Kept out of the test module so spawned processes can import it by name.)
"""

from __future__ import annotations

import functools

import pytest
import torch
from harness import SEED, TINY, full_grads, micro_batches, schedule
from helpers import layout_dims

GLOBAL_IDS = [[0, 1], [2, 3], [4, 5], [6, 7]]  # 4 micro-batches of 2 samples: one global batch of 8
LR, CLIP = 1e-3, 1.0


@functools.lru_cache(maxsize=None)
def reference(objective: str):
    """Plain PyTorch on one model: step-1 loss and gradients; then megamlm's one train_step on the trivial
    single-process layout: the pre-clip norm and the step-2 loss after one update."""
    from megamlm.model.transformer import Transformer
    from megamlm.objectives import IGNORE_INDEX, sparse_lm_loss
    from megamlm.parallel.dims import ParallelDims
    from megamlm.parallel.parallelize import parallelize
    from megamlm.training.optim import build_optimizer
    from megamlm.training.step import StepSetup, train_step

    sched = schedule(objective)
    torch.manual_seed(SEED)
    model = Transformer(TINY)
    batches = micro_batches(sched, 1, GLOBAL_IDS)
    total = sum(int((b.targets != IGNORE_INDEX).sum()) for b in batches)
    for b in batches:
        loss, _ = sparse_lm_loss(model(b.input_ids, causal=b.causal), model.lm_head.weight, b.targets,
                                 model.backends.kernels)
        (loss / total).backward()
    grads = full_grads(model.named_parameters())
    model.zero_grad(set_to_none=True)
    single = parallelize(model, ParallelDims(world_size=1), None, torch.device("cpu"))
    assert single.parts == [model] and single.mesh is None
    optimizer = build_optimizer(model, LR, 0.1, (0.9, 0.95), 1e-8)
    setup = StepSetup.of(single, torch.device("cpu"), CLIP)
    first = train_step(setup, optimizer, batches, LR)
    second = train_step(setup, optimizer, micro_batches(sched, 2, [[k + 8 for k in ids] for ids in GLOBAL_IDS]), LR)
    return first.loss, grads, second.loss, first.grad_norm


def check_layout(rank: int, world: int, layout: dict, recompute: bool = False, compile: str = "none",
                 objectives: tuple[str, ...] = ("mlm", "clm")) -> None:
    from megamlm.model.transformer import Transformer
    from megamlm.parallel.parallelize import parallelize
    from megamlm.training.optim import build_optimizer
    from megamlm.training.step import StepSetup, forward_backward, train_step

    dims = layout_dims(world, layout, TINY, micro_batch_size=2, global_batch_size=8)
    mesh = dims.build_mesh("cpu")
    cpu = torch.device("cpu")
    for objective in objectives:
        ref_loss, ref_grads, ref_second, ref_norm = reference(objective)
        sched = schedule(objective)
        torch.manual_seed(SEED)
        pm = parallelize(Transformer(TINY), dims, mesh, cpu, recompute=recompute, compile=compile)
        assert pm.compile_mode == ("blocks" if compile == "model" and (dims.tp > 1 or dims.pp > 1) else compile)
        per_rank = len(GLOBAL_IDS) // dims.dp
        mine = GLOBAL_IDS[pm.dp_rank * per_rank:(pm.dp_rank + 1) * per_rank]

        setup = StepSetup.of(pm, cpu, CLIP)
        loss, _ = forward_backward(setup, micro_batches(sched, 1, mine))
        assert float(loss) == pytest.approx(float(ref_loss), rel=1e-5), (objective, layout)
        grads = full_grads(pm.model.named_parameters())
        expected = set(ref_grads) if dims.pp == 1 else {n for n in ref_grads if n in grads}
        assert set(grads) == expected and grads, (objective, layout)
        for name, grad in grads.items():
            torch.testing.assert_close(grad, ref_grads[name], rtol=1e-4, atol=1e-6, msg=f"{objective} {name}")
        if dims.pp > 1:  # every parameter of the model lives on exactly one pipeline rank
            owned = [None] * dims.pp
            torch.distributed.all_gather_object(owned, sorted(grads), group=mesh["pp"].get_group())
            assert sorted(n for names in owned for n in names) == sorted(ref_grads)

        # The same first step again, now through the one train_step of every layout.
        optimizer = build_optimizer(pm.model, LR, 0.1, (0.9, 0.95), 1e-8)
        optimizer.zero_grad(set_to_none=True)
        first = train_step(setup, optimizer, micro_batches(sched, 1, mine), LR)
        assert first.applied and float(first.loss) == pytest.approx(float(ref_loss), rel=1e-5), (objective, layout)
        assert float(first.grad_norm) == pytest.approx(float(ref_norm), rel=1e-4), (first.grad_norm, ref_norm)
        second_ids = [[k + 8 for k in ids] for ids in mine]
        second = train_step(setup, optimizer, micro_batches(sched, 2, second_ids), LR)
        assert float(second.loss) == pytest.approx(float(ref_second), rel=1e-4), (objective, layout)
        if compile != "none":  # the compiler did capture the model
            assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0


def check_mntp_layouts(rank: int, world: int, layouts: list[tuple]) -> None:
    """MNTP (bidirectional, MLM masks, targets one position early) in the layouts MLM is checked in."""
    for name, layout in layouts:
        try:
            check_layout(rank, world, layout, objectives=("mntp",))
        except AssertionError as err:
            raise AssertionError(f"layout {name} (mntp): {err}") from err


def check_layouts(rank: int, world: int, layouts: list[tuple]) -> None:
    """Several layouts (name, layout, recompute[, compile mode[, objectives]]) in one spawned world (process start-up
    dominates on small CPUs). Compiled layouts use the ``aot_eager`` backend: the same graph capture and autograd as
    inductor, without generating kernels, which takes minutes on a small CPU."""
    import megamlm.parallel.compile

    megamlm.parallel.compile.COMPILER_BACKEND = "aot_eager"
    for name, layout, recompute, *compile in layouts:
        try:
            check_layout(rank, world, layout, recompute, *compile)
        except AssertionError as err:
            raise AssertionError(f"layout {name}: {err}") from err

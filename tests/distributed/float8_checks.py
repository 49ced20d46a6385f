"""Worker side of test_float8_layouts.py: --fp8 under FSDP2 against --fp8 in one process.

(Kept out of the test module so spawned processes can import it by name.)
"""

from __future__ import annotations

import pytest
import torch
from harness import SEED, TINY, micro_batches, schedule
from helpers import layout_dims

GLOBAL_IDS = [[0, 1], [2, 3], [4, 5], [6, 7]]
LR, CLIP = 1e-3, 1.0
CPU = torch.device("cpu")


def _steps(pm, ids):
    from megamlm.training.optim import build_optimizer
    from megamlm.training.step import StepSetup, train_step

    sched = schedule("mlm")
    optimizer = build_optimizer(pm.model, LR, 0.1, (0.9, 0.95), 1e-8)
    setup = StepSetup.of(pm, CPU, CLIP)
    first = train_step(setup, optimizer, micro_batches(sched, 1, ids), LR)
    second = train_step(setup, optimizer, micro_batches(sched, 2, [[k + 8 for k in m] for m in ids]), LR)
    return first, second


def check_fp8_fsdp(rank: int, world: int) -> None:
    from megamlm.model.transformer import Transformer
    from megamlm.parallel.dims import ParallelDims
    from megamlm.parallel.parallelize import parallelize

    torch.manual_seed(SEED)
    single = parallelize(Transformer(TINY), ParallelDims(world_size=1), None, CPU, fp8=True)
    ref_first, ref_second = _steps(single, GLOBAL_IDS)

    dims = layout_dims(world, {}, TINY, micro_batch_size=2, global_batch_size=8)
    torch.manual_seed(SEED)
    pm = parallelize(Transformer(TINY), dims, dims.build_mesh("cpu"), CPU, fp8=True)
    assert len(pm.float8_linears) == 7 * TINY.num_layers
    per_rank = len(GLOBAL_IDS) // dims.dp
    first, second = _steps(pm, GLOBAL_IDS[pm.dp_rank * per_rank:(pm.dp_rank + 1) * per_rank])
    assert float(first.loss) == pytest.approx(float(ref_first.loss), rel=1e-5)
    assert float(first.grad_norm) == pytest.approx(float(ref_first.grad_norm), rel=1e-4)
    assert float(second.loss) == pytest.approx(float(ref_second.loss), rel=1e-4)

"""Rank functions of test_rank_parameters.py (spawned processes import them by module name)."""

from __future__ import annotations

import torch


def check_rank_parameters(rank: int, world: int, out_dir: str) -> None:
    from megamlm.config import parse_args
    from megamlm.model.transformer import Transformer, count_parameters
    from megamlm.parallel.dry_run import dry_run_model_args, rank_estimates
    from megamlm.parallel.parallelize import parallelize
    from megamlm.training.startup import dims_from_config
    from megamlm.training.trainer import rank_parameters_note

    cfg = parse_args(["--tp", "2", "--micro-batch-size", "2", "--global-batch-size", "4", "--seq-length", "32"])
    dims = dims_from_config(cfg)
    args = dry_run_model_args(cfg)
    pm = parallelize(Transformer(args), dims, dims.build_mesh("cpu"), torch.device("cpu"))
    held = count_parameters(pm.model, local=True)
    whole = count_parameters(pm.model)
    assert whole == count_parameters(Transformer(args))
    assert held == rank_estimates(cfg, dims, args)[0]["parameters"]  # the dry run's per-rank count
    assert held < 0.9 * whole
    note = rank_parameters_note(pm.model, world)
    held_body = count_parameters(pm.model, include_lm_head=False, local=True)
    assert note == (f"{held_body / 1e6:.1f}M parameters on this rank "
                    f"({count_parameters(pm.model, include_lm_head=False) / 1e6:.1f}M unsharded)")

"""Before the first step a run logs its estimated memory per device (warning when it does not fit) and step 1."""

import torch

from megamlm.config import parse_args
from megamlm.parallel import dry_run
from megamlm.parallel.dry_run import GIB, dry_run_model_args, memory_note, rank_estimates
from megamlm.training.startup import dims_from_config
from megamlm.training.trainer import first_step_note


def planned(*argv):
    cfg = parse_args([*argv, "--dry-run", "--world-size", "8"])
    dims = dims_from_config(cfg)
    return cfg, dims, dry_run_model_args(cfg)


def test_the_estimate_is_the_dry_runs_worst_pipeline_rank(monkeypatch):
    cfg, dims, args = planned("--model", "610m", "--pp", "4", "--tp", "2")
    worst = max(row["total_gib"] for row in rank_estimates(cfg, dims, args))
    monkeypatch.setattr(dry_run, "device_memory_bytes", lambda device: 1000 * GIB)
    note = memory_note(cfg, dims, args, torch.device("cpu"))
    assert note.startswith(f"estimated memory per device: {worst:.2f} GiB (pipeline rank ") and "warning" not in note


def test_a_layout_that_does_not_fit_the_device_is_warned_with_the_fixes(monkeypatch):
    cfg, dims, args = planned("--model", "1b")
    monkeypatch.setattr(dry_run, "device_memory_bytes", lambda device: 2 * GIB)
    note = memory_note(cfg, dims, args, torch.device("cpu"))
    assert note.startswith("warning: estimated memory per device: ") and "exceeds the 2.00 GiB of this rank's share " \
                                                                         "of the host memory" in note
    assert "lower --micro-batch-size, add --recompute" in note


def test_host_memory_is_shared_by_the_ranks_of_a_node(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    whole = dry_run.device_memory_bytes(torch.device("cpu"))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert dry_run.device_memory_bytes(torch.device("cpu")) == whole // 4


def test_the_first_step_note_says_when_compilation_runs():
    assert first_step_note("none", 1, 300) == ("step 1/300 starting (the first step also warms up the kernels "
                                               "and allocator)")
    assert "torch.compile compiles every block during this first step" in first_step_note("blocks", 11, 300)
    assert "torch.compile compiles the model during this first step" in first_step_note("model", 11, 300)

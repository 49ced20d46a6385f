"""Every invalid layout fails in its own one-line error before any process group exists."""

import pytest
import torch.distributed as dist

from megamlm.config import ConfigError, parse_args
from megamlm.errors import LayoutError
from megamlm.training.startup import dims_from_config

BASE = ["--model", "tiny", "--micro-batch-size", "2", "--global-batch-size", "16", "--dry-run"]


def dims_for(*flags, world=8):
    return dims_from_config(parse_args(BASE + ["--world-size", str(world), *flags]))


def test_data_parallel_takes_the_rest_of_the_world():
    d = dims_for("--tp", "2", "--pp", "2")
    assert (d.tp, d.pp, d.dp_replicate, d.dp_shard, d.dp) == (2, 2, 1, 2, 2)
    d = dims_for("--dp-replicate", "2")
    assert (d.dp_replicate, d.dp_shard) == (2, 4)
    d = dims_for("--data-parallel-impl", "ddp", "--pp", "2")
    assert (d.dp_replicate, d.dp_shard) == (4, 1)
    d = dims_for("--pp", "2", "--pipeline-schedule", "interleaved_1f1b", "--num-layers-per-virtual-stage", "1")
    assert (d.stages_per_rank, d.num_stages) == (2, 4)


def test_pipeline_stages_split_uneven_layer_counts_evenly():
    from megamlm.parallel.pipeline_stages import stage_layers

    stages = [stage_layers(26, 4, s) for s in range(4)]  # 610m / 1b: 26 layers on PP=4
    assert [len(s) for s in stages] == [7, 7, 6, 6]
    assert [int(n) for s in stages for n in s] == list(range(26))
    assert [stage_layers(4, 2, s) for s in range(2)] == [["0", "1"], ["2", "3"]]


def test_long_flag_names_match_megatron():
    d = dims_for("--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2")
    assert (d.tp, d.pp, d.dp) == (4, 2, 1)


@pytest.mark.parametrize("flags, world, message", [
    (["--tp", "3"], 8, "world size 8 is not divisible by TP 3"),
    (["--tp", "3"], 3, "--num-attention-heads 8 is not divisible"),
    (["--tp", "8"], 8, "--num-query-groups 4 is not divisible"),
    (["--tp", "2", "--vocab-size", "8191"], 8, "pad it to a multiple of 256"),
    (["--tp", "2", "--seq-length", "63"], 8, "--seq-length 63 is not divisible"),
    (["--pp", "8"], 8, "--num-layers 4 is fewer than --pipeline-model-parallel-size 8"),
    (["--pp", "2", "--pipeline-schedule", "interleaved_1f1b"], 8, "needs --num-layers-per-virtual-stage"),
    (["--pp", "2", "--pipeline-schedule", "interleaved_1f1b", "--num-layers-per-virtual-stage", "2"], 8,
     "at least 2 stages per rank"),
    (["--pp", "2", "--num-layers-per-virtual-stage", "1"], 8, "is for --pipeline-schedule interleaved_1f1b"),
    (["--num-layers-per-virtual-stage", "1"], 8, "need --pipeline-model-parallel-size > 1"),
    (["--pipeline-schedule", "zero_bubble", "--pp", "2"], 8, "argument --pipeline-schedule: invalid choice"),
    (["--data-parallel-impl", "zero3"], 8, "argument --data-parallel-impl: invalid choice"),
    (["--data-parallel-impl", "ddp", "--tp", "2"], 8, "DDP does not compose with tensor parallelism"),
    (["--data-parallel-impl", "ddp", "--dp-shard", "2"], 8, "--dp-shard sets FSDP's sharding degree"),
    (["--dp-replicate", "3"], 8, "--dp-replicate 3 does not divide the data-parallel size 8"),
    (["--dp-replicate", "2", "--dp-shard", "2"], 8, "make the product match"),
    (["--dp-shard", "0"], 8, "--dp-shard must be >= 1"),
    (["--tp", "0"], 8, "--tensor-model-parallel-size must be >= 1"),
    ([], 3, "not divisible by --micro-batch-size 2 x data-parallel size 3"),
    (["--pp", "4", "--global-batch-size", "4"], 4, "needs at least PP=4 micro-batches"),
    (["--pp", "2", "--pipeline-schedule", "interleaved_1f1b", "--num-layers-per-virtual-stage", "1",
      "--global-batch-size", "6"], 2, "rounds of PP=2"),
])
def test_invalid_layouts_fail_in_validation(flags, world, message):
    with pytest.raises((ConfigError, LayoutError),
                       match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        dims_for(*flags, world=world)
    assert not (dist.is_available() and dist.is_initialized())


def test_world_size_flag_is_only_for_dry_runs():
    with pytest.raises(ConfigError, match="only plans a layout with --dry-run"):
        parse_args(["--world-size", "8"])


def test_world_size_comes_from_the_launcher(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "0")
    cfg = parse_args(["--model", "tiny", "--micro-batch-size", "2", "--global-batch-size", "8", "--tp", "2"])
    assert dims_from_config(cfg).dp == 2
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(LayoutError, match="world size 3 is not divisible by TP 2"):
        dims_from_config(parse_args(["--model", "tiny", "--tp", "2"]))

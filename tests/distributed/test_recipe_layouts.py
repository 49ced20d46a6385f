"""Issue 44: a recipe in phases under the parallel layouts against one process (gloo): TP=2, PP=2 and FSDP2 at DP=2
each consume the single process's samples and match its losses across a phase boundary that changes the sequence
length (16 -> 32), the RoPE base (x8, every rank's and stage's rotary tables rebuilt), the data (one corpus -> a
blend of two) and the mask ratio."""

from __future__ import annotations

import pytest
import yaml
from harness import spawn
from helpers import SPLITTABLE_SHAPE, write_dataset
from trainer_checks import pretrain_on_rank, read_ranks, run_pretrain

from megamlm.data import IndexedDataset, prepare_embedded_corpus

pytestmark = pytest.mark.distributed

FLAGS = [*SPLITTABLE_SHAPE, "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "4",
         "--lr-warmup-iters", "1", "--log-interval", "1"]


@pytest.fixture(scope="module")
def recipe(cache, tmp_path_factory):
    folder = tmp_path_factory.mktemp("recipe")
    prefix, _ = prepare_embedded_corpus(cache)
    source = IndexedDataset(prefix)
    half = len(source) // 2
    a = write_dataset(folder / "a", (source[i] for i in range(half)), source.dtype)
    b = write_dataset(folder / "b", (source[i] for i in range(half, len(source))), source.dtype)
    phases = [{"steps": 2, "seq_length": 16, "data_path": [a], "mask_ratio": 0.3},
              {"seq_length": 32, "rope_theta": 80000.0, "data_path": ["0.5", a, "0.5", b], "mask_ratio": 0.15,
               "lr_decay": True, "lr_wsd_decay_style": "minus_sqrt"}]
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump({"phases": phases}))
    argv = [*FLAGS, "--config", str(path)]
    return argv, run_pretrain(argv)


@pytest.mark.parametrize("layout", [["--tp", "2"], ["--pp", "2"], ["--dp-shard", "2"]], ids=["tp2", "pp2", "fsdp2"])
def test_a_layout_matches_one_process_across_a_length_rope_and_blend_change(recipe, layout, tmp_path):
    argv, single = recipe
    spawn(pretrain_on_rank, 2, [*argv, *layout], str(tmp_path))
    ranks = read_ranks(tmp_path, 2)
    for step in range(1, 5):
        if layout[0] == "--dp-shard":  # each rank half of every global batch
            assert ranks[0]["sample_ids"][step] + ranks[1]["sample_ids"][step] == single["sample_ids"][step]
        for r in ranks:
            if step in r["losses"]:
                assert r["losses"][step] == pytest.approx(single["losses"][step], rel=1e-4), (layout, step)

"""The recipes shipped in examples/recipes/ (issue 44 item 8): ModernBERT's, Ettin's and mmBERT's at their sizes for
GPUs plan on eight ranks with the phases, token counts, RoPE bases, masks and learning rates their comments state;
their tiny versions (and the three-phase one) run on a CPU as written, scaled by the run's length alone (their
phases' lengths are fractions of the run), each phase training with its own sequence length, masking and learning
rate; in full (slow) the loss falls and every phase boundary is checkpointed."""

import math
from pathlib import Path

import pytest
from step_recorder import run_as_written

from megamlm.cli import main
from megamlm.config import parse_args
from megamlm.config.phases import recipe_of
from megamlm.training.lineage import Segment

pytestmark = pytest.mark.usefixtures("one_thread")

RECIPES = Path(__file__).resolve().parents[2] / "examples" / "recipes"
TINY = ["tiny_three_phase", "tiny_modernbert", "tiny_ettin", "tiny_mmbert"]
NARROW = ["--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads", "2", "--num-query-groups", "2"]
"""The tiny recipes' 4 layers (their layer types) at a width that runs in a second a step."""

# (tokens, sequence length, RoPE bases, mask ratio, learning rate at the phase's start, where it ends) per phase,
# as each file's comment states them (theirs, or megamlm's choice where stated).
GPU = {
    "modernbert_base": [(1.7e12, 1024, (1e4, 1e4), 0.3, 8e-4, None), (250e9, 8192, (1.6e5, 1e4), 0.3, 3e-4, None),
                        (50e9, 8192, (1.6e5, 1e4), 0.3, 3e-4, 0.0)],
    "ettin_base": [(1.7e12, 1024, (1e4, 1e4), 0.3, 8e-4, None), (250e9, 8192, (1.6e5, 1e4), 0.3, 8e-4, 4e-4),
                   (50e9, 8192, (1.6e5, 1.6e5), 0.15, 4e-4, 1.6e-5)],
    "mmbert_base": [(2.0e12, 1024, (1e4, 1e4), 0.25, 8e-4, None), (600e9, 8192, (1.6e5, 1.6e5), 0.15, 8e-4, None),
                    (100e9, 8192, (1.6e5, 1.6e5), 0.05, 8e-4, 1.6e-5)],
}

PARAMETERS = {"modernbert_base": "149.0M", "ettin_base": "149.0M", "mmbert_base": "306.9M"}


@pytest.mark.parametrize("name", sorted(GPU))
def test_a_gpu_recipe_plans_on_eight_ranks_with_the_phases_it_states(name, capsys, tmp_path):
    pytest.importorskip("optimi", reason='their StableAdamW: pip install "megamlm[optimi]" (in [test])')
    config = str(RECIPES / f"{name}.yaml")
    assert main(["--config", config, "--dry-run", "--world-size", "8"]) == 0, capsys.readouterr().err
    assert f"({PARAMETERS[name]} parameters, 22 layers" in capsys.readouterr().out  # their sizes: 149M, 307M
    cfg = parse_args(["--config", config, "--save", str(tmp_path / "ckpt")])
    assert (cfg.model.num_layers, cfg.model.hidden_size, cfg.model.ffn_hidden_size, cfg.model.mlp_activation,
            cfg.model.layer_types.count("full")) == (22, 768, 1152, "geglu", 8)  # every third layer global
    recipe = recipe_of(cfg)
    schedule = Segment.of_config(cfg).lr_schedule_object()
    assert len(recipe.phases) == len(GPU[name])
    for phase, (tokens, length, bases, mask, lr, end) in zip(recipe.phases, GPU[name]):
        tokens_per_step = max(recipe.batch_size_at(s) for s in (phase.first_step, phase.last_step)) * length
        assert abs(phase.tokens - tokens) < tokens_per_step, (phase.index, phase.tokens)  # within one step
        assert (phase.seq_length, phase.rope_bases, phase.mask_ratio) == (length, bases, mask)
        first = schedule.lr_at(max(phase.first_step, cfg.training.lr_warmup_iters + 1))
        assert math.isclose(first, lr, rel_tol=0.02), (phase.index, first, lr)  # a decay's first step
        assert math.isclose(schedule.lr_at(phase.last_step), lr if end is None else end, abs_tol=1e-12)


@pytest.mark.parametrize("name", TINY)
def test_a_tiny_recipe_runs_as_written_scaled_by_its_length(name, austen_books, tmp_path, monkeypatch):
    """Eight steps of the recipe (its fractions: phases of 4, 2 and 2 steps) at a narrow width: each phase's samples
    at its own length, the learning rate of every step the schedule's, a checkpoint at every boundary."""
    monkeypatch.chdir(austen_books)  # the recipes name their data relative to where pretrain.py runs
    config = ["--config", RECIPES / f"{name}.yaml", *NARROW, "--train-iters", "8"]
    run = run_as_written(*config, "--save", tmp_path / "ckpt", "--log-interval", "4")
    cfg = parse_args([str(a) for a in config])
    recipe = recipe_of(cfg)
    assert [(p.first_step, p.last_step) for p in recipe.phases] == [(1, 4), (5, 6), (7, 8)]
    assert sorted(run.losses) == list(range(1, 9)) and all(math.isfinite(v) for v in run.losses.values())
    table = Segment.of_config(cfg).lr_schedule_object().table(8)
    assert [run.lrs[s] for s in range(1, 9)] == list(table)
    assert [p.seq_length for p in recipe.phases] == [64, 256, 256]
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("iter_*")) == ["iter_0000004", "iter_0000006",
                                                                         "iter_0000008"]


def test_ettins_middle_phase_decays_to_the_rate_the_last_starts_from():
    """tiny_ettin.yaml's LR shape, step by step: held, then 1-sqrt to half, then 1-sqrt from half to --min-lr."""
    cfg = parse_args(["--config", str(RECIPES / "tiny_ettin.yaml")])
    table = Segment.of_config(cfg).lr_schedule_object().table(40)
    assert table[19] == 0.003 and table[29] == 0.0015 and table[39] == 6e-5
    assert all(a > b for a, b in zip(table[19:39], table[20:40]))  # decaying from step 21 to the end


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY[1:])
def test_a_tiny_recipe_in_full(name, austen_books, tmp_path, monkeypatch):
    """Each at the tiny preset's own width, 40 steps (21-30 s each at a load of 4.5; tiny_three_phase's full run:
    tests/e2e/test_recipe_phases.py):
    every boundary checkpointed, and the loss falls."""
    monkeypatch.chdir(austen_books)
    run = run_as_written("--config", RECIPES / f"{name}.yaml", "--save", tmp_path / "ckpt")
    assert sorted(run.losses) == list(range(1, 41))
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("iter_*")) == ["iter_0000020", "iter_0000030",
                                                                         "iter_0000040"]
    assert run.losses[40] < run.losses[1] - 1.0

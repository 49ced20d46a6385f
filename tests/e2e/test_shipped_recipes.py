"""The recipes shipped in examples/recipes/ (issues 44 item 8 and 54 item 6): ModernBERT's, Ettin's and mmBERT's at
their sizes for GPUs plan on eight ranks with ModernBERT's block, as many parameters as transformers'
ModernBertForMaskedLM of their configs, and every value their comments state (phases, token or step counts, RoPE
bases, masks and their split, batches and ramps, learning rates, optimizer, clipping, sample mode); their tiny
versions (and the three-phase one) run on a CPU as written, scaled by the run's length alone (their phases' lengths
are fractions of the run), each phase training with its own sequence length, masking and learning rate; in full
(slow) the loss falls and every phase boundary is checkpointed."""

import math
import re
from pathlib import Path

import pytest
import torch
from helpers import write_dataset
from step_recorder import run_as_written
from transformers import ModernBertConfig, ModernBertForMaskedLM

from megamlm.cli import main
from megamlm.config import parse_args
from megamlm.config.phases import recipe_of
from megamlm.config.rampup import BatchSizes
from megamlm.model.transformer import Transformer
from megamlm.parallel.dry_run import dry_run_model_args
from megamlm.training.lineage import Segment

pytestmark = pytest.mark.usefixtures("one_thread")

RECIPES = Path(__file__).resolve().parents[2] / "examples" / "recipes"
TINY = ["tiny_three_phase", "tiny_modernbert", "tiny_ettin", "tiny_mmbert"]
NARROW = ["--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads", "2", "--num-query-groups", "2"]
"""The tiny recipes' 4 layers (their layer types) at a width that runs in a second a step."""

TINY_OF = {f"tiny_{name}": f"{name}_base" for name in ("modernbert", "ettin", "mmbert")}
THEIR_BLOCK = dict(num_hidden_layers=22, hidden_size=768, intermediate_size=1152, num_attention_heads=12,
                   hidden_activation="gelu", norm_eps=1e-5, norm_bias=False, attention_bias=False, mlp_bias=False,
                   classifier_bias=False, decoder_bias=True, attention_dropout=0.1, mlp_dropout=0.0,
                   embedding_dropout=0.0, initializer_range=0.02, initializer_cutoff_factor=2.0,
                   global_attn_every_n_layers=3, local_attention=128, tie_word_embeddings=True)
"""Their model_config (every base yaml of the three: num_hidden_layers, hidden_size, intermediate_size, heads, gelu,
norm_kwargs eps 1e-5 / bias false, qkv/out/mlp biases false, head_pred_bias false, decoder_bias (FlexBERT's
default, true), attn_out_dropout_prob 0.1, init_std 0.02 / init_cutoff_factor 2.0, global_attn_every_n_layers 3,
sliding_window 128) by the names transformers' ModernBertConfig gives them."""
BLOCK = dict(mlp_activation="geglu_erf", norm_type="layernorm", norm_bias=False, norm_epsilon=1e-5,
             attention_bias=False, attention_out_bias=False, mlp_bias=False,
             embedding_norm=True, prediction_head=True, classifier_bias=False, decoder_bias=True,
             attention_dropout=0.1, mlp_dropout=0.0, embedding_dropout=0.0, init_method="modernbert",
             init_method_std=0.02, initializer_cutoff_factor=2.0, tie_word_embeddings=True)
"""megamlm's flags for their block, as the recipes set them."""

# What each file's comment states, theirs or megamlm's choice where stated: vocabulary, sample mode, optimizer
# (betas, eps, weight decay in AdamW's convention = their decoupled value / their peak LR), the batch ramp (START,
# INCREMENT, the tokens it spans) or None, the warmup's steps and the tokens it reaches, validation's mask ratio,
# and per phase (length: tokens, or steps where the comment gives steps; sequence length; RoPE bases; mask ratio;
# global batch; the learning rate at the phase's start; where it ends, None: held).
GPU = {
    "modernbert_base": dict(
        vocab=50368, mode="packed_documents", micro=4, betas=(0.9, 0.98), eps=1e-6, decay=(1e-5, 8e-4),
        ramp=(96 * 8, 96 * 8, 50e9), warmup=(3815, 3e9), eval_mask=0.15, phases=[
            (("tokens", 1719e9), 1024, (1e4, 1e4), 0.3, 4608, 8e-4, None),
            (("tokens", 250e9), 8192, (1.6e5, 1e4), 0.3, 576, 3e-4, None),
            (("tokens", 50e9), 8192, (1.6e5, 1e4), 0.3, 576, 3e-4, 0.001 * 3e-4)]),
    "ettin_base": dict(
        vocab=50368, mode="document_per_row", micro=4, betas=(0.9, 0.98), eps=1e-6, decay=(1e-5, 8e-4), ramp=None,
        warmup=(1059, 3e9 / (1.7e12 / 600_000)), eval_mask=None, phases=[
            (("steps", 600_000), 1024, (1e4, 1e4), 0.3, 4608, 8e-4, None),
            (("steps", 100_000), 7999, (1.6e5, 1.6e5), 0.3, 4608, 8e-4, 0.5 * 8e-4),
            (("steps", 20_000), 7999, (1.6e5, 1.6e5), 0.15, 4608, 4e-4, 0.04 * 4e-4)]),
    "mmbert_base": dict(
        vocab=256000, mode="packed_documents", micro=2, betas=(0.9, 0.95), eps=1e-8, decay=(8e-5, 8e-4),
        ramp=(48 * 8, 48 * 8, 60e9), warmup=(7630, 3e9), eval_mask=None, phases=[
            (("tokens", 2.0e12), 1024, (1e4, 1e4), 0.25, 4608, 8e-4, None),
            (("tokens", 600e9), 8192, (1.6e5, 1.6e5), 0.15, 4608, 8e-4, None),
            (("tokens", 100e9), 8192, (1.6e5, 1.6e5), 0.05, 4608, 8e-4, 0.02 * 8e-4)]),
}


def their_parameters(vocab_size: int) -> int:
    """Parameters of transformers' ModernBertForMaskedLM built from their config (on the meta device: no memory)."""
    with torch.device("meta"):
        model = ModernBertForMaskedLM(ModernBertConfig(vocab_size=vocab_size, **THEIR_BLOCK))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(GPU))
def test_a_gpu_recipe_plans_on_eight_ranks_with_their_model(name, capsys, tmp_path):
    """Their block and parameter count: the count transformers gives their config is the header's and megamlm's
    model's, to the parameter."""
    pytest.importorskip("optimi", reason='their StableAdamW: pip install "megamlm[optimi]" (in [test])')
    config = RECIPES / f"{name}.yaml"
    assert main(["--config", str(config), "--dry-run", "--world-size", "8"]) == 0, capsys.readouterr().err
    theirs = their_parameters(GPU[name]["vocab"])
    assert f"({theirs / 1e6:.1f}M parameters, 22 layers" in capsys.readouterr().out
    header = config.read_text().splitlines()[0]
    assert f"({theirs / 1e6:.1f}M" in header, header  # the comment's count is transformers'
    cfg = parse_args(["--config", str(config), "--save", str(tmp_path / "ckpt")])
    with torch.device("meta"):
        assert sum(p.numel() for p in Transformer(dry_run_model_args(cfg)).parameters()) == theirs
    m = cfg.model
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups) == (
        22, 768, 1152, 12, 12)
    assert {key: getattr(m, key) for key in BLOCK} == BLOCK
    assert m.vocab_size == GPU[name]["vocab"]
    every = THEIR_BLOCK["global_attn_every_n_layers"]
    assert m.layer_types.split(",") == ["full" if i % every == 0 else "sliding" for i in range(22)]
    assert m.sliding_window == THEIR_BLOCK["local_attention"] // 2 + 1  # |i - j| <= 64, flash-attention's (64, 64)


@pytest.mark.parametrize("name", sorted(GPU))
def test_a_gpu_recipe_trains_with_the_settings_its_comment_states(name, tmp_path):
    stated = GPU[name]
    cfg = parse_args(["--config", str(RECIPES / f"{name}.yaml"), "--save", str(tmp_path / "ckpt")])
    t, o = cfg.training, cfg.objective
    assert (cfg.data.sample_mode, t.micro_batch_size) == (stated["mode"], stated["micro"])
    assert (o.mask_replace_prob, o.mask_random_prob, o.mask_keep_prob) == (0.8, 0.1, 0.1)  # their 80/10/10
    assert t.clip_grad == 0.0 and t.optimizer == "stableadamw"  # no clipping: StableAdamW's update clipping
    assert (t.adam_beta1, t.adam_beta2, t.adam_eps) == (*stated["betas"], stated["eps"])
    decoupled, peak = stated["decay"]
    assert math.isclose(t.weight_decay, decoupled / peak) and t.lr == peak
    assert cfg.validation.eval_mask_ratio == stated["eval_mask"]
    recipe = recipe_of(cfg)
    if stated["ramp"] is None:
        assert t.rampup_batch_size is None  # Ettin: no ramp (bert24 ramps inside its packer only, which is off)
    else:
        start, increment, tokens = stated["ramp"]
        assert tuple(t.rampup_batch_size) == (start, increment, int(tokens / 1024))  # over their tokens at 1,024
        assert BatchSizes.of(t).distinct() == tuple(range(start, t.global_batch_size + 1, increment))
    steps, tokens = stated["warmup"]
    assert t.lr_warmup_iters == steps
    if stated["ramp"] is None:
        assert steps == round(tokens)  # in steps of 2.83M tokens (their README's 600k steps for 1.7T)
    else:  # the first step whose tokens reach theirs
        assert recipe.tokens_through(steps - 1) < tokens <= recipe.tokens_through(steps)
    schedule = Segment.of_config(cfg).lr_schedule_object()
    assert len(recipe.phases) == len(stated["phases"])
    for phase, ((unit, length), seq, bases, mask, batch, lr, end) in zip(recipe.phases, stated["phases"]):
        if unit == "steps":
            assert phase.steps == length
        else:  # within one step
            assert abs(phase.tokens - length) < recipe.batch_size_at(phase.last_step) * seq, (phase.index, phase.tokens)
        assert (phase.seq_length, phase.rope_bases, phase.mask_ratio) == (seq, bases, mask)
        assert recipe.batch_size_at(phase.last_step) == batch
        first = schedule.lr_at(max(phase.first_step, t.lr_warmup_iters + 1))
        assert math.isclose(first, lr, rel_tol=0.02), (phase.index, first, lr)  # a decay's first step
        assert math.isclose(schedule.lr_at(phase.last_step), lr if end is None else end, rel_tol=1e-9)
        if end is not None:  # one_minus_sqrt, as theirs
            assert phase.lr_wsd_decay_style == "minus_sqrt"
            assert all(schedule.lr_at(s) > schedule.lr_at(s + 1) for s in (phase.first_step, phase.last_step - 1))
    assert recipe.batch_size_at(1) == (stated["ramp"] or [t.global_batch_size])[0]


def test_the_comments_name_their_figures():
    """Figures the comments derive are the ones the tests check (ramp steps, warmups, decay conventions)."""
    text = {name: (RECIPES / f"{name}.yaml").read_text() for name in GPU}
    assert "every 9,765,625 samples" in text["modernbert_base"] and 48828125 / 5 == 9765625
    assert "every 5,326,704 samples" in text["mmbert_base"] and int(58593750 / 11) == 5326704
    assert "37.7M tokens a step" in text["mmbert_base"] and round(4608 * 8192 / 1e5) == 377
    assert "615 tokens a row" in text["ettin_base"] and round(1.7e12 / 600_000 / 4608) == 615
    assert "2.83M tokens a step" in text["ettin_base"] and round(1.7e12 / 600_000 / 1e4) == 283
    for name, peak in (("modernbert_base", 3e-4), ("ettin_base", 4e-4)):  # a later phase's optimizer restart
        figure = f"1e-5 / {peak:.0e} = {1e-5 / peak:.2g}".replace("e-04", "e-4")
        assert figure in re.sub(r"\s+", " ", text[name].replace("#", " ")), figure


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
    if name in TINY_OF:  # the base recipe's block, sample mode, mask split, clipping and ramp, at the CPU's size
        base = parse_args(["--config", str(RECIPES / f"{TINY_OF[name]}.yaml"), "--save", str(tmp_path / "base")])
        same = [("model", key) for key in BLOCK if key not in ("norm_epsilon", "init_method_std")] + [
            ("data", "sample_mode"), ("training", "clip_grad"), *(("objective", f"mask_{kind}_prob")
                                                                  for kind in ("replace", "random", "keep"))]
        assert [getattr(getattr(cfg, a), b) for a, b in same] == [getattr(getattr(base, a), b) for a, b in same]
        assert (cfg.training.rampup_batch_size is None) == (base.training.rampup_batch_size is None)


def test_ettins_middle_phase_decays_to_the_rate_the_last_starts_from(austen_books, monkeypatch):
    """tiny_ettin.yaml's LR shape, step by step: held, then 1-sqrt to half, then 1-sqrt from half to --min-lr."""
    monkeypatch.chdir(austen_books)  # the phases' data is read when the config is
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


# The README's "continue ModernBERT (or an Ettin decoder) on your data": (recipe, the released model it continues
# (tests/unit/hf/modernbert_folders.py: its config's values at a tiny width), what the recipe sets that the import
# does not have (their training's attention dropout, Ettin's cross-training RoPE bases and bidirectional window)).
CONTINUATIONS = {
    "modernbert_base_continue": ("modernbert-base", dict(attention_dropout=0.1, rope_theta=1.6e5,
                                                         local_rope_theta=1e4, sliding_window=65)),
    "ettin_decoder_to_mlm": ("ettin-decoder", dict(attention_dropout=0.1, rope_theta=1.6e5, local_rope_theta=1.6e5,
                                                   sliding_window=65)),
}


@pytest.mark.parametrize("name", sorted(CONTINUATIONS))
def test_a_released_model_continues_with_its_recipe(name, tmp_path, capsys):
    """A folder of the released model (transformers' own class), imported as convert_from_hf.py does, plans on 8
    ranks with the continuation recipe; the recipe's settings win over the import's where it sets them, the block
    is the model's, and the schedule is theirs (ModernBERT's extension: 5/6 of the run at a constant 3e-4, then
    1-sqrt to 0.001 x 3e-4; Ettin's decoder -> encoder: 6% warmup to 4e-4, linear over the last 20% to 0.02 x it)."""
    pytest.importorskip("optimi", reason='their StableAdamW: pip install "megamlm[optimi]" (in [test])')
    from modernbert_folders import RELEASED, save_modernbert

    from megamlm.hf.importer import import_hf
    from megamlm.hf.init_from import adopt_init_from

    released, kept = CONTINUATIONS[name]
    save_modernbert(tmp_path / "hf", RELEASED[released], legacy=True)
    ckpt = import_hf(tmp_path / "hf", tmp_path / "ckpt", log=lambda *_: None)
    tokenizer = str(ckpt / "tokenizer" / "tokenizer.json")
    data = write_dataset(tmp_path / "mine_text_document", [list(range(5, 5 + n)) for n in (40, 7, 300, 12)])
    argv = ["--init-from", str(ckpt), "--config", str(RECIPES / f"{name}.yaml"), "--data-path", data,
            "--tokenizer-model", tokenizer, "--save", str(tmp_path / "run")]
    assert main([*argv, "--dry-run", "--world-size", "8"]) == 0, capsys.readouterr().err
    cfg = parse_args([*argv, "--dry-run", "--world-size", "8"], adopt=adopt_init_from)
    m, t, o = cfg.model, cfg.training, cfg.objective
    assert {key: getattr(m, key) for key in kept} == kept
    assert (m.vocab_size, m.num_layers, m.norm_type, m.embedding_norm, m.prediction_head, m.decoder_bias,
            m.mlp_activation) == (RELEASED[released]["vocab_size"], 4, "layernorm", True, True, True, "geglu_erf")
    assert (o.objective, o.mask_replace_prob, o.mask_random_prob, o.mask_keep_prob) == ("mlm", 0.8, 0.1, 0.1)
    assert (t.optimizer, t.clip_grad, t.adam_beta1, t.adam_beta2, t.adam_eps) == ("stableadamw", 0.0, 0.9, 0.98, 1e-6)
    schedule = Segment.of_config(cfg).lr_schedule_object()
    recipe = recipe_of(cfg)
    last = recipe.phases[-1].last_step
    if name == "modernbert_base_continue":
        assert (cfg.data.sample_mode, o.mask_ratio, t.global_batch_size, m.seq_length) == ("packed_documents", 0.3,
                                                                                           576, 8192)
        assert math.isclose(t.weight_decay, 1e-5 / 3e-4, rel_tol=0.01)
        first = recipe.phases[0]
        assert first.last_step == round(last * 5 / 6) and first.seq_length == 8192
        assert {schedule.lr_at(s) for s in range(1, first.last_step + 1, 97)} == {3e-4}
        assert math.isclose(schedule.lr_at(last), 0.001 * 3e-4, rel_tol=1e-9)
    else:
        assert (cfg.data.sample_mode, o.mask_ratio, t.global_batch_size, m.seq_length) == ("document_per_row", 0.15,
                                                                                           4608, 7999)
        assert math.isclose(t.weight_decay, 1e-5 / 4e-4)
        warmup, decay = round(0.06 * last), round(0.2 * last)
        assert math.isclose(schedule.lr_at(warmup), 4e-4) and schedule.lr_at(warmup - 1) < 0.99 * 4e-4
        assert schedule.lr_at(last - decay) == 4e-4 > schedule.lr_at(last - decay + 1)
        assert math.isclose(schedule.lr_at(last), 0.02 * 4e-4, rel_tol=1e-9)

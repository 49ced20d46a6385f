"""The miniature's pilot (issue 32): candidates, the arms' pretrain.py flags, and its two verdicts."""

import pytest

from megamlm.config.resolve import given_config, resolve
from megamlm.study.planning.pilot import (
    DEFAULTS,
    EVAL_MASK_RATIO,
    RANDOM_LR,
    LossVerdict,
    PilotError,
    parse_candidate,
    pretrain_flags,
    task_verdicts,
)
from tests.helpers import expect_one_line, tool_main


def test_a_candidate_changes_only_the_keys_it_names():
    c = parse_candidate("vocab=1024, lr=1e-3,mask=0.3")
    assert (c.vocab, c.lr, c.mask, c.layers, c.steps) == (1024, 1e-3, 0.3, DEFAULTS.layers, DEFAULTS.steps)
    assert c.name == "vocab=1024,lr=0.001,mask=0.3" and c.slug == "vocab1024_lr0.001_mask0.3"
    assert parse_candidate("").name == "miniature"


@pytest.mark.parametrize("text, words", [
    ("vocab:2048", "KEY=VALUE"), ("colour=red", "KEY=VALUE"), ("lr=fast", "not a finite number"),
    ("lr=nan", "lr='nan' is not a finite number"), ("lr=inf", "not a finite number"),  # issue 42: nan was accepted
    ("vocab=2048,vocab=8192", "vocab is given twice"),
    ("mask=0.6", "0.2-0.5"), ("vocab=100", "260"), ("hidden=100", "divide"), ("clm=1", "strictly between"),
    ("steps=0", "positive")])
def test_bad_candidates_name_the_fix(text, words):
    with pytest.raises(PilotError, match=words):
        parse_candidate(text)


def test_arm_flags_are_a_valid_launch(tmp_path):
    c = parse_candidate("vocab=1024,layers=2,seq=64,steps=40,mask=0.2")
    for arm in ("mlm", "clm_then_mlm", "random"):
        flags = pretrain_flags(c, arm, seed=3)
        cfg, _ = given_config([*flags, "--save", str(tmp_path / arm)])
        cfg = resolve(cfg)
        assert (cfg.model.num_layers, cfg.model.seq_length, cfg.training.micro_batch_size) == (2, 64, DEFAULTS.batch)
        assert cfg.objective.mask_ratio == 0.2 and cfg.training.seed == 3
        assert cfg.validation.eval_mask_ratio == EVAL_MASK_RATIO == 0.4  # candidates' losses compare
    random = resolve(given_config([*pretrain_flags(c, "random"), "--save", str(tmp_path / "r")])[0])
    assert (random.training.train_iters, random.training.lr) == (1, RANDOM_LR)
    switched = resolve(given_config([*pretrain_flags(c, "clm_then_mlm"), "--save", str(tmp_path / "s")])[0])
    assert switched.objective.objective == "clm_then_mlm" and switched.objective.switch == 0.25
    with pytest.raises(PilotError, match="unknown arm"):
        pretrain_flags(c, "mntp")


def test_one_adamw_step_at_the_random_arms_lr_changes_no_weight():
    import torch

    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(64, 64) * 0.02)
    before = weight.detach().clone()
    optimizer = torch.optim.AdamW([weight], lr=RANDOM_LR, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
    weight.sum().backward()
    optimizer.step()
    assert torch.equal(weight.detach(), before)


def test_the_loss_target_is_half_a_nat_under_the_entropy():
    assert LossVerdict(5.70, 6.21).meets_target and not LossVerdict(5.72, 6.21).meets_target
    assert LossVerdict(6.26, 6.21).gap == pytest.approx(-0.05)


def test_a_task_is_informative_when_the_best_arm_leads_random_by_the_margin():
    scores = {"novel": {"mlm": 60.0, "clm_then_mlm": 70.0, "random": 40.0}, "pos": {"mlm": 66.0, "random": 64.0}}
    assert task_verdicts(scores, margin=5) == {"novel": ("clm_then_mlm", 30.0, True), "pos": ("mlm", 2.0, False)}
    with pytest.raises(PilotError, match="random-init"):
        task_verdicts({"qa": {"mlm": 50.0}}, margin=5)


def test_the_tool_refuses_a_bad_candidate_in_one_line(tmp_path, capsys):
    status = tool_main("pilot_miniature")(["--output", str(tmp_path / "p"), "--candidate", "mask=0.9"])
    expect_one_line(capsys, status, "mask=0.9", "0.2-0.5")
    status = tool_main("pilot_miniature")(["--output", str(tmp_path / "p"), "--arms", "mlm,mntp"])
    expect_one_line(capsys, status, "--arms", "mntp")
    status = tool_main("pilot_miniature")(["--output", str(tmp_path / "p"), "--finetune-steps", "0"])
    expect_one_line(capsys, status, "--finetune-steps 0", "at least 1")
    # issue 42: accepted, or refused only after the tokenizers and caches were built
    for argv, words in ((["--margin", "nan"], ("--margin nan", "finite")),
                        (["--tasks", "austen-novel,no-such-task"], ("unknown task 'no-such-task'",)),
                        (["--candidate", "lr=nan"], ("lr='nan' is not a finite number",)),
                        (["--candidate", "lr=1e-3,lr=3e-3"], ("lr is given twice",)),
                        (["--finetune-lrs", "1e-3,nan"], ("--finetune-lrs", "positive numbers"))):
        status = tool_main("pilot_miniature")(["--output", str(tmp_path / "p"), *argv])
        expect_one_line(capsys, status, *words)
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_the_pilot_runs_end_to_end_from_a_relative_output_folder(tmp_path, monkeypatch, capsys):
    """The whole command at a tiny scale (what the docs test only parses): a BPE of its own, the entropy of the
    validation tokens, both arms pretrained and their validation losses against it; --output relative to the
    caller's folder although its tools run from the repository root."""
    monkeypatch.chdir(tmp_path)
    candidate = "vocab=512,layers=1,hidden=32,ffn=64,heads=2,groups=2,seq=32,batch=2,steps=8"
    status = tool_main("pilot_miniature")(["--output", "pilot", "--candidate", candidate, "--eval-points", "2",
                                           "--eval-iters", "1", "--no-finetune"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "vocabulary 512: " in out and "unigram entropy " in out
    for arm in ("mlm", "clm_then_mlm"):
        assert f"| {arm} | " in out
    assert (tmp_path / "pilot" / "tokenizers" / "tokenizer-512.json").is_file()


def test_the_defaults_are_the_committed_miniatures_settings():
    """The pilot screens around the committed miniature: its defaults are that study file's settings."""
    from pathlib import Path

    from megamlm.data import load_tokenizer
    from megamlm.model.config import PRESETS
    from megamlm.study.planning.load import load_study
    from megamlm.study.planning.plan import build_plan

    study = load_study(Path(__file__).resolve().parents[3] / "examples" / "studies" / "cpu_miniature.yaml")
    runs = build_plan(study).runs
    mlm = next(run for run in runs if run.phases == ("mlm",) and not run.is_continuation)
    cfg, tiny = mlm.config, PRESETS[mlm.size]
    assert mlm.size == "tiny" and (DEFAULTS.layers, DEFAULTS.hidden, DEFAULTS.ffn, DEFAULTS.heads, DEFAULTS.groups) == (
        tiny["num_layers"], tiny["hidden_size"], tiny["ffn_hidden_size"], tiny["num_attention_heads"],
        tiny["num_query_groups"])
    assert load_tokenizer(cfg.data.tokenizer_model).vocab_size == DEFAULTS.vocab
    assert (cfg.model.seq_length, cfg.training.global_batch_size, cfg.training.lr, mlm.mask_ratio,
            mlm.train_iters) == (DEFAULTS.seq, DEFAULTS.batch, DEFAULTS.lr, DEFAULTS.mask, DEFAULTS.steps)
    assert (cfg.training.lr_warmup_iters, cfg.training.lr_wsd_decay_iters) == (DEFAULTS.steps // 10,
                                                                               DEFAULTS.steps // 5)
    assert min(run.switch_step / run.train_iters for run in runs if run.phases == ("clm", "mlm")) == DEFAULTS.clm

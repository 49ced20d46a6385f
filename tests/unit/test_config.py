import pytest

from megamlm.config import ConfigError, parse_args


@pytest.mark.parametrize("argv,message", [
    (["--objective", "bert"], "argument --objective: invalid choice: 'bert'"),
    (["--lr-decay-style", "step"], "argument --lr-decay-style: invalid choice: 'step'"),
    (["--switch", "0"], "--switch must be a fraction strictly between 0 and 1"),
    (["--switch", "1.0"], "--switch must be a fraction strictly between 0 and 1"),
    (["--mask-ratio", "1.2"], "--mask-ratio must be strictly between 0 and 1"),
    (["--mask-ratio", "0"], "--mask-ratio must be strictly between 0 and 1"),
    (["--num-attention-heads", "8", "--num-query-groups", "3"], "not divisible by --num-query-groups"),
    (["--global-batch-size", "10", "--micro-batch-size", "4"], "not divisible by --micro-batch-size"),
    (["--mask-replace-prob", "0.8"], "sum to 1"),
    (["--model", "7b"], "unknown --model '7b'"),
    (["--objective", "clm_then_mlm", "--switch", "0.01", "--train-iters", "10"], "leaving one phase empty"),
    (["--lr-warmup-iters", "200", "--train-iters", "100"], "exceed --train-iters"),
    (["--save-interval", "10"], "needs --save"),
    (["--load", "a", "--init-from", "b"], "exclude each other"),
])
def test_bad_flags_give_one_clear_error(argv, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_args(argv)


def test_megatron_flags_override_the_preset(tmp_path):
    cfg = parse_args(["--model", "210m", "--num-layers", "6", "--seq-length", "512"])
    assert cfg.model.model == "210m" and cfg.model.num_layers == 6 and cfg.model.seq_length == 512
    assert cfg.model.hidden_size is None  # resolved from the preset later


def test_yaml_config_is_loaded_and_flags_override_it(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("objective:\n  objective: clm_then_mlm\n  switch: 0.5\ntraining:\n  train_iters: 40\n")
    cfg = parse_args(["--config", str(path), "--switch", "0.25"])
    assert cfg.objective.objective == "clm_then_mlm"
    assert cfg.objective.switch == 0.25
    assert cfg.training.train_iters == 40


def test_yaml_with_an_unknown_key_names_it(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("training:\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match="unknown key training.learning_rate"):
        parse_args(["--config", str(path)])


def test_help_lists_every_flag_with_its_doc(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in ("--objective", "--switch", "--mask-ratio", "--global-batch-size", "--save-interval", "--init-from"):
        assert flag in out
    assert "5% of --train-iters" in out


def test_help_lists_the_choices_of_every_choice_flag(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for choices in ("{mlm,clm,clm_then_mlm,mlm_then_clm}", "{wsd,cosine,linear,constant}", "{fsdp,ddp}",
                    "{1f1b,interleaved_1f1b}", "{auto,triton,chunked,reference}", "{auto,sdpa,sdpa_flash,sdpa_cudnn,flex,flash}",
                    "{auto,none,blocks,model,cudagraphs}"):
        assert choices in out


@pytest.mark.parametrize("argv,mode", [([], "auto"), (["--compile"], "blocks"), (["--no-compile"], "none"),
                                       (["--compile", "model"], "model"), (["--compile", "cudagraphs"], "cudagraphs")])
def test_compile_is_a_mode_and_the_former_switch_keeps_its_meaning(argv, mode):
    assert parse_args(argv).performance.compile == mode


@pytest.mark.parametrize("value,mode", [("true", "blocks"), ("false", "none"), ("model", "model")])
def test_compile_from_yaml_accepts_the_former_booleans(tmp_path, value, mode):
    path = tmp_path / "run.yaml"
    path.write_text(f"performance:\n  compile: {value}\n")
    assert parse_args(["--config", str(path)]).performance.compile == mode


def test_an_unknown_compile_mode_is_refused():
    with pytest.raises(ConfigError, match="argument --compile: invalid choice: 'fast'"):
        parse_args(["--compile", "fast"])


def test_fp8_without_torchao_names_the_fix(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(ConfigError, match="--fp8 needs torchao, which is not installed; pip install torchao"):
        parse_args(["--fp8"])


def test_a_choice_set_from_yaml_is_checked_against_the_same_literal(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("objective:\n  objective: bert\n")
    with pytest.raises(ConfigError, match="unknown --objective 'bert'; choose one of mlm, clm, clm_then_mlm"):
        parse_args(["--config", str(path)])


def test_layering_config_imports_no_parallel_and_parallel_no_training():
    import subprocess
    import sys

    code = ("import sys, importlib; importlib.import_module(sys.argv[1]); "
            "print(' '.join(m for m in sys.modules if m.startswith(sys.argv[2])))")
    for module, forbidden in (("megamlm.config", "megamlm.parallel"), ("megamlm.parallel.forward_backward",
                                                                       "megamlm.training"),
                              ("megamlm.parallel.parallelize", "megamlm.training")):
        out = subprocess.run([sys.executable, "-c", code, module, forbidden], capture_output=True, text=True,
                             check=True).stdout.split()
        assert out == [], f"{module} imports {out}"

import pytest

from megamlm.config import ConfigError, parse_args, switch_step, warmup_iters, wsd_decay_iters


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
    (["--objective", "clm_then_mlm", "--switch", "0.01", "--train-iters", "10"], "leaving one stage empty"),
    (["--lr-warmup-iters", "200", "--train-iters", "100"], "exceed --train-iters"),
    (["--save-interval", "10"], "needs --save"),
    (["--load", "a", "--init-from", "b"], "exclude each other"),
    (["--hidden-size", "100", "--num-attention-heads", "8"], "not divisible by --num-attention-heads 8; pick divisible "
                                                             "sizes or set --head-dim"),
    (["--head-dim", "15"], "the head dimension (15) must be positive and even"),
    (["--rope-scaling", "{factor: 2}"], "--rope-scaling '{factor: 2}': Expecting property name"),
    (["--rope-scaling", '{"rope_type": "dynamic", "factor": 2}'], "RoPE type 'dynamic' is not supported"),
    (["--rope-scaling", '{"rope_type": "llama3", "factor": 8}'], "needs low_freq_factor"),
    (["--load", "a", "--continue-from", "b"], "--load and --continue-from exclude each other"),
    (["--init-from", "a", "--continue-from", "b"], "--init-from and --continue-from exclude each other"),
    (["--objective", "clm_then_mlm", "--switch-step", "10", "--train-iters", "10"],
     "--switch-step 10 with --train-iters 10 puts the switch at step 10, leaving one stage empty"),
    (["--switch", "0.5", "--switch-step", "3"], "--switch and --switch-step give the same setting two ways"),
    (["--lr-warmup-iters", "5", "--lr-warmup-fraction", "0.1"], "--lr-warmup-iters and --lr-warmup-fraction"),
    (["--lr-wsd-decay-iters", "5", "--lr-wsd-decay-fraction", "0.1"], "--lr-wsd-decay-iters and --lr-wsd-decay-fr"),
    (["--lr-warmup-fraction", "1.5"], "--lr-warmup-fraction must be in "),
    (["--lr-wsd-decay-fraction", "0"], "--lr-wsd-decay-fraction must be in "),
    (["--lr-warmup-fraction", "0.6", "--lr-wsd-decay-fraction", "0.6"], "or give them as fractions"),
    (["--save-at", "10"], "--save-at needs --save DIR"),
    (["--save", "x", "--save-at", "20,10"], "--save-at 20,10 is not strictly increasing"),
    (["--save", "x", "--save-at", "10,10"], "is not strictly increasing"),
    (["--save", "x", "--save-at", "0"], "--save-at step 0 is outside this run's steps 1-300"),
    (["--save", "x", "--save-at", "301"], "--save-at step 301 is outside this run's steps 1-300"),
    (["--save", "x", "--save-at", "1,x"], "--save-at takes integers"),
    (["--split", "969,30,1", "--valid-data-path", "v"], "--split and --valid-data-path both give a validation set"),
    (["--split", "1,0,1"], "--split 1,0,1 leaves no validation documents"),
    (["--split", "1,2,3,4"], "--split 1,2,3,4 does not parse"),
    (["--split=-1,2"], "--split -1,2 does not parse"),
    (["--eval-iters", "3"], "--eval-iters needs a validation set"),
    (["--split", "99,1", "--eval-interval", "0"], "--eval-interval must be positive"),
    (["--split", "99,1", "--eval-mask-ratio", "1.0"], "--eval-mask-ratio must be strictly between 0 and 1"),
    (["--overwrite-damaged"], "--overwrite-damaged concerns the checkpoints of --save DIR"),
])
def test_bad_flags_give_one_clear_error(argv, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_args(argv)


def test_the_switch_step_is_given_as_a_fraction_or_a_step_and_computed_in_one_place():
    assert switch_step(parse_args(["--objective", "clm_then_mlm", "--train-iters", "42000"]).objective, 42000) == 10500
    cfg = parse_args(["--objective", "clm_then_mlm", "--train-iters", "42000", "--switch", "0.238095"])
    assert switch_step(cfg.objective, 42000) == 10000
    cfg = parse_args(["--objective", "clm_then_mlm", "--train-iters", "12000", "--switch-step", "10000"])
    assert switch_step(cfg.objective, 12000) == 10000 and cfg.objective.switch is None
    assert switch_step(parse_args(["--objective", "mlm"]).objective, 300) is None


def test_a_command_line_alternative_replaces_the_yamls_other_way(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("objective:\n  objective: clm_then_mlm\n  switch: 0.25\ntraining:\n  train_iters: 2000\n"
                    "  lr_warmup_iters: 100\n  lr_wsd_decay_iters: 100\n")
    cfg = parse_args(["--config", str(path), "--switch-step", "1500", "--lr-warmup-fraction", "0.1"])
    assert (cfg.objective.switch, cfg.objective.switch_step) == (None, 1500)
    assert (warmup_iters(cfg.training), wsd_decay_iters(cfg.training)) == (200, 100)
    both = tmp_path / "both.yaml"
    both.write_text("objective:\n  switch: 0.25\n  switch_step: 10\n")
    with pytest.raises(ConfigError, match="--switch and --switch-step give the same setting two ways"):
        parse_args(["--config", str(both)])


def test_save_at_takes_commas_or_spaces():
    cfg = parse_args(["--save", "x", "--train-iters", "42000", "--save-at", "10000,20000", "40000"])
    assert cfg.checkpoint.save_at == [10000, 20000, 40000]


def test_megatron_flags_override_the_preset(tmp_path):
    cfg = parse_args(["--model", "210m", "--num-layers", "6", "--seq-length", "512"])
    assert cfg.model.model == "210m" and cfg.model.num_layers == 6 and cfg.model.seq_length == 512
    assert cfg.model.hidden_size is None  # resolved from the preset later


def test_decoder_feature_flags_reach_the_model_shape(tmp_path):
    from megamlm.config import model_features
    from megamlm.model.rope_scaling import RopeScaling

    cfg = parse_args(["--hidden-size", "100", "--num-attention-heads", "4", "--num-query-groups", "2", "--head-dim",
                      "32", "--attention-bias", "--tie-word-embeddings",
                      "--rope-scaling", '{"rope_type": "linear", "factor": 4}'])
    off = {"qk_norm": False, "sublayer_output_norms": False, "mlp_activation": "swiglu", "scale_embeddings": False,
           "query_pre_attn_scalar": None, "sliding_window": None, "layer_types": None, "local_rope_theta": None,
           # the ModernBERT block's options, off
           "norm_type": "rmsnorm", "norm_bias": False, "embedding_norm": False, "prediction_head": False,
           "classifier_bias": False, "decoder_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
           "mlp_dropout": 0.0, "embedding_dropout": 0.0, "init_method": "megatron", "initializer_cutoff_factor": 2.0}
    assert model_features(cfg.model) == {"head_dim": 32, "attention_bias": True, "attention_out_bias": False,
                                         "rope_scaling": RopeScaling("linear", factor=4.0), "tie_word_embeddings": True,
                                         **off}
    gemma = parse_args(["--qk-norm", "--sublayer-output-norms", "--mlp-activation", "geglu", "--scale-embeddings",
                        "--query-pre-attn-scalar", "256", "--sliding-window", "512", "--layer-types",
                        "sliding,sliding,sliding,full", "--local-rope-theta", "10000"])
    assert model_features(gemma.model) == {**model_features(parse_args([]).model), "qk_norm": True,
                                           "sublayer_output_norms": True, "mlp_activation": "geglu",
                                           "scale_embeddings": True, "query_pre_attn_scalar": 256,
                                           "sliding_window": 512, "layer_types": "sliding,sliding,sliding,full",
                                           "local_rope_theta": 10000.0}
    (tmp_path / "run.yaml").write_text("model:\n  rope_scaling: {rope_type: linear, factor: 2}\n")
    assert model_features(parse_args(["--config", str(tmp_path / "run.yaml")]).model)["rope_scaling"].factor == 2.0


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
    for flag in ("--objective", "--switch", "--mask-ratio", "--global-batch-size", "--save-interval", "--init-from",
                 "--switch-step", "--save-at", "--continue-from", "--split", "--valid-data-path", "--eval-interval",
                 "--eval-iters", "--eval-mask-ratio", "--lr-warmup-fraction", "--lr-wsd-decay-fraction"):
        assert flag in out
    assert "5% of --train-iters" in out


def test_help_lists_the_choices_of_every_choice_flag(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for choices in ("{mlm,clm,clm_then_mlm,mlm_then_clm}", "{wsd,cosine,linear,constant}", "{fsdp,ddp}",
                    "{1f1b,interleaved_1f1b}", "{auto,triton,chunked,reference}",
                    "{auto,sdpa,sdpa_flash,sdpa_cudnn,flex,flash}",
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
    with pytest.raises(ConfigError, match=r'--fp8 needs the torchao package, which is not installed; pip install '
                                          r'"megamlm\[fp8\]"'):
        parse_args(["--fp8"])


def test_a_choice_set_from_yaml_is_checked_against_the_same_literal(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("objective:\n  objective: bert\n")
    with pytest.raises(ConfigError, match="unknown --objective 'bert'; choose one of mlm, clm, clm_then_mlm"):
        parse_args(["--config", str(path)])


def help_entries(capsys) -> dict[str, str]:
    """--help, one entry per flag: the flag line and its (rewrapped) help text."""
    import re

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out.split("\noptions:", 1)[1]
    entries, current = {}, None
    for line in out.splitlines():
        match = re.match(r"^  (--[a-z0-9-]+)", line)
        if match:
            current = match.group(1)
            entries[current] = line
        elif current and line.startswith("    "):
            entries[current] += " " + line.strip()
    return {flag: " ".join(text.split()) for flag, text in entries.items()}


def test_help_names_each_default_once_and_never_none(capsys):
    entries = help_entries(capsys)
    assert len(entries) > 60
    for flag, text in entries.items():
        if flag in ("--help", "--config", "--no-compile"):  # --no-compile: a spelling of --compile none
            continue
        assert text.count("default") == 1, (flag, text)
        assert "default: None" not in text and "default: []" not in text, (flag, text)
    assert "(default: 300; --model 210m/610m/1b: 42000" in entries["--train-iters"]
    assert "beside the data" not in entries["--data-cache-path"]
    assert "no index cache" in entries["--data-cache-path"]


def test_every_unset_default_is_explained_in_its_doc():
    import dataclasses

    from megamlm.config import SECTION_CLASSES, field_docs

    for cls in SECTION_CLASSES.values():
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if default in (None, []):
                assert "default" in docs[f.name], (cls.__name__, f.name)


def test_the_data_cache_path_default_is_what_happens(tmp_path, monkeypatch):
    """No --data-cache-path: no sample-index cache is written anywhere (the help says so)."""
    from megamlm.data import StreamSpec, build_train_dataset, prepare_embedded_corpus

    monkeypatch.setenv("MEGAMLM_CACHE", str(tmp_path / "cache"))
    prefix, _ = prepare_embedded_corpus()
    before = sorted(p.name for p in (tmp_path / "cache").rglob("*"))
    build_train_dataset(StreamSpec([prefix], seq_length=32, num_samples=64, seed=1))
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*")) == before
    build_train_dataset(StreamSpec([prefix], seq_length=32, num_samples=64, seed=1, cache_dir=str(tmp_path / "idx")))
    assert list((tmp_path / "idx").glob("*.npy"))


def test_a_validated_config_is_frozen():
    import dataclasses

    cfg = parse_args([])
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.training.lr = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.model = None
    changed = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, lr=1.0))
    assert (changed.training.lr, cfg.training.lr) == (1.0, 3e-3)


def test_each_model_field_is_declared_once_and_its_flag_comes_from_it(capsys):
    """ModelArgs declares the shape; the model section's flags (and their help) are generated from it."""
    import ast
    from pathlib import Path

    declared: dict[str, list[str]] = {}
    for path in (Path(__file__).resolve().parents[2] / "megamlm").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                declared.setdefault(node.target.id, []).append(str(path))
    for name in ("num_query_groups", "ffn_hidden_size", "rope_theta"):
        assert len(declared[name]) == 1 and declared[name][0].endswith("model/config.py"), (name, declared[name])
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--num-query-groups NUM_QUERY_GROUPS Key/value heads for grouped-query attention (default: the preset's)" \
        in out
    assert "--rope-theta ROPE_THETA Rotary embedding base. (default: 10000.0)" in out


@pytest.mark.parametrize("flags, message", [
    (["--layer-types", "full,sliding", "--sliding-window", "4"], "names 2 layers and --num-layers is 4"),
    (["--layer-types", "full,sliding,full,full"], "sliding layers need --sliding-window"),
    (["--sliding-window", "0"], "at least 1"),
])
def test_layer_types_are_checked_before_any_work(flags, message):
    from megamlm.config.checks import validate

    with pytest.raises(ConfigError, match=message):
        validate(parse_args(flags))


def test_a_one_objective_command_line_replaces_the_yamls_switch_but_a_given_switch_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("objective:\n  objective: clm_then_mlm\n  switch_step: 5\ntraining:\n  train_iters: 20\n")
    cfg = parse_args(["--config", str(path), "--objective", "clm"])
    assert (cfg.objective.objective, cfg.objective.switch_step, switch_step(cfg.objective, 20)) == ("clm", None, None)
    with pytest.raises(ConfigError, match="has one objective"):
        parse_args(["--config", str(path), "--objective", "clm", "--switch-step", "5"])

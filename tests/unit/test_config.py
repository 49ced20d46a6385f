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
    (["--overwrite-damaged"], "--overwrite-damaged concerns the checkpoints of --save DIR"),
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
                    "{1f1b,interleaved_1f1b}", "{auto,triton,chunked,reference}", "{sdpa,flex,flash}"):
        assert choices in out


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
        if flag in ("--help", "--config"):
            continue
        assert text.count("default") == 1, (flag, text)
        assert "default: None" not in text and "default: []" not in text, (flag, text)
    assert "(default: 300)" in entries["--train-iters"]
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
    from megamlm.data import build_train_dataset, prepare_embedded_corpus

    monkeypatch.setenv("MEGAMLM_CACHE", str(tmp_path / "cache"))
    prefix, _ = prepare_embedded_corpus()
    before = sorted(p.name for p in (tmp_path / "cache").rglob("*"))
    build_train_dataset([prefix], seq_length=32, num_samples=64, seed=1)
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*")) == before
    build_train_dataset([prefix], seq_length=32, num_samples=64, seed=1, cache_dir=str(tmp_path / "idx"))
    assert list((tmp_path / "idx").glob("*.npy"))

"""Issue 55, item 4 (the loader's bounds and the numeric flags): YAML aliases cannot expand without bound, a config
file has a size bound, every numeric flag converts without overflow or is refused in one line, and the run's length
is given one way (--train-iters or --train-tokens), a bad --train-tokens naming the flag. Each refusal: one line,
exit 2, nothing written."""

import pytest
from helpers import expect_one_line

from megamlm.cli import main
from megamlm.config import parse_args
from megamlm.config.loader import MAX_EXPANDED_NODES, expanded_size, read_yaml
from megamlm.errors import ConfigError


def nested_aliases(depth: int, width: int = 9) -> str:
    """About 60 bytes a level: each level an anchored list of ``width`` aliases of the level before."""
    items = ["&a0 [" + ", ".join(["x"] * width) + "]"]
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, depth)]
    return "data:\n  data_path: [" + ", ".join(items) + "]\n"


def test_nested_aliases_of_one_kilobyte_are_one_line_not_a_memory_error(tmp_path, capsys):
    text = nested_aliases(12)
    assert len(text.encode()) < 1024
    (tmp_path / "laughs.yaml").write_text(text)
    status = main(["--config", str(tmp_path / "laughs.yaml"), "--save", str(tmp_path / "out"), "--train-iters", "2"])
    expect_one_line(capsys, status, "laughs.yaml", "aliases expand to", f"{MAX_EXPANDED_NODES:,}")
    assert not (tmp_path / "out").exists()


def test_aliases_within_the_bound_still_load():
    assert read_yaml("a: &x [1, 2]\nb: *x\nc: *x\n") == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}
    assert read_yaml("") is None


def test_expanded_size_counts_every_alias_without_expanding_it():
    import yaml

    node = yaml.compose(nested_aliases(30, width=2))  # 2**30 leaves: counted at once
    assert expanded_size(node) > 2**30


def test_a_config_file_has_a_size_bound(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    status = main(["--config", str(big), "--save", str(tmp_path / "out")])
    expect_one_line(capsys, status, "big.yaml is 2,097,155 bytes", "1,048,576")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flags", "message"), [
    (["--distributed-timeout-minutes", "1e13"], "--distributed-timeout-minutes must be a positive number of minutes, "
                                                "at most 525,600"),
    (["--distributed-timeout-minutes", "0"], "--distributed-timeout-minutes must be a positive"),
    (["--train-iters", str(10**23)], f"--train-iters {10**23} is beyond the 64-bit integers"),
    (["--global-batch-size", str(2**64), "--micro-batch-size", "4"], "--global-batch-size"),
    (["--save-at", str(10**30)], "--save-at"),
    (["--train-iters", str(10**12), "--global-batch-size", str(10**8)], "beyond the 64-bit counts"),
    (["--train-tokens", "4096", "--train-iters", "5"], "--train-iters 5 and --train-tokens 4096 give the run's "
                                                       "length two ways"),
    (["--train-tokens", "-128"], "--train-tokens must be positive, got -128"),
    (["--train-tokens", "0"], "--train-tokens must be positive, got 0"),
])
def test_numeric_flags_convert_or_are_refused_in_one_line(flags, message, tmp_path, capsys):
    status = main(["--model", "tiny", *flags, "--save", str(tmp_path / "out")])
    line = expect_one_line(capsys, status, message)
    assert "phases[" not in line and "phase 1" not in line
    assert not (tmp_path / "out").exists()


def test_the_command_line_length_replaces_the_files(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("training:\n  train_iters: 5\n")
    assert parse_args(["--config", str(config), "--train-tokens", "4096", "--model", "tiny"]).training.train_tokens \
        == 4096
    config.write_text("training:\n  train_iters: 5\n  train_tokens: 4096\n")
    with pytest.raises(ConfigError, match="two ways"):
        parse_args(["--config", str(config), "--model", "tiny"])

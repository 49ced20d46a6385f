"""A phase field and the run-level flag of the same setting get the same check (issue 55 item 4): every phase field
with a bad value (NaN, infinity, negative, out of range, wrong type) is refused in one line, exit 2, before anything
is written, and where the run-level flag refuses the same value the phase's line carries that flag's own words."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml

from megamlm.cli import main
from megamlm.config.phase_fields import PhaseConfig

RUN = ["--num-layers", "1", "--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads", "2",
       "--num-query-groups", "2", "--seq-length", "64", "--micro-batch-size", "4", "--global-batch-size", "8",
       "--train-iters", "4"]
LATER_ONLY = {"lr", "lr_warmup_iters", "valid_data_path"}
"""Set in the second phase (a learning rate or re-warmup of the first phase is the run's flags')."""


def bad_values(f) -> list:
    """NaN, infinity, negative and out-of-range numbers, and a value of the wrong type, for a field's type."""
    kind = f.type if isinstance(f.type, str) else str(f.type)
    if "float" in kind:
        return [math.nan, math.inf, -1.0, 1.5 if f.name.startswith("mask") or f.name == "fraction" else -math.inf,
                "many"]
    if "int" in kind:
        return [-1, 0, "many", 2.5]
    if "bool" in kind:
        return ["many"]
    return [5] if "list" in kind else [5, "nonsense"]


CASES = [(f.name, value) for f in dataclasses.fields(PhaseConfig) for value in bad_values(f)]


def launch(tmp_path, capsys, argv, save="ckpt") -> tuple[int, str]:
    code = main([*RUN, *argv, "--save", str(tmp_path / save)])
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize("name,value", CASES, ids=[f"{n}={v!r}" for n, v in CASES])
def test_a_bad_phase_value_is_the_flags_own_one_line_refusal(tmp_path, capsys, name, value):
    phases = [{"steps": 2}, {name: value}] if name in LATER_ONLY else [{"steps": 2, name: value}, {}]
    if name in ("steps", "tokens", "fraction"):
        phases = [{name: value}, {}]
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"phases": phases}))
    code, err = launch(tmp_path, capsys, ["--config", str(path)])
    assert code == 2 and len(err.splitlines()) == 1, err
    assert not (tmp_path / "ckpt").exists()
    run_setting = next(f for f in dataclasses.fields(PhaseConfig) if f.name == name).metadata["run_setting"]
    if run_setting is None or isinstance(value, str) or name in ("data_path", "valid_data_path", "objective"):
        return
    flag = f"--{run_setting.split('.')[1].replace('_', '-')}"
    code, flag_err = launch(tmp_path, capsys, [flag, str(value), "--dry-run"], "flag")
    if code == 2 and flag_err.startswith(f"error: {flag}"):  # the flag refuses it with its own words: so does the phase
        assert flag_err.removeprefix(f"error: {flag}") in err and flag in err, (flag_err, err)

"""A crafted checkpoint runs nothing: every command that reads one refuses it in one line (exit 2).

Checkpoints are shared and downloaded. Each case below plants a pickle payload that would create a marker file
when unpickled, in the places a checkpoint holds pickles (``rng_rank*.pt``, megamlm 0.1's ``train_state.pt``, DCP's
``.metadata``), and runs the real command lines (their ``main``, in this process: a payload that ran would create
the marker here too): ``pretrain.py --load``, ``--init-from``, ``--continue-from`` and ``tools/convert_to_hf.py``.
Each must exit 2 with one line on stderr (no traceback), leave the checkpoint's files byte-identical, and never
create the marker.
"""

import json
import os
import pickle
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import expect_one_line, tool_main
from helpers import tree_digest as digest

from megamlm.checkpoint.catalog import rng_file
from megamlm.checkpoint.integrity import MARKER, describe_files
from megamlm.cli import main

REPO = Path(__file__).resolve().parents[2]


class Payload:
    """Unpickled, it runs ``touch marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def recommit(folder: Path, name: str) -> None:
    """Update the completion marker's checksum of ``name``, as whoever crafted the file would."""
    marker = json.loads((folder / MARKER).read_text())
    marker["files"].update(describe_files(folder, [name]))
    (folder / MARKER).write_text(json.dumps(marker))


def craft(folder: Path, where: str, marker: Path) -> str:
    """Plant the payload; returns the file it is in."""
    if where == "rng":
        state = torch.load(folder / rng_file(0), weights_only=True)
        torch.save({**state, "extra": Payload(marker)}, folder / rng_file(0))
        recommit(folder, rng_file(0))
        return rng_file(0)
    if where.startswith("metadata"):
        with open(folder / ".metadata", "rb") as f:
            metadata = pickle.load(f)  # our own, trusted
        metadata.storage_meta.modules = [Payload(marker)]  # DCP would unpickle it, run it and load the checkpoint
        with open(folder / ".metadata", "wb") as f:
            pickle.dump(metadata, f)
        recommit(folder, ".metadata")
        if where == "metadata-unmarked":  # as saved before completion markers: only its structure is checked
            (folder / MARKER).unlink()
        return ".metadata"
    assert where == "legacy-train-state"  # megamlm 0.1's layout: a pickled train state, no marker, no RNG files
    state = json.loads((folder / "train_state.json").read_text())
    torch.save({"step": state["step"], "consumed_samples": 8, "rng": Payload(marker)}, folder / "train_state.pt")
    for name in ("train_state.json", MARKER, rng_file(0)):
        (folder / name).unlink()
    return "train_state.pt"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny):
    save = tmp_path_factory.mktemp("untrusted") / "run"
    tiny("--train-iters", "4", "--exit-interval", "2", "--save", save)
    return save / "iter_0000002"


def command(kind: str, folder: Path, out: Path, tiny_flags) -> int:
    """The exit status of the command line ``kind`` reading ``folder``."""
    if kind == "convert_to_hf":
        return tool_main("convert_to_hf")(["--input", str(folder), "--output", str(out)])
    flag = {"load": "--load", "init_from": "--init-from", "continue_from": "--continue-from"}[kind]
    return main([*tiny_flags, "--train-iters", "6", flag, str(folder), "--save", str(out)])


@pytest.mark.parametrize("kind", ["load", "init_from", "continue_from", "convert_to_hf"])
@pytest.mark.parametrize("where", ["rng", "legacy-train-state", "metadata"])
def test_a_crafted_checkpoint_is_refused_in_one_line_and_runs_nothing(checkpoint, tmp_path, tiny_flags, cache_dir,
                                                                     where, kind, capsys, monkeypatch):
    folder = tmp_path / "shared" / checkpoint.name
    shutil.copytree(checkpoint.parent, folder.parent)
    marker = tmp_path / "payload_ran"
    culprit = craft(folder, where, marker)
    before = digest(folder.parent)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    expect_one_line(capsys, command(kind, folder, tmp_path / "out", tiny_flags),
                    f"{folder / culprit} refers to the Python global posix.system")
    assert not marker.exists()
    assert digest(folder.parent) == before
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("iter_*"))


def test_a_crafted_newest_checkpoint_is_skipped_for_the_previous_one_saying_why(tmp_path, tiny, capsys):
    """A save folder scanned for its newest loadable checkpoint passes over the crafted one, with a warning (the
    scan of a checkpoint without a completion marker reads its .metadata: through the allow-list)."""
    save = tmp_path / "run"
    tiny("--train-iters", "4", "--save-interval", "2", "--save", save)
    marker = tmp_path / "payload_ran"
    craft(save / "iter_0000004", "metadata-unmarked", marker)
    capsys.readouterr()
    status = tool_main("convert_to_hf")(["--input", str(save), "--output", str(tmp_path / "hf")])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert f"skipping checkpoint {save / 'iter_0000004'}: " in out.out and "posix.system" in out.out
    assert (tmp_path / "hf" / "model.safetensors").exists() and not marker.exists()


# ---- studies: nothing in a study file or a step file runs as a command of the emitted SLURM scripts -------------

import yaml  # noqa: E402

STUDY = {"name": "edge", "sizes": ["tiny"], "seeds": [7],
         "pretrain": {"model": {"seq_length": 64},
                      "training": {"micro_batch_size": 8, "global_batch_size": 8, "lr_warmup_iters": 2,
                                   "lr_wsd_decay_iters": 2}},
         "grids": [{"budgets": [20], "clm_fractions": [0, 0.5]}]}
INJECTIONS = ["x\ntouch {m}", "x; touch {m}", "$(touch {m})", "`touch {m}`", "x' && touch {m} && '", "x\rtouch {m}"]


def plan_study(argv) -> int:
    return tool_main("plan_study")([str(a) for a in argv])


def write_study(tmp_path, changes: dict) -> Path:
    data = json.loads(json.dumps(STUDY))
    for key, value in changes.items():
        section, _, name = key.rpartition(".")
        (data.setdefault(section, {}) if section else data)[name] = value
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("key", ["slurm.partition", "slurm.account", "slurm.time", "slurm.eval_time", "slurm.extra",
                                 "root"])
@pytest.mark.parametrize("injection", INJECTIONS)
def test_a_study_value_that_would_become_a_command_is_refused_when_the_study_is_read(tmp_path, capsys, key,
                                                                                     injection):
    marker = tmp_path / "injected"
    value = injection.format(m=marker)
    study = write_study(tmp_path, {key: [f"--qos={value}"] if key == "slurm.extra" else value})
    before = digest(tmp_path)
    assert plan_study([study, "--root", tmp_path / "runs", "--emit", "slurm", tmp_path / "slurm"]
                      if key != "root" else [study, "--emit", "slurm", tmp_path / "slurm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert (f"{key}" if key != "root" else "root") in err
    assert not (tmp_path / "slurm").exists() and not marker.exists() and digest(tmp_path) == before


def test_a_root_flag_that_would_become_a_command_is_refused(tmp_path, capsys):
    study = write_study(tmp_path, {})
    assert plan_study([study, "--root", f"{tmp_path}/r\ntouch {tmp_path}/m", "--emit", "slurm",
                       tmp_path / "slurm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "logs folder" in err, err
    assert not (tmp_path / "slurm").exists()


STUB = """#!/bin/bash
# Records its arguments, NUL-separated, one call per file.
printf '%s\\0' "$0" "$@" > "$STUB_LOG/$(date +%s%N)-$RANDOM"
"""


def run_script(script: Path, tmp_path: Path, *args: str, **env) -> subprocess.CompletedProcess:
    """``bash script args`` with stub sbatch, squeue (an empty queue), srun, scontrol and python on PATH (each
    records its arguments)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    if not bin_dir.exists():
        bin_dir.mkdir()
        calls.mkdir()
        for name in ("sbatch", "squeue", "srun", "scontrol", "python", "python3"):
            (bin_dir / name).write_text(STUB)
            (bin_dir / name).chmod(0o755)
    return subprocess.run(["bash", str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(calls),
                               "WORKDIR": os.getcwd(), **env})  # where plan_study ran, as submit.sh passes it


def recorded_calls(tmp_path: Path) -> list[list[str]]:
    return [p.read_bytes().decode().split("\0")[:-1] for p in sorted((tmp_path / "calls").iterdir())]


def test_free_text_values_of_a_study_reach_the_commands_as_they_are_and_run_nothing(tmp_path, capsys):
    """Values the scripts pass on (data paths, tasks, folders) may hold anything: quoted, they arrive verbatim."""
    marker = tmp_path / "injected"
    values = [injection.format(m=marker) for injection in INJECTIONS]
    study = write_study(tmp_path, {
        "pretrain": {**STUDY["pretrain"], "data": {"data_path": values, "tokenizer_model": values[1]}},
        "evaluation": {"tasks": values[2:4], "lrs": [1e-3], "seeds": [0], "data_dir": values[0],
                       "hf_datasets_dir": values[4]}})
    assert plan_study([study, "--root", tmp_path / "runs", "--emit", "slurm", tmp_path / "slurm"]) == 0, \
        capsys.readouterr().err
    scripts = sorted((tmp_path / "slurm").iterdir())
    for script in scripts:
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, script.name
    for script in scripts:
        result = run_script(script, tmp_path, TARGET_STEP="10")
        assert not marker.exists(), (script.name, result.stdout, result.stderr)
    calls = recorded_calls(tmp_path)
    launches = [c for c in calls if Path(c[0]).name == "srun"]
    assert launches and all(c[c.index("--data-path") + 1:c.index("--data-path") + 1 + len(values)] == values
                            for c in launches)
    assert any(Path(c[0]).name == "python" and ",".join(values[2:4]) in c for c in calls)  # evaluate.py --tasks
    assert any(Path(c[0]).name == "sbatch" for c in calls)  # submit.sh ran against the stub


CRAFTED_STEPS = ["BASH_VERSINFO[$(touch {m})0]", "$(touch {m})", "1+a[$(touch {m})]", "9\ntouch {m}"]


@pytest.mark.parametrize("latest", CRAFTED_STEPS)
def test_a_crafted_step_file_is_read_as_text_and_runs_nothing(tmp_path, capsys, latest):
    marker = tmp_path / "injected"
    study = write_study(tmp_path, {})
    assert plan_study([study, "--root", tmp_path / "runs", "--emit", "slurm", tmp_path / "slurm"]) == 0
    save = tmp_path / "runs" / "tiny-clm10-mlm10-m40"
    save.mkdir(parents=True)
    (save / "latest_checkpointed_iteration.txt").write_text(latest.format(m=marker))
    result = run_script(tmp_path / "slurm" / "tiny-clm10-mlm10-m40.sbatch", tmp_path, TARGET_STEP="5",
                        SLURM_JOB_ID="42")
    assert not marker.exists(), result.stderr
    assert "reached before" not in result.stdout  # not a step number: the job trains (here: the stub srun)
    assert [c for c in recorded_calls(tmp_path) if Path(c[0]).name == "srun"]
    (save / "latest_checkpointed_iteration.txt").write_text("7")
    assert "step 5 reached before" in run_script(tmp_path / "slurm" / "tiny-clm10-mlm10-m40.sbatch", tmp_path,
                                                 TARGET_STEP="5").stdout
    result = run_script(tmp_path / "slurm" / "tiny-clm10-mlm10-m40.sbatch", tmp_path,
                        TARGET_STEP=latest.format(m=marker))
    assert result.returncode == 2 and "TARGET_STEP must be a step number" in result.stderr and not marker.exists()


@pytest.mark.parametrize("latest", CRAFTED_STEPS)
def test_the_requeue_wrapper_reads_a_crafted_step_file_as_text(tmp_path, latest):
    """examples/slurm/with_requeue.sh compares the steps before and after the run: digits only, else 0."""
    marker, save = tmp_path / "injected", tmp_path / "ckpt"
    save.mkdir()
    (save / "latest_checkpointed_iteration.txt").write_text(latest.format(m=marker))
    train = tmp_path / "train.sh"
    train.write_text(f"#!/bin/bash\nprintf %s {shlex.quote(latest.format(m=marker))} > "
                     f"{save}/latest_checkpointed_iteration.txt\n")
    train.chmod(0o755)
    result = run_script(REPO / "examples" / "slurm" / "with_requeue.sh", tmp_path, str(train), "--save", str(save),
                        SLURM_JOB_ID="42", TARGET_STEP=latest.format(m=marker))
    assert result.returncode == 0 and not marker.exists(), result.stderr
    assert not [c for c in recorded_calls(tmp_path) if Path(c[0]).name == "scontrol"]  # no progress: no requeue

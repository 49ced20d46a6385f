"""A recipe in phases as one run (issue 44): sequence length, RoPE base, data blend, mask ratio and the WSD decay
change by phase; every boundary is checkpointed and validated, the resolved phases are logged and recorded; a stop
inside each phase resumes bitwise to the same losses; the same recipe as three chained launches (each continuing
the last's boundary checkpoint) is bitwise the one run; a changed phase list on resume is refused in one line naming
the field, except a phase that has not started made longer (logged); a phase's missing data file is one line, exit
2, before any work."""

import json
import re
from pathlib import Path

import pytest
import yaml
from helpers import TINY_SHAPE, write_dataset
from step_recorder import run_as_written

from megamlm.data import IndexedDataset, prepare_embedded_corpus
from megamlm.errors import ResumeError
from megamlm.training.metrics_file import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

PHASES = [
    {"steps": 3, "seq_length": 32, "data_path": ["A"], "mask_ratio": 0.3},
    {"steps": 3, "seq_length": 64, "rope_theta": 80000.0, "data_path": ["0.5", "A", "0.5", "B"], "mask_ratio": 0.15,
     "lr_warmup_iters": 2},
    {"data_path": ["C"], "mask_ratio": 0.05, "lr_decay": True, "lr_wsd_decay_style": "minus_sqrt"},
]
RUN = ["--seq-length", "64", "--train-iters", "9", "--split", "969,30,1", "--eval-interval", "100", "--eval-iters", "1"]


@pytest.fixture(scope="module")
def blends(tmp_path_factory, cache_dir):
    """The bundled corpus's documents in three parts A, B, C (file order: the books one after another)."""
    prefix, _ = prepare_embedded_corpus(cache_dir)
    source = IndexedDataset(prefix)
    folder, third = tmp_path_factory.mktemp("blends"), len(source) // 3
    return {name: write_dataset(folder / name, (source[i] for i in range(k * third, (k + 1) * third)), source.dtype)
            for k, name in enumerate("ABC")}


def recipe_file(folder, blends, phases=PHASES):
    named = [{**p, "data_path": [blends.get(x, x) for x in p["data_path"]]} if "data_path" in p else p
             for p in phases]
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump({"phases": named}))
    return path


@pytest.fixture(scope="module")
def straight(tiny, blends, tmp_path_factory, module_one_thread):
    folder = tmp_path_factory.mktemp("recipe")
    return folder, tiny("--config", recipe_file(folder, blends), *RUN, "--save", folder / "ckpt")


def test_one_run_changes_length_rope_data_masks_and_decay_by_phase(straight, capsys):
    folder, run = straight
    assert sorted(run.losses) == list(range(1, 10))
    assert sorted(p.name for p in (folder / "ckpt").glob("iter_*")) == ["iter_0000003", "iter_0000006",
                                                                       "iter_0000009"]
    assert [r["step"] for r in read_metrics(folder / "ckpt", kind="validation")] == [3, 6, 9]
    record = json.loads((folder / "ckpt" / "run_record.json").read_text())
    assert [(p["first_step"], p["last_step"], p["seq_length"], p["mask_ratio"]) for p in record["recipe"]] == [
        (1, 3, 32, 0.3), (4, 6, 64, 0.15), (7, 9, 64, 0.05)]
    assert record["recipe"][1]["rope_bases"] == [80000.0, None]
    assert [p["tokens"] for p in record["recipe"]] == [384, 768, 768]
    checkpoint = json.loads((folder / "ckpt" / "iter_0000006" / "config.json").read_text())
    assert checkpoint["recipe"] == record["recipe"]
    # The decay phase is WSD's decay, 1-sqrt: peak through step 6, 0 at the last step.
    assert run.lrs[6] == run.lrs[5] > run.lrs[7] > run.lrs[8] > run.lrs[9] == 0.0
    assert run.lrs[4] == run.lrs[3] / 2  # phase 2 re-warms up over its first 2 steps
    assert run.sample_ids[4][0] == 3 * 4  # phase 2 starts at the stream's sample 12
    # Tokens seen beside steps: 4 samples a step of 32 tokens, then of 64.
    assert [(r["step"], r["tokens"]) for r in read_metrics(folder / "ckpt", kind="validation")] == [
        (3, 384), (6, 384 + 768), (9, 384 + 2 * 768)]
    assert read_metrics(folder / "ckpt", kind="train")[-1]["tokens"] == 1920


def test_a_checkpoint_exports_the_rope_base_of_the_phase_it_was_saved_in(straight):
    from megamlm.hf.megamlm_checkpoint import read_record

    folder, _ = straight
    assert read_record(folder / "ckpt" / "iter_0000003").model_args.rope_theta == 10000.0
    assert read_record(folder / "ckpt" / "iter_0000006").model_args.rope_theta == 80000.0


def test_a_stop_inside_each_phase_resumes_bitwise(straight, tiny, blends, tmp_path):
    _, run = straight
    config, save = recipe_file(tmp_path, blends), tmp_path / "ckpt"
    first = tiny("--config", config, *RUN, "--save", save, "--exit-interval", "2")
    second = tiny("--config", config, *RUN, "--save", save, "--exit-interval", "5")
    third = tiny("--config", config, *RUN, "--save", save, "--exit-interval", "8")
    last = tiny("--config", config, *RUN, "--save", save)
    assert (first.last_step, second.last_step, third.last_step, last.last_step) == (2, 5, 8, 9)
    resumed = {**first.losses, **second.losses, **third.losses, **last.losses}
    assert resumed == run.losses


def test_three_chained_launches_equal_the_one_run_bitwise(straight, tiny, blends, tmp_path):
    _, run = straight
    config = recipe_file(tmp_path, blends)
    one = tiny("--config", config, *RUN, "--save", tmp_path / "one", "--exit-interval", "3")
    two = tiny("--config", config, *RUN, "--save", tmp_path / "two", "--load", tmp_path / "one" / "iter_0000003",
               "--exit-interval", "6")
    three = tiny("--config", config, *RUN, "--save", tmp_path / "three", "--load", tmp_path / "two" / "iter_0000006")
    assert {**one.losses, **two.losses, **three.losses} == run.losses


def test_a_changed_phase_list_is_refused_on_resume_but_a_later_phase_may_grow(tiny, blends, tmp_path, capsys):
    save = tmp_path / "ckpt"
    tiny("--config", recipe_file(tmp_path, blends), *RUN, "--save", save, "--exit-interval", "5")
    in_progress = [PHASES[0], {**PHASES[1], "mask_ratio": 0.2}, PHASES[2]]
    with pytest.raises(ResumeError, match=r"phase 2\.mask_ratio is 0\.2 in this launch's recipe, but step 4 "
                                          r"\(the checkpoint is at step 5\) trained with 0\.15"):
        tiny("--config", recipe_file(tmp_path, blends, in_progress), *RUN, "--save", save)
    not_started = [PHASES[0], PHASES[1], {**PHASES[2], "mask_ratio": 0.1}]
    with pytest.raises(ResumeError, match=r"phase 3\.mask_ratio is 0\.05 in the checkpoint's recipe and 0\.1 in "
                                          r"this launch's \(the checkpoint is at step 5, inside phase 2\)"):
        tiny("--config", recipe_file(tmp_path, blends, not_started), *RUN, "--save", save)
    with pytest.raises(ResumeError, match=r"phase 2 starts at sample 24 of the stream in this launch's recipe and "
                                          r"at 12 in the checkpoint's: another global batch size"):
        tiny("--config", recipe_file(tmp_path, blends), *RUN, "--save", save, "--global-batch-size", "8")
    capsys.readouterr()
    longer = tiny("--config", recipe_file(tmp_path, blends), *RUN[:2], "--train-iters", "10", *RUN[4:],
                  "--save", save)
    assert longer.last_step == 10
    out = capsys.readouterr().out
    assert "phase 3 made longer: 4 steps, 7-10 (was 3)" in out
    assert re.search(r"step 10/10 \| objective mlm \| .* \| tokens 2,176 \|", out)  # 384 + 768 + 4 x 4 x 64
    # At a phase boundary the phases after it may differ: a branch (the decay phase of a WSD-branching ablation).
    branch = tiny("--config", recipe_file(tmp_path, blends, not_started), *RUN, "--load", save / "iter_0000006",
                  "--save", tmp_path / "branch")
    assert branch.start == "branch" and branch.last_step == 9
    assert "branch after step 6, a phase boundary" in capsys.readouterr().out


def test_a_phase_whose_data_file_is_missing_is_one_line_before_any_work(tmp_path, blends, capsys):
    from megamlm.cli import main

    missing = [PHASES[0], {**PHASES[1], "data_path": ["0.5", "A", "0.5", str(tmp_path / "nowhere")]}, PHASES[2]]
    code = main(["--config", str(recipe_file(tmp_path, blends, missing)), *RUN, "--save", str(tmp_path / "ckpt")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "nowhere" in err
    assert not (tmp_path / "ckpt").exists()


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recipes"


def test_the_tiny_three_phase_recipe_equals_three_chained_launches_bitwise(austen_books, tmp_path, monkeypatch):
    """examples/recipes/tiny_three_phase.yaml as written (its phases, blends, ramp-up and decay), at a smaller
    width so that the suite runs it in seconds."""
    monkeypatch.chdir(austen_books)  # the recipe names its data relative to where pretrain.py runs
    run = run_as_written
    shape = [*TINY_SHAPE, "--seq-length", "256", "--log-interval", "10"]
    config = ["--config", EXAMPLE / "tiny_three_phase.yaml", *shape]
    whole = run(*config, "--save", tmp_path / "whole")
    one = run(*config, "--save", tmp_path / "one", "--exit-interval", "20")
    two = run(*config, "--load", tmp_path / "one" / "iter_0000020", "--save", tmp_path / "two", "--exit-interval", "30")
    three = run(*config, "--load", tmp_path / "two" / "iter_0000030", "--save", tmp_path / "three")
    assert sorted(whole.losses) == list(range(1, 41))
    assert {**one.losses, **two.losses, **three.losses} == whole.losses
    assert [len(whole.sample_ids[s]) for s in (1, 11, 20, 21)] == [4, 8, 16, 16]  # the ramp-up in phase 1


@pytest.mark.parametrize("phases, argv, message", [
    ([{"steps": 3, "sequence_length": 32}, {}], [], "unknown key phase 1.sequence_length"),
    ([{"steps": 3}, {"valid_data_path": ["/nonexistent/valid"]}], [], "/nonexistent/valid"),
    ([{"steps": 3}, {"steps": 3}], [], "the phases' lengths add up to 6 steps, but the run is 9 steps"),
    ([{"steps": 3, "seq_length": 128}, {}], [], "phase 1.seq_length 128 is beyond the model's 64 positions"),
])
def test_a_bad_phase_is_one_line_and_exit_2_before_any_work(tmp_path, blends, capsys, phases, argv, message):
    from megamlm.cli import main

    code = main(["--config", str(recipe_file(tmp_path, blends, phases)), *RUN, "--save", str(tmp_path / "ckpt"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.slow
def test_the_tiny_three_phase_recipe_in_full(austen_books, tmp_path, monkeypatch):
    """examples/recipes/tiny_three_phase.yaml at the tiny preset's own width (5m47s on 2 busy cores, 2026-12-03):
    every boundary checkpointed, and the loss falls."""
    monkeypatch.chdir(austen_books)
    run = run_as_written("--config", EXAMPLE / "tiny_three_phase.yaml", "--save", tmp_path / "ckpt")
    assert sorted(run.losses) == list(range(1, 41))
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("iter_*")) == ["iter_0000020", "iter_0000030",
                                                                         "iter_0000040"]
    assert run.losses[40] < run.losses[1] - 1.0


def test_a_phase_sets_its_own_global_batch_and_resumes_inside_it_bitwise(tiny, blends, tmp_path):
    phases = [{"steps": 2, "seq_length": 32, "data_path": ["A"]},
              {"steps": 2, "seq_length": 64, "global_batch_size": 8}, {"data_path": ["B"]}]
    run = ["--config", recipe_file(tmp_path, blends, phases), "--seq-length", "64", "--train-iters", "6"]
    whole = tiny(*run, "--save", tmp_path / "whole")
    assert [len(whole.sample_ids[s]) for s in range(1, 7)] == [4, 4, 8, 8, 8, 8]  # the third inherits 8
    assert whole.sample_ids[3][0] == 8 and whole.sample_ids[5][0] == 24
    first = tiny(*run, "--save", tmp_path / "resumed", "--exit-interval", "3")
    rest = tiny(*run, "--save", tmp_path / "resumed")
    assert {**first.losses, **rest.losses} == whole.losses


def test_a_phase_validates_on_its_own_data_and_each_record_names_it(straight, tiny, blends, tmp_path):
    """The third phase validates on C's documents: the validations of phases 1-2 are the straight run's (the
    --split documents), phase 3's score C, the training is bitwise the straight run's, and a resume inside phase 3
    validates on C again."""
    folder, run = straight
    phases = [*PHASES[:2], {**PHASES[2], "valid_data_path": [blends["C"]]}]
    config, save = recipe_file(tmp_path, blends, phases), tmp_path / "ckpt"
    validated = tiny("--config", config, *RUN, "--save", save)
    assert validated.losses == run.losses  # validation never changes a step
    straight_records = read_metrics(folder / "ckpt", kind="validation")
    records = read_metrics(save, kind="validation")
    # Without run-level data, a phase's --split documents are its own data's (issue 55), each record naming it.
    own = [f"--split 969,30,1 of {blends['A']}", f"--split 969,30,1 of 0.5 {blends['A']} 0.5 {blends['B']}"]
    assert [r.get("validation_data") for r in records] == [*own, blends["C"]]
    assert [r["mlm_loss"] for r in records[:2]] == [r["mlm_loss"] for r in straight_records[:2]]
    assert records[2]["mlm_loss"] != straight_records[2]["mlm_loss"]
    resumed = tiny("--config", config, *RUN, "--load", save / "iter_0000006", "--save", tmp_path / "resumed")
    assert resumed.losses == {s: v for s, v in run.losses.items() if s > 6}
    assert read_metrics(tmp_path / "resumed", kind="validation")[-1] == records[2]

"""The study file: every mistake is one StudyError naming the key and the fix, before any plan is made."""

import pytest
from small_study import SMALL, write_study

from megamlm.study.planning.load import load_study
from megamlm.study.planning.scaling import scale_steps
from megamlm.study.planning.schema import StudyError, key_reference


def load(tmp_path, changes=None, overrides=()):
    return load_study(write_study(tmp_path, {**SMALL, **(changes or {})}), list(overrides))


@pytest.mark.parametrize("changes, message", [
    ({"sizes": ["2b"]}, "sizes: unknown model preset '2b'"),
    ({"grids": [{"budgets": [100], "clm_fractions": [0, 1.5]}]}, r"clm_fractions must lie in \[0, 1\]"),
    ({"grids": [{"budgets": [100], "clm_fractions": [0], "switch_steps": [10]}]}, "either clm_fractions or "
                                                                                  "switch_steps"),
    ({"grids": [{"budgets": [100, 100], "clm_fractions": [0]}]}, "budgets lists a value twice"),
    ({"grids": [{"budgets": [100], "clm_fractions": [0], "mask_ratio": [0.3]}]}, r"unknown key grids\[0\].mask_ratio"),
    ({"seeds": "1"}, "seeds must be a list"),
    ({"pretrain": {"training": {"train_iters": 10}}}, "pretrain.training.train_iters is set by the planner"),
    ({"pretrain": {"training": {"learning_rate": 1e-3}}}, "pretrain.training.learning_rate is not a pretrain.py "
                                                          "setting"),
    ({"pretrain": {"optimizer": {}}}, "pretrain.optimizer is not a pretrain.py config section"),
    ({"pretrain": {"config": "missing.yaml"}}, "pretrain.config"),
    ({"continued_pretraining": [{"parents": ["clm42k-m40"], "steps": [10]}]}, "no arm 'clm42k-m40' in the grids"),
    ({"evaluation": {"tasks": ["brown-pos"], "lrs": [-1.0]}}, "evaluation.lrs must be positive"),
    ({"evaluation": {"tasks": ["brown-pos"], "hyperparameters": {"lr": 1e-3}}}, "evaluation.hyperparameters.lr is not"),
    ({"name": "my study"}, "name 'my study' may only use"),
    ({"cost": {"benchmarks": ["nope.json"]}}, "cost.benchmarks: .*nope.json not found"),
    ({"evaluation": {"tasks": ["brown-pos"], "export_arch": "gemma3"}}, "evaluation.export_arch"),
    ({"evaluation": {"tasks": ["brown-pos"], "hyperparameters": {"batch_size": "big"}}},
     "evaluation.hyperparameters.batch_size must be a whole number"),
    ({"evaluation": {"tasks": ["brown-pos"], "lrs": [float("nan")]}}, "evaluation.lrs must be positive"),
    ({"cost": {"tokens_per_second": float("inf")}}, "cost.tokens_per_second must be positive"),
])
def test_mistakes_are_named(tmp_path, changes, message):
    with pytest.raises(StudyError, match=message):
        load(tmp_path, changes)


def test_a_missing_key_and_a_missing_file(tmp_path):
    data = {k: v for k, v in SMALL.items() if k != "grids"}
    with pytest.raises(StudyError, match="grids is missing"):
        load_study(write_study(tmp_path, data))
    with pytest.raises(StudyError, match="not found"):
        load_study(tmp_path / "none.yaml")


def test_overrides_replace_keys_before_the_checks(tmp_path):
    study = load(tmp_path, overrides=["seeds=[1, 2]", "evaluation.tasks=[brown-pos]"])
    assert study.seeds == [1, 2] and study.evaluation.tasks == ["brown-pos"]
    with pytest.raises(StudyError, match="write KEY=VALUE"):
        load(tmp_path, overrides=["seeds"])


def test_scale_multiplies_every_step_count(tmp_path):
    study = load(tmp_path, {"evaluation": {"tasks": ["brown-pos"], "checkpoint_steps": [50],
                                           "hyperparameters": {"max_steps": 40}}})
    study = scale_steps(study, 0.5)
    assert study.grids[0].budgets == [50, 30]
    assert study.continued_pretraining[0].steps == [20]
    assert study.continued_pretraining[0].parents == ["clm50-m40"]  # follows its parent's new name
    assert study.evaluation.checkpoint_steps == [25] and study.evaluation.hyperparameters.max_steps == 20
    assert study.pretrain["training"]["lr_warmup_iters"] == 5
    with pytest.raises(StudyError, match="--scale must be in"):
        scale_steps(study, 2)


def test_the_paper_studies_load(tmp_path):
    for size in ("210m", "610m", "1b"):
        study = load_study(f"examples/studies/paper_{size}.yaml")
        assert study.sizes == [size] and [12000, 22000, 42000] in [g.budgets for g in study.grids]


def test_key_reference_documents_every_key():
    text = key_reference()
    for key in ("`grids[].clm_fractions`", "`continued_pretraining[].parents`", "`evaluation.checkpoint_steps`",
                "`slurm.gpus_per_node`", "`cost.tokens_per_second`"):
        assert key in text
    assert "| `source` |" not in text


def test_each_encoder_export_of_the_converter_is_a_study_export(tmp_path):
    """A study continued from Gemma 3 exports its encoders as the native bidirectional Gemma 3."""
    from typing import get_args

    from megamlm.hf.keymaps import EXPORT_ARCHS
    from megamlm.study.planning.schema import ExportArch

    assert set(get_args(ExportArch)) <= set(EXPORT_ARCHS)
    study = load(tmp_path, {"evaluation": {"tasks": ["brown-pos"], "export_arch": "gemma3_encoder"}})
    assert study.evaluation.export_arch == "gemma3_encoder"


def test_a_loaded_study_is_frozen_and_scaling_makes_a_new_one(tmp_path):
    import dataclasses

    from megamlm.eval.finetune import Hyperparameters

    study = load(tmp_path, {"evaluation": {"tasks": ["brown-pos"], "hyperparameters": {"max_steps": 40}}})
    assert isinstance(study.evaluation.hyperparameters, Hyperparameters)  # eval's own settings, typed
    with pytest.raises(dataclasses.FrozenInstanceError):
        study.seeds = [9]
    with pytest.raises(dataclasses.FrozenInstanceError):
        study.grids[0].budgets = [1]
    smaller = scale_steps(study, 0.5)
    assert smaller.scale == 0.5 and smaller.is_rehearsal and not study.is_rehearsal
    assert study.grids[0].budgets == [100, 60] and study.evaluation.hyperparameters.max_steps == 40

"""The phase settings a resume compares and the study planner shares prefixes by come from the roles declared
beside the phase fields (config/phase_fields.py), as the run-level ones do (issue 55 item 5): a phase field added
with a role, and no other edit, makes the resume and the planner react as that role says."""

from __future__ import annotations

import dataclasses

import pytest

from megamlm.config import parse_args, resolve
from megamlm.config import phase_fields as declarations
from megamlm.config.phases import compared_phase_fields, recipe_of
from megamlm.errors import ResumeError
from megamlm.study.planning.prefixes import shared_steps, step_settings
from megamlm.training.resume import phase_rows, recipe_start

BASE = parse_args(["--num-layers", "1", "--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads",
                   "2", "--num-query-groups", "2", "--seq-length", "64", "--micro-batch-size", "4",
                   "--global-batch-size", "8", "--train-iters", "8"])


@pytest.fixture
def declared(monkeypatch):
    """A new phase field, ``temperature``, declared with the given role: the one edit."""
    def declare(role: str) -> type:
        table = (*declarations._PHASE_FIELDS,
                 ("temperature", float, role, "carried", None, "A setting a future phase may carry."))
        cls = declarations.phase_section(table)
        monkeypatch.setattr(declarations, "PhaseConfig", cls)
        return cls
    return declare


def with_phases(cls: type, *phases: dict):
    return resolve(dataclasses.replace(BASE, recipe=dataclasses.replace(
        BASE.recipe, phases=[cls(**phase) for phase in phases])))


@pytest.mark.parametrize("role,reacts", [("masking", True), ("stream", True), ("batch", True),
                                         ("evaluation", False), ("output", False)])
def test_a_declared_phase_field_is_compared_by_its_role_on_resume_and_by_the_planner(declared, role, reacts):
    cls = declared(role)
    assert ("temperature" in compared_phase_fields()) == reacts
    assert (("temperature", role) in phase_rows()) == reacts  # a row of the resume's table, with its role
    parent = with_phases(cls, {"steps": 4}, {"steps": 2}, {})
    child = with_phases(cls, {"steps": 4}, {"steps": 2}, {"temperature": 0.5})
    old, new = recipe_of(parent).to_list(), recipe_of(child).to_list()
    assert new[2]["temperature"] == 0.5 and new[1]["temperature"] is None  # resolved and recorded, inherited
    shared = shared_steps(step_settings(parent), step_settings(child))
    if not reacts:
        assert recipe_start(old, new, 5) == ([], False) and shared == 8
        return
    with pytest.raises(ResumeError, match=r"phase 3\.temperature is None in the checkpoint's recipe and 0\.5"):
        recipe_start(old, new, 5)  # inside the second phase: the third must stay as it was
    assert recipe_start(old, new, 6).branch  # at the phase boundary: a branch
    assert shared == 6  # the planner shares exactly the steps before the changed phase


def test_the_declared_roles_are_the_compared_settings():
    assert compared_phase_fields() == ("data_path", "seq_length", "sample_mode", "rope_theta", "local_rope_theta",
                                       "mask_ratio", "mask_replace_prob", "mask_random_prob", "mask_keep_prob",
                                       "global_batch_size")
    assert [role for _, role in phase_rows()] == ["stream"] * 3 + ["shape"] * 2 + ["masking"] * 4 + ["batch"]

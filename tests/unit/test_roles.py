"""Every setting declares its role once, beside its declaration (megamlm/config/roles.py)."""

import dataclasses

import pytest

from megamlm.config.roles import ROLES, fields_with, setting
from megamlm.config.sections import SECTION_CLASSES


def test_every_config_field_declares_a_known_role():
    missing = [f"{section}.{f.name}" for section, cls in SECTION_CLASSES.items() for f in dataclasses.fields(cls)
               if f.metadata.get("role") not in ROLES]
    assert not missing, f"declare a role with setting(default, role) for: {missing}"


def test_a_field_without_a_known_role_cannot_be_declared():
    with pytest.raises(ValueError, match="role 'sample' is not one of shape, stream"):
        setting(1, "sample")


def test_roles_select_fields_by_role_and_by_resume_rule():
    assert ("training", "seed") in fields_with(SECTION_CLASSES, "refuse")
    assert ("objective", "mask_ratio") in fields_with(SECTION_CLASSES, "masking")
    optimizer = fields_with(SECTION_CLASSES, "optimizer")
    assert [name for _, name in optimizer] == ["optimizer", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps",
                                              "clip_grad"]
    assert not set(fields_with(SECTION_CLASSES, "ignore")) & set(fields_with(SECTION_CLASSES, "refuse", "history"))

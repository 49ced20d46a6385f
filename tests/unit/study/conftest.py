import sys
from pathlib import Path

import pytest

from megamlm.study.planning.load import load_study
from megamlm.study.planning.plan import build_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))  # small_study, the tests' shared study

from small_study import SMALL, write_study  # noqa: E402


@pytest.fixture
def small_study(tmp_path):
    def make(changes: dict | None = None, overrides=(), scale=None):
        data = {**SMALL, **(changes or {})}
        return load_study(write_study(tmp_path, data), list(overrides), scale)
    return make


@pytest.fixture
def small_plan(small_study, tmp_path):
    def make(changes: dict | None = None, overrides=(), scale=None):
        return build_plan(small_study(changes, overrides, scale), str(tmp_path / "runs"))
    return make

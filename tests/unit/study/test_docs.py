"""examples/studies/README.md prints the plan of paper_610m.yaml and the study keys; both are regenerated here and
compared, so the document cannot drift from the code."""

import contextlib
import io
import re
import runpy
from pathlib import Path

from megamlm.study.schema import key_reference

REPO = Path(__file__).resolve().parents[3]
README = REPO / "examples" / "studies" / "README.md"
REGENERATE = "rerun the command named above the block and paste its output between the markers"


def block(name: str) -> str:
    match = re.search(rf"<!-- BEGIN {re.escape(name)} -->\n(.*?)\n<!-- END {re.escape(name)} -->", README.read_text(),
                      re.S)
    assert match, f"no {name} block in {README}"
    return match.group(1)


def test_the_printed_plan_is_the_planners_output(monkeypatch):
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module = runpy.run_path(str(REPO / "tools" / "plan_study.py"), run_name="plan_study")
        assert module["main"](["examples/studies/paper_610m.yaml"]) == 0
    assert block("plan_study paper_610m") == out.getvalue().rstrip(), REGENERATE
    assert "| saved | 174,000 | 410.5B | 1,201.2 (30%) |" in out.getvalue()


def test_the_key_reference_is_the_schemas():
    assert block("study keys") == key_reference().rstrip(), REGENERATE

"""A paper's claims as data: a table (YAML, named by a study file's ``claims`` key) of what the report compares
for each claim, the paper's own setting, and what in a study's setting could explain a departure. The report
answers the claims a table states (``study.claims``), so a study of another paper states its own; the table of
arXiv 2507.00994 is examples/studies/claims/clm_mlm_2507.00994.yaml, whose header documents the keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from megamlm.config import ConfigError, read_yaml, yaml_problem
from megamlm.config.loader import typed_dataclass
from megamlm.study.planning.schema import StudyError

ArmKind = Literal["mlm", "clm", "clm_then_mlm"]
Comparison = Literal["final", "early", "continuation", "stability"]
KIND_NAMES = {"mlm": "MLM", "clm": "CLM", "clm_then_mlm": "CLM-then-MLM"}


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    """The claim's short name in the report: (a), (b), ..."""
    statement: str
    """The claim as the paper makes it."""
    compare: Comparison
    """final, early, continuation or stability (the table file's header says what each compares)."""
    a: ArmKind
    """The kind of arm the paper finds ahead (its direction: a difference > 0)."""
    b: ArmKind
    """The kind of arm it is compared with."""
    setting: str
    """What in a study's setting could explain a departure: a format string of the study's and the paper's facts."""
    objective: ArmKind = "mlm"
    """continuation: the objective of the compared continuations."""
    matches: bool = False
    """A claim of "matches or beats": decided by a non-inferiority test against ``margin``, never by a difference
    that is not significant."""
    margin: float = 0.0
    """matches: how many score points worse the claimed arm may be and still "match" (> 0; e.g. 1.0); the test's
    null is that it is worse by exactly this much. Only with ``matches: true``."""
    validation_facts: bool = False
    """The setting also cites the compared MLM-trained arms' final validation MLM accuracy and loss."""


@dataclass(frozen=True)
class ClaimsTable:
    paper: str
    """The paper, as the report names it (e.g. arXiv 2507.00994)."""
    claims: list[ClaimSpec]
    """Its claims, in the report's order."""
    facts: dict = field(default_factory=dict)
    """The paper's setting, named {paper_KEY} in the claims' settings."""


def load_claims(path: Path) -> ClaimsTable:
    """A claims table file; a StudyError naming the key and the fix otherwise."""
    if not path.is_file():
        raise StudyError(f"claims: {path} not found; give a claims table (e.g. "
                         "examples/studies/claims/clm_mlm_2507.00994.yaml), relative to the study file")
    try:
        table = typed_dataclass("", ClaimsTable, read_yaml(path.read_text(encoding="utf-8")))
    except (ConfigError, UnicodeDecodeError) as err:
        raise StudyError(f"claims table {path}: {err}") from None
    except yaml.YAMLError as err:
        raise StudyError(f"claims table {path} is not valid YAML{yaml_problem(err)}") from None
    keys = [claim.key for claim in table.claims]
    if len(set(keys)) != len(keys):
        raise StudyError(f"claims table {path} names a claim twice: {keys}; give each its own key")
    for claim in table.claims:
        for name, value, choices in (("compare", claim.compare, Comparison), ("a", claim.a, ArmKind),
                                     ("b", claim.b, ArmKind), ("objective", claim.objective, ArmKind)):
            if value not in choices.__args__:
                raise StudyError(f"claims table {path}: claim {claim.key}'s {name} is {value!r}; choose one of "
                                 f"{', '.join(choices.__args__)}")
        if claim.matches and not claim.margin > 0:
            raise StudyError(f"claims table {path}: claim {claim.key} is a claim of \"matches or beats\" without a "
                             "margin; give `margin:` (score points, > 0, e.g. 1.0) for its non-inferiority test")
        if claim.margin and not claim.matches:
            raise StudyError(f"claims table {path}: claim {claim.key} gives a margin ({claim.margin:g}) but is not a "
                             "claim of \"matches or beats\"; add `matches: true` or remove the margin")
    return table

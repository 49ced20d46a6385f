"""Finds the optional C++ index helper (`megamlm.data._helpers`, built by setup.py from csrc/)."""

from __future__ import annotations

import importlib

_cached: list = []


def load():
    """The compiled helper module, or None when it was not built (numpy is used instead)."""
    if not _cached:
        try:
            _cached.append(importlib.import_module("megamlm.data._helpers"))
        except ImportError:
            _cached.append(None)
    return _cached[0]

"""Finds the optional C++ index helper (`megamlm.data._helpers`, built by setup.py from csrc/)."""

from __future__ import annotations

import importlib

from megamlm.data.indexed import DataError

_cached: list = []


def load():
    """The compiled helper module, or None when it was not built (numpy is used instead)."""
    if not _cached:
        try:
            _cached.append(importlib.import_module("megamlm.data._helpers"))
        except ImportError:
            _cached.append(None)
    return _cached[0]


def helpers_for(use_cpp: bool | None):
    """The helper module to use: None for numpy (``use_cpp=False``, or not built); a DataError when
    ``use_cpp=True`` asks for it and it is not built."""
    if use_cpp is False:
        return None
    helpers = load()
    if helpers is None and use_cpp:
        raise DataError("the C++ index helper is not built; run `pip install -e .` (needs a C++ compiler) or drop "
                        "use_cpp")
    return helpers

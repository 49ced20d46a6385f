"""Run a program as if some optional packages were never installed:

    python tests/hide_extras.py gguf,pyarrow tools/convert_from_hf.py --input m.gguf --output out
    python tests/hide_extras.py all pretrain.py --dry-run        # every package of megamlm.extras.EXTRAS

A meta-path hook, first on ``sys.meta_path``, answers every hidden package and its submodules with a
spec whose loader raises ``ModuleNotFoundError``; the hidden names are also set to None in ``sys.modules``, so
``importlib.util.find_spec`` returns None for them (as for a package never installed: transformers and
megamlm.extras look packages up that way) and ``import name`` raises ``ModuleNotFoundError``. The program then
runs as ``__main__`` with its own arguments.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import runpy
import sys
from pathlib import Path


class _Hidden(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r} (hidden by tests/hide_extras.py)", name=spec.name)

    def exec_module(self, module):  # never reached: create_module raises
        raise ModuleNotFoundError(module.__name__)


def hide(names: set[str]) -> None:
    """Hide ``names`` (top-level import names) from every later import in this process."""
    sys.meta_path.insert(0, _Hidden(names))
    for name in names:
        sys.modules[name] = None  # find_spec -> None, import -> ModuleNotFoundError


def hidden_names(which: str) -> set[str]:
    """``all`` (every package of megamlm.extras.EXTRAS) or a comma-separated list, as top-level import names."""
    if which == "all":
        from megamlm.extras import EXTRAS

        return set(EXTRAS)
    return set(filter(None, which.split(",")))


def main() -> None:
    which, script, *args = sys.argv[1:]
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    hide(hidden_names(which))
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).resolve().parent)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()

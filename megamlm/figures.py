"""Figure set-up and saving, once for every figure megamlm draws (run overlays, evaluation and study reports).

matplotlib is a core dependency; it is imported inside these functions, on the non-interactive Agg backend, so
importing this module costs nothing. ``save`` writes a temporary file beside the
target and renames it over the target, so a reader never sees half a PNG, and closes the figure.
"""

from __future__ import annotations

import os
from pathlib import Path

DPI = 120
"""Resolution of every saved figure."""
MISSING = "plotting needs matplotlib, a dependency of megamlm, which does not import here; reinstall it (pip install -e .)"
"""The message for a figure asked for where matplotlib is broken or was removed."""
_available: list[bool] = []


def available() -> bool:
    """True when matplotlib imports (checked once per process)."""
    if not _available:
        try:
            import matplotlib  # noqa: F401

            _available.append(True)
        except Exception:  # a broken install counts as absent
            _available.append(False)
    return _available[0]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only, no display); ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(*grid: int, **options):
    """A new ``(figure, axes)``: ``plt.subplots(*grid, **options)`` on the Agg backend."""
    return pyplot().subplots(*grid, **options)


def colors() -> list[str]:
    """The colors of the current style's cycle, in order."""
    return pyplot().rcParams["axes.prop_cycle"].by_key()["color"]


def engineering_formatter():
    """An axis formatter for large counts: 250k, 1.5M, 2G."""
    from matplotlib.ticker import EngFormatter

    return EngFormatter(sep="")


def close(fig) -> None:
    """Release a figure that is not saved."""
    pyplot().close(fig)


def save(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (its folder made if needed) atomically: to a temporary name beside it, then renamed
    over it; the figure is closed whether or not writing succeeded. Returns the path."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp.png")
        fig.savefig(tmp, dpi=DPI, bbox_inches="tight")
        os.replace(tmp, path)
        return path
    finally:
        close(fig)

"""One JSON file per fine-tuning run, written atomically: a file present is a finished run.

Layout: <output>/runs/<model>/<task>/lr<lr>_seed<seed>.json. A run that crashes writes nothing
there (its traceback goes to the same name with .error.txt, which is never counted as finished). Beside each
result, <same name>.predictions.json keeps its per-example predictions and scores on validation and test (written
before the result, so a finished run has them; ``eval/paired.py`` compares two models on them).
Every file records a fingerprint of the settings that are not searched over, so a rerun with other
settings into the same folder is refused instead of mixing results.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunKey:
    model: str
    task: str
    lr: float
    seed: int

    def relative_path(self) -> Path:
        return Path("runs") / self.model / self.task / f"lr{self.lr:g}_seed{self.seed}.json"

    def predictions_path(self) -> Path:
        """Its per-example predictions, beside the result."""
        return self.relative_path().with_suffix(".predictions.json")


def write_json_atomic(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def fingerprint(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def read_result(path: Path) -> dict | None:
    """The result of a finished run, or None when there is none (or the file is not a whole result)."""
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    return result if result.get("status") == "finished" else None

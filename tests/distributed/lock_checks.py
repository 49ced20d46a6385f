"""Rank functions for test_save_lock.py (spawned ranks import them by module name)."""

from __future__ import annotations

import json
from pathlib import Path


def every_rank_learns_the_lock_outcome(rank: int, world_size: int, save_dir: str, out_dir: str) -> None:
    from megamlm.checkpoint.lock import SaveFolderInUse, lock_save_folder

    outcome = {"rank": rank}
    try:
        with lock_save_folder(save_dir):
            outcome["held"] = True
    except SaveFolderInUse as err:
        outcome["error"] = str(err)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(outcome))

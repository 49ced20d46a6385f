"""Reading a checkpoint of a save folder that a live run may be pruning (``--keep-last``).

The reader holds a read lease on the folder it reads (``leases``), and retirement leaves leased folders for a
later save. Retirement checks for leases, then renames a folder away before deleting it
(``catalog.remove_folder``); a lease taken between the two finds the folder gone. And a checkpoint's files never
change once committed, so a reader that finds its folder gone part-way has read nothing wrong, only too little:
it resolves the save folder again and reads the newest whole checkpoint from the start. Every successful read
comes from one folder, read while it was still in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, TypeVar

from torch.distributed.checkpoint.api import CheckpointException

from megamlm.checkpoint.catalog import list_checkpoints, step_of
from megamlm.checkpoint.checkpointer import CheckpointError, resolve_checkpoint
from megamlm.checkpoint.leases import read_lease
from megamlm.log import log

T = TypeVar("T")
ATTEMPTS = 5


def read_newest(path: str | Path, read: Callable[[Path], T], attempts: int = ATTEMPTS) -> T:
    """``read(folder)`` for the checkpoint ``path`` resolves to, again for the newest one if that folder is retired
    while it is read. An explicitly named iter_NNNNNNN folder that disappears is a CheckpointError."""
    explicit = step_of(Path(path)) is not None
    for _ in range(attempts):
        before = list_checkpoints(path)
        try:
            folder = resolve_checkpoint(path)
        except CheckpointError:
            if explicit or list_checkpoints(path) == before:
                raise
            continue  # the folder changed while it was checked: look again
        try:
            with read_lease(folder):
                return read(folder)
        except (Exception, CheckpointException):  # DCP's CheckpointException is a BaseException
            if folder.exists():
                raise  # a problem of the checkpoint itself, not of its retirement
            if explicit:
                raise CheckpointError(f"checkpoint {folder} was deleted while it was read (the run that wrote it "
                                      f"keeps only its newest checkpoints, --keep-last); pass its save folder "
                                      f"{folder.parent} to read the newest one") from None
            log(f"checkpoint {folder} was retired (--keep-last) while it was read; reading the newest one instead")
    raise CheckpointError(f"the checkpoints of {path} were retired faster than one could be read ({attempts} "
                          "attempts); read it while the run is stopped, or raise its --keep-last")

"""The checkpoint manager: what a checkpoint holds and when one is written.

Everything resumable registers under a name and has ``state_dict``/``load_state_dict``; the manager collects
them into the checkpoint's train state, next to the model and optimizer shards (DCP) and each rank's RNG
states. It decides when to save: every ``interval`` steps, at pinned steps (the objective switch, branch
points) whose checkpoints retention never deletes, at the last step, and on request (a signal, an early
exit). Folder names belong to ``megamlm.checkpoint.catalog``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from megamlm.checkpoint.checkpointer import load_checkpoint, save_checkpoint
from megamlm.log import log


class Stateful(Protocol):
    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass(frozen=True)
class SavePolicy:
    """Where checkpoints go and when: every ``interval`` steps, at the ``pinned`` steps and the last step."""

    save_dir: str | None
    """--save (None: nothing is saved)."""
    last_step: int
    interval: int | None = None
    keep_last: int | None = None
    """--keep-last: the checkpoints retention keeps (pinned ones aside); None keeps every one."""
    pinned: dict[int, str] = field(default_factory=dict)
    """step -> why its checkpoint must survive ``--keep-last``."""


class CheckpointManager:
    def __init__(self, policy: SavePolicy, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 stateful: dict[str, Stateful], record: dict):
        self.save_dir = Path(policy.save_dir) if policy.save_dir else None
        self.model, self.optimizer, self.stateful, self.record = model, optimizer, stateful, record
        self.last_step, self.interval, self.keep_last = policy.last_step, policy.interval, policy.keep_last
        self.pinned = dict(policy.pinned)
        self.last_saved: Path | None = None
        self._last_saved_step: int | None = None

    def due(self, step: int) -> bool:
        """Whether the schedule asks for a checkpoint after ``step`` (always False without --save)."""
        if self.save_dir is None:
            return False
        return step in self.pinned or step == self.last_step or bool(self.interval and step % self.interval == 0)

    def train_state(self) -> dict:
        return {name: obj.state_dict() for name, obj in self.stateful.items()}

    def save(self, step: int) -> Path | None:
        """Write the checkpoint of ``step`` on every rank (once per step); None without --save."""
        if self.save_dir is None:
            return None
        if self._last_saved_step == step:
            return self.last_saved
        self.last_saved = save_checkpoint(self.save_dir, step, self.model, self.optimizer,
                                          {"state": self.train_state()}, self.record, keep_last=self.keep_last,
                                          pinned=self.pinned.get(step))
        self._last_saved_step = step
        log(f"saved checkpoint {self.last_saved}")
        return self.last_saved

    def restore(self, path: Path, train_state: dict, skip: tuple[str, ...] = ()) -> None:
        """Load model, optimizer and RNG from ``path`` and every registered object's state from ``train_state``
        (except the names in ``skip``, which keep this launch's settings)."""
        load_checkpoint(path, self.model, self.optimizer)
        saved = train_state["state"]
        for name, obj in self.stateful.items():
            if name not in skip:
                obj.load_state_dict(saved[name])

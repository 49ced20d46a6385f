"""Non-finite steps: the skipped-step streak, and the error that stops a run which keeps producing them.

``train_step`` (training/step.py) skips a single step whose global loss or global pre-clip gradient norm is not
finite. A run that skips ``--max-skipped-steps`` steps in a row stops with a ``NonFiniteError`` naming the steps
and samples involved.

The streak has one source of truth, the ``NonFiniteGuard``'s ``in_a_row``: the host's record of the skipped steps
in a row, with what the error message reports about each (loss, norm, samples), saved in every checkpoint (the
"guard" state) so that a resume in the middle of a streak keeps counting. When the host reads the step numbers only
at log lines (training/reporter.py, the GPU path), a device copy of the count is needed *between* two host reads,
so that once the streak is complete every later update is held back and the run still stops at its last good
state: training/step.py's ``SkipStreak``, a mirror seeded from the guard when the loop starts, not a second counter.
"""

from __future__ import annotations

import torch.distributed as dist


class NonFiniteError(RuntimeError):
    """Too many optimizer steps in a row had a non-finite loss or gradient norm."""


class NonFiniteGuard:
    """Counts skipped steps; ``record`` says when ``max_in_a_row`` of them came in a row."""

    def __init__(self, max_in_a_row: int, group=None):
        self.max_in_a_row = max_in_a_row
        self.group = group
        self.in_a_row: list[dict] = []
        """The current streak (the one source of truth, see the module docstring): {"step", "loss", "grad_norm",
        "sample_ids" (this rank's)} per skipped step."""
        self.total_skipped = 0

    def record(self, step: int, applied: bool, loss: float, grad_norm: float, sample_ids: list[int]) -> bool:
        """Note one step; True when the run must stop."""
        if applied:
            self.in_a_row.clear()
            return False
        self.in_a_row.append({"step": step, "loss": loss, "grad_norm": grad_norm, "sample_ids": list(sample_ids)})
        self.total_skipped += 1
        return len(self.in_a_row) >= self.max_in_a_row

    @property
    def last_good_step(self) -> int | None:
        return self.in_a_row[0]["step"] - 1 if self.in_a_row else None

    def state_dict(self) -> dict:
        # JSON has no NaN/inf literal that every reader accepts: keep them as strings.
        return {"in_a_row": [{**s, "loss": repr(s["loss"]), "grad_norm": repr(s["grad_norm"])}
                             for s in self.in_a_row], "total_skipped": self.total_skipped}

    def load_state_dict(self, state: dict) -> None:
        self.in_a_row = [{**s, "loss": float(s["loss"]), "grad_norm": float(s["grad_norm"])}
                         for s in state["in_a_row"]]
        self.total_skipped = int(state["total_skipped"])

    def _all_sample_ids(self, sample_ids: list[int]) -> list[int]:
        """The step's samples on every rank (each data-parallel rank sees only its own)."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(self.group) == 1:
            return sample_ids
        gathered: list = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(gathered, sample_ids, group=self.group)
        return sorted({k for ids in gathered for k in ids})

    def error(self, saved: str) -> NonFiniteError:
        steps = "; ".join(f"step {s['step']}: loss {s['loss']}, grad-norm {s['grad_norm']}, "
                          f"samples {_format_ids(self._all_sample_ids(s['sample_ids']))}" for s in self.in_a_row)
        return NonFiniteError(
            f"{len(self.in_a_row)} steps in a row had a non-finite loss or gradient norm (--max-skipped-steps "
            f"{self.max_in_a_row}), so none of their updates was applied: {steps}. {saved} Check these samples "
            "and consider a lower --lr or --clip-grad before relaunching")


def _format_ids(ids: list[int]) -> str:
    """[0-3, 8, 10-11]: runs of consecutive ids collapsed (a global batch is one run of sample indices)."""
    runs: list[list[int]] = []
    for k in sorted(ids):
        if runs and k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    return "[" + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) + "]"

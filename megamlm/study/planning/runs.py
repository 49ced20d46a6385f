"""One pretraining run of a plan: its arm (objective phases, budget, switch steps, mask ratio), its settings and
validated config, and where it starts (scratch, a parent's checkpoint at a branch step, or a continued parent)."""

from __future__ import annotations

from dataclasses import dataclass, field

from megamlm.config import Config, batch_start, objective_stages
from megamlm.model.config import PRESETS


@dataclass
class Run:
    """One pretraining run of the plan."""

    name: str
    label: str
    """The name without size and seed (how study files refer to an arm)."""
    size: str
    seed: int
    objective: str
    """pretrain.py --objective: a named objective (mlm, clm, clm_then_mlm, ...) or phases joined by commas."""
    train_iters: int
    switch_steps: tuple[int, ...]
    """The last step of each phase but the last (empty for one phase)."""
    mask_ratio: float
    settings: dict
    """pretrain.py settings as config sections, without the planner's checkpoint flags."""
    config: Config
    continues: str | None = None
    """The run this one continues (continued pretraining), else None."""
    parent: str | None = None
    """The run whose checkpoint this one starts from: a branch (--load PARENT/iter_k) or a continuation."""
    branch_step: int = 0
    """Step of the parent's checkpoint a branch starts from; 0 for a run that starts at step 0."""
    save_at: list[int] = field(default_factory=list)
    """Steps whose checkpoints survive --keep-last: its children's branch points and evaluated checkpoints."""
    children: list[str] = field(default_factory=list)
    reproduces_paper: bool = False
    """A model the paper trained (its grid or continuation is marked ``reproduces_paper``)."""

    @property
    def is_continuation(self) -> bool:
        return self.continues is not None

    def origin(self, scratch: str, branch: str, continued: str) -> str:
        """Where this run starts, in a caller's words: ``scratch`` (from step 0), ``branch`` (a parent's checkpoint
        at ``branch_step``) or ``continued`` (a finished parent), the last two formatted with ``{parent}`` and
        ``{step}``."""
        if self.parent is None:
            return scratch
        return (branch if self.branch_step else continued).format(parent=self.parent, step=self.branch_step)

    @property
    def phases(self) -> tuple[str, ...]:
        """The objective of each phase, in order (``("clm", "mlm")`` for clm_then_mlm)."""
        return objective_stages(self.objective)

    @property
    def switch_step(self) -> int | None:
        """The first switch step (the switch of a two-stage run); None for one stage."""
        return self.switch_steps[0] if self.switch_steps else None

    def phase_spans(self) -> list[tuple[str, int, int]]:
        """(objective, first step, last step) of each phase."""
        bounds = (0, *self.switch_steps, self.train_iters)
        return [(phase, bounds[k] + 1, bounds[k + 1]) for k, phase in enumerate(self.phases)]

    @property
    def steps_trained(self) -> int:
        """Steps this run trains itself (the rest are its parent's)."""
        return self.train_iters - self.branch_step

    @property
    def tokens_per_step(self) -> int:
        seq_length = self.config.model.seq_length or PRESETS[self.size]["max_seq_length"]
        return self.global_batch_size * seq_length

    @property
    def global_batch_size(self) -> int:
        """The study's global batch, else the one a launch starts from: the preset's recipe (config/batches.py;
        a launch keeps it unless its data-parallel ranks need more)."""
        given = self.config.training.global_batch_size
        return given if given is not None else batch_start(self.size)[1]

    def objective_steps(self, independent: bool = False) -> dict[str, int]:
        """Steps this run trains itself per objective (``independent``: all its steps, as if nothing were shared)."""
        first = 0 if independent else self.branch_step
        counts: dict[str, int] = {}
        for phase, start, end in self.phase_spans():
            counts[phase] = counts.get(phase, 0) + max(0, end - max(first, start - 1))
        return {k: v for k, v in counts.items() if v}


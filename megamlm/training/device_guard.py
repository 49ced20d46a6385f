"""The optimizer update with the non-finite guard decided on the device: no host synchronisation per step.

``train_step`` (training/step.py) reads the loss and the gradient norm on the host to decide whether to apply
the update, which makes the host wait for the GPU on every step. Here the decision stays a tensor: torch's
fused AdamW takes a ``found_inf`` flag (the mechanism ``torch.amp.GradScaler`` uses) and, when it is set,
leaves every parameter, both moments and the step count exactly as they were, on every rank alike since the
loss and the norm it is computed from are global. The host reads ``applied``, the loss and the norm only when
it logs; the values are the same as the synchronous path's.
"""

from __future__ import annotations

import torch

from megamlm.parallel.forward_backward import clip_gradients_
from megamlm.parallel.parallelize import ParallelModel


def nonfinite_flag(loss: torch.Tensor, grad_norm: torch.Tensor) -> torch.Tensor:
    """1.0 where the global loss or the global pre-clip gradient norm is not finite, else 0.0 (fp32, 0-d)."""
    return (~(torch.isfinite(loss) & torch.isfinite(grad_norm))).to(torch.float32)


def guarded_update(pm: ParallelModel, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                   grad_norm: torch.Tensor, lr: float, clip_grad: float,
                   hold: torch.Tensor | None = None) -> torch.Tensor:
    """Clip and apply one AdamW update unless ``loss`` or ``grad_norm`` is not finite, deciding on the device.

    ``loss`` and ``grad_norm`` are the step's global values as 0-d tensors (nothing is read from them here).
    Returns ``applied``, a 0-d bool tensor on the device. Gradients are dropped either way. ``optimizer`` must be
    torch's fused AdamW, the one whose kernel honours ``found_inf``. A true ``hold`` (0-d bool) skips the update
    whatever the numbers (see ``SkipStreak``).
    """
    if not optimizer.defaults.get("fused"):
        raise ValueError("guarded_update needs torch.optim.AdamW(fused=True): only the fused kernel skips an update "
                         "on the device")
    found_inf = nonfinite_flag(loss, grad_norm)
    if hold is not None:
        found_inf = torch.maximum(found_inf, hold.to(torch.float32))
    if clip_grad > 0:
        # A non-finite norm turns the gradients into zeros or NaNs here; the update that would read them is skipped.
        clip_gradients_(pm, clip_grad, grad_norm)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.found_inf = found_inf
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf
    optimizer.zero_grad(set_to_none=True)
    return found_inf == 0


class SkipStreak:
    """The --max-skipped-steps limit watched on the device, between two reads of the step flags by the host.

    ``count`` is the number of skipped steps in a row (it starts from a resumed run's streak); once a skip brings
    it to the limit, ``stopped`` latches and every later update is held back (``hold`` of ``guarded_update``)
    until the host reads the flags and stops the run (training/step_metrics.py): the run's state is still that of
    its last good step, as when the synchronous loop stops at once.
    """

    def __init__(self, in_a_row: int, max_in_a_row: int, device: torch.device):
        self.count = torch.full((), in_a_row, dtype=torch.int64, device=device)  # a fill: no blocking copy
        self.max_in_a_row = max_in_a_row
        self.stopped = torch.zeros((), dtype=torch.bool, device=device)

    def record(self, applied: torch.Tensor) -> None:
        self.count = torch.where(applied, 0, self.count + 1)
        self.stopped = self.stopped | (self.count >= self.max_in_a_row)

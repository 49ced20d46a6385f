"""The optimizer and its learning rate: AdamW (or torch-optimi's StableAdamW) with weight decay on matrices only, and
the LR schedules (warmup-stable-decay by default, its decay linear, cosine, exponential or 1-sqrt as Megatron names
them; cosine, linear, constant)."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

import torch
from torch.distributed.tensor import DTensor

from megamlm import extras
from megamlm.config import LRDecayStyle, OptimizerName, WSDDecayStyle
from megamlm.errors import ResumeError

_FUSED_DEVICES = ("cuda", "cpu")


def build_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                    eps: float, impl: str = "torch", name: OptimizerName = "adamw") -> torch.optim.Optimizer:
    """AdamW, torch's fused kernel on GPU and CPU; ``impl="apex"`` uses apex's FusedAdam (decoupled weight decay,
    as AdamW). ``name="stableadamw"``: torch-optimi's StableAdamW with the same groups and settings (its weight
    decay decoupled and scaled by the learning rate, as AdamW's)."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if name == "stableadamw":
        optimi = extras.require("optimi", "--optimizer stableadamw")
        # optimi picks its Triton kernel by itself for plain tensors on a GPU. Elsewhere it would ask Triton for a GPU
        # driver (and fail where Triton is installed); and the shards of FSDP2 and tensor parallelism (DTensors) take
        # its for-loop update, whose per-tensor RMS DTensor computes over the whole tensor, as one process does
        # (tests/distributed/test_rampup_and_optimizer_layouts.py).
        params = decay + no_decay
        plain_gpu = bool(params) and all(p.device.type == "cuda" and not isinstance(p, DTensor) for p in params)
        return optimi.StableAdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                  triton=None if plain_gpu else False)
    if impl == "apex":
        extras.require("apex", "--optimizer-impl apex")
        from apex.optimizers import FusedAdam

        return FusedAdam(groups, lr=lr, betas=betas, eps=eps, adam_w_mode=True)
    # The fused kernel (GPU and CPU) updates every tensor in one pass: on CPU it was measured 8.7x faster than the
    # foreach path on two 128,256 x 384 matrices (0.20 vs 1.72 s per step), and it can skip an update on the
    # device (``found_inf``, see training/step.py: update).
    params = decay + no_decay
    fused = bool(params) and all(p.device.type in _FUSED_DEVICES for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)


def set_hyperparameters(optimizer: torch.optim.Optimizer, weight_decay: float, betas: tuple[float, float],
                        eps: float) -> None:
    """Make the optimizer's settings this launch's (a checkpoint's optimizer state carries its own)."""
    for group in optimizer.param_groups:
        is_matrix_group = any(p.ndim >= 2 for p in group["params"])
        group["weight_decay"] = weight_decay if is_matrix_group else 0.0
        group["eps"] = eps
        if "betas" in group:
            group["betas"] = betas
        else:  # torch-optimi keeps them apart
            group["beta1"], group["beta2"] = betas


WSD_DECAY_NAMES = {"linear": "a linear", "cosine": "a cosine", "exponential": "an exponential",
                   "minus_sqrt": "a 1-sqrt"}


def wsd_decay_factor(style: WSDDecayStyle, decayed: float) -> float:
    """The factor on (peak - min) once the fraction ``decayed`` of WSD's decay is done: 1 at its start, 0 at its end;
    Megatron's shapes by Megatron's names (megatron-core's ``OptimizerParamScheduler``, ``--lr-wsd-decay-style``)."""
    if style == "linear":
        return 1.0 - decayed
    if style == "cosine":
        return 0.5 * (math.cos(math.pi * decayed) + 1.0)
    if style == "exponential":
        return 2.0 * math.pow(0.5, decayed) - 1.0
    if style == "minus_sqrt":
        return 1.0 - math.sqrt(decayed)
    raise ValueError(f"unknown WSD decay style {style!r}")


@dataclass
class LRSchedule:
    """The learning rate of each 1-based step; stateless except for its settings (this dataclass's fields, which a
    resume checks)."""

    peak_lr: float
    min_lr: float
    style: LRDecayStyle
    warmup_iters: int
    decay_iters: int
    train_iters: int
    wsd_decay_style: WSDDecayStyle = "linear"
    rewarmups: tuple = ()
    """(first step, steps) of each re-warmup at a recipe phase's start (config/phases.py): the rate of those steps
    is the schedule's times (step - first + 1) / steps."""
    phase_lrs: tuple = ()
    """(first step, last step, learning rate, end or None, decay shape or None) of each recipe phase, where the
    phases set their own learning rates (config/phases.py ``learning_rate_pieces_of``): after the warmup, a step's
    rate is its phase's, held, or decayed from it to ``end`` over the phase's steps by ``wsd_decay_factor`` (the
    last phase's decay to --min-lr is then WSD's, float for float)."""

    def __post_init__(self):  # lists (a run record's JSON) as tuples of numbers
        self.rewarmups = tuple((int(first), int(iters)) for first, iters in self.rewarmups)
        self.phase_lrs = tuple((int(first), int(last), float(lr), None if end is None else float(end), style)
                               for first, last, lr, end, style in self.phase_lrs)

    def lr_at(self, step: int) -> float:
        lr = self._schedule_lr_at(step)
        for first, iters in self.rewarmups:
            if first <= step < first + iters:
                lr = lr * (step - first + 1) / iters
        return lr

    def _schedule_lr_at(self, step: int) -> float:
        if self.warmup_iters and step <= self.warmup_iters:
            return self.peak_lr * step / self.warmup_iters
        if self.phase_lrs:
            return self._phase_lr_at(step)
        span = self.peak_lr - self.min_lr
        if self.style == "constant":
            return self.peak_lr
        if self.style == "wsd":
            decay_start = self.train_iters - self.decay_iters
            if step <= decay_start:
                return self.peak_lr
            decayed = min((step - decay_start) / self.decay_iters, 1.0)
            return self.min_lr + span * wsd_decay_factor(self.wsd_decay_style, decayed)  # exactly min_lr at the end
        progress = (step - self.warmup_iters) / max(1, self.train_iters - self.warmup_iters)
        progress = min(max(progress, 0.0), 1.0)
        if self.style == "cosine":
            return self.min_lr + 0.5 * span * (1.0 + math.cos(math.pi * progress))
        if self.style == "linear":
            return self.min_lr + span * (1.0 - progress)
        raise ValueError(f"unknown LR schedule {self.style!r}")

    def _phase_lr_at(self, step: int) -> float:
        first, last, lr, end, style = next((p for p in self.phase_lrs if step <= p[1]), self.phase_lrs[-1])
        if end is None:
            return lr
        decayed = min((step - first + 1) / (last - first + 1), 1.0)
        return end + (lr - end) * wsd_decay_factor(style, decayed)  # the same expression as WSD's decay

    def table(self, last_step: int) -> array:
        """``lr_at`` of steps 1 to ``last_step`` (at index ``step - 1``), computed once before the first step: the
        loop reads the very floats ``lr_at`` returns, 8 bytes a step."""
        return array("d", map(self.lr_at, range(1, last_step + 1)))

    def describe(self) -> str:
        """The start-up line: ``learning rate 0.001: 50 warmup steps, then constant to step 400 and a linear decay
        over the last 100 steps to 0 (wsd)``."""
        plural = "s" if self.warmup_iters != 1 else ""
        warmup = f"{self.warmup_iters} warmup step{plural}, then " if self.warmup_iters else ""
        if self.style == "constant":
            shape = "constant"
        elif self.style == "wsd":
            decay = "the last step" if self.decay_iters == 1 else f"the last {self.decay_iters} steps"
            shape = (f"constant to step {self.train_iters - self.decay_iters} and "
                     f"{WSD_DECAY_NAMES[self.wsd_decay_style]} decay over {decay} to {self.min_lr:g} (wsd)")
        else:
            shape = f"{self.style} decay to {self.min_lr:g} at step {self.train_iters}"
        if self.phase_lrs:
            shape = "by phase: " + ", ".join(
                f"steps {first}-{last} " + (f"at {lr:g}" if end is None else
                                            f"{WSD_DECAY_NAMES[style]} decay {lr:g} -> {end:g}")
                for first, last, lr, end, style in self.phase_lrs)
        rewarmed = "".join(f"; re-warmed up over steps {first}-{first + iters - 1}" for first, iters in self.rewarmups)
        return f"learning rate {self.peak_lr:g}: {warmup}{shape}{rewarmed}"

    def state_dict(self) -> dict:
        """The settings; the WSD decay's shape only where it is not the linear one (the only shape before it could
        be chosen), so that earlier checkpoints' and run records' schedules read as the same schedule."""
        state = dict(peak_lr=self.peak_lr, min_lr=self.min_lr, style=self.style, warmup_iters=self.warmup_iters,
                     decay_iters=self.decay_iters, train_iters=self.train_iters)
        if self.wsd_decay_style != "linear":
            state["wsd_decay_style"] = self.wsd_decay_style
        if self.rewarmups:
            state["rewarmups"] = [list(r) for r in self.rewarmups]
        if self.phase_lrs:
            state["phase_lrs"] = [list(p) for p in self.phase_lrs]
        return state

    def load_state_dict(self, state: dict) -> None:
        """Resume checks compare schedules before any work (training/resume.py); this only guards against a
        checkpoint that slipped past them."""
        if state != self.state_dict():
            raise ResumeError(f"the checkpoint's LR schedule {state} differs from this run's {self.state_dict()}; "
                              "pass --override-schedule to continue with this run's")

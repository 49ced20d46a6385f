"""What one phase of a recipe may set: ``PhaseConfig``, the items of the YAML ``phases:`` list (``RecipeConfig``).

A field left out (None) is inherited from the phase before; the first phase inherits the run's flags. Each field
declares its role (config/roles.py) as the run-level field it overrides does: a phase's data and sequence length
are ``stream``, its mask ratio ``masking``, its objective ``objective``, its length and LR piece ``schedule``, its
RoPE base ``shape``. How a list resolves into phases with step ranges is ``config/phases.py``'s.

Torch-free and importing only ``roles``: ``sections.py`` declares the ``recipe`` section with it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from megamlm.config.roles import setting

_PHASE_FIELDS = (
    ("steps", int, "schedule", "The phase's length in optimizer steps (give steps, tokens or fraction; the last phase "
     "may give none: it runs to the end of the run)."),
    ("tokens", int, "schedule", "The phase's length in tokens: it ends at the first step by which it has trained this "
     "many (tokens per step = global batch x the phase's sequence length; needs --train-tokens)."),
    ("fraction", float, "schedule", "The phase's share of the run, like --switch: it ends at step round(F x "
     "--train-iters), F the shares of the phases so far (of --train-tokens' tokens when the run is given in tokens), "
     "so that the recipe scales with the run's length."),
    ("objective", str, "objective", "mlm, clm or mntp (default: the phase before's; the first phase's is "
     "--objective)."),
    ("data_path", list[str], "stream", "The phase's training data, Megatron's --data-path syntax (a prefix, or a "
     "blend 0.7 a 0.3 b). A corpus an earlier phase read continues its stream where that phase left it "
     "(data/phase_streams.py)."),
    ("seq_length", int, "stream", "The phase's sample length, at most the model's positions (--seq-length)."),
    ("rope_theta", float, "shape", "The phase's RoPE base (context extension); the model's rotary tables are rebuilt "
     "at the phase's start."),
    ("local_rope_theta", float, "shape", "The sliding-window layers' RoPE base in this phase."),
    ("mask_ratio", float, "masking", "MLM/MNTP: the phase's probability that a non-special token is selected."),
    ("mask_replace_prob", float, "masking", "MLM/MNTP: probability that a selected token becomes the mask token."),
    ("mask_random_prob", float, "masking", "MLM/MNTP: probability that a selected token becomes a random token."),
    ("mask_keep_prob", float, "masking", "MLM/MNTP: probability that a selected token is kept."),
    ("lr", float, "schedule", "The phase's learning rate: the level it holds, or decays from when it sets "
     "lr_decay (default: where the phase before ended; the first phase's is --lr, reached after --lr-warmup-iters)."),
    ("lr_decay", bool, "schedule", "The phase decays its learning rate over its steps (--lr-decay-style wsd): the "
     "last phase to --min-lr (WSD's decay), an earlier one to the next phase's lr, which it then must set."),
    ("lr_wsd_decay_style", str, "schedule", "The decay phase's shape: linear, cosine, exponential or minus_sqrt "
     "(1-sqrt; default --lr-wsd-decay-style)."),
    ("global_batch_size", int, "batch", "The phase's samples per step (and the phases' after it, until one sets "
     "another), instead of the run's --global-batch-size and --rampup-batch-size; a multiple of micro x "
     "data-parallel."),
    ("lr_warmup_iters", int, "schedule", "A re-warmup at the phase's start: the learning rate of its first N steps "
     "is the schedule's times step / N (not in the first phase: --lr-warmup-iters warms up the run's start)."),
    ("valid_data_path", list[str], "evaluation", "The phase's validation data (--valid-data-path's syntax): every "
     "validation inside the phase, its last step's included, scores these documents (default: the phase before's; "
     "the first phase's is the run's --valid-data-path or --split documents); each record names its data."),
)
"""(name, type, role, doc) of what a phase may set; a field left out (None) is inherited. Declared as a table, not
as annotations: the run-level settings they override (``rope_theta``, ...) are declared once, in their sections."""


def _phase_section() -> type:
    entries = [(name, kind | None, setting(None, role)) for name, kind, role, _ in _PHASE_FIELDS]
    cls = dataclasses.make_dataclass("PhaseConfig", entries, frozen=True,
                                     namespace={"__field_docs__": {name: doc for name, _, _, doc in _PHASE_FIELDS}})
    cls.__module__ = __name__
    cls.__doc__ = "One phase of a recipe: what it sets (None: inherited from the phase before)."
    return cls


PhaseConfig = _phase_section()


@dataclass(frozen=True)
class RecipeConfig:
    phases: list[PhaseConfig] = setting(factory=list, role="objective", yaml_only=True)
    """The recipe's phases in order (YAML only: a top-level ``phases:`` list); each field of a phase has its own
    role (default: none; --objective a,b --switch ... is then the objective-only form of the same phases)."""

"""What one phase of a recipe may set: ``PhaseConfig``, the items of the YAML ``phases:`` list (``RecipeConfig``).

A field left out (None) is inherited from the phase before; the first phase inherits the run's flags. Each field
declares its role (config/roles.py) as the run-level field it overrides does: a phase's data and sequence length
are ``stream``, its mask ratio ``masking``, its objective ``objective``, its length and LR piece ``schedule``, its
RoPE base ``shape``. How a list resolves into phases with step ranges is ``config/phases.py``'s.

Torch-free and importing only ``roles``: ``sections.py`` declares the ``recipe`` section with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from megamlm.config.roles import section_class, setting

_PHASE_FIELDS = (
    ("steps", int, "schedule", "length", None, "The phase's length in optimizer steps (give steps, tokens or "
     "fraction; the last phase may give none: it runs to the end of the run)."),
    ("tokens", int, "schedule", "length", None, "The phase's length in tokens: it ends at the first step by which it "
     "has trained this many (tokens per step = global batch x the phase's sequence length; needs --train-tokens)."),
    ("fraction", float, "schedule", "length", None, "The phase's share of the run, like --switch: it ends at step "
     "round(F x --train-iters), F the shares of the phases so far (of --train-tokens' tokens when the run is given "
     "in tokens), so that the recipe scales with the run's length."),
    ("objective", str, "objective", "carried", "objective.objective", "mlm, clm or mntp (default: the phase "
     "before's; the first phase's is --objective)."),
    ("data_path", list[str], "stream", "carried", "data.data_path", "The phase's training data, Megatron's "
     "--data-path syntax (a prefix, or a blend 0.7 a 0.3 b). A corpus an earlier phase read continues its stream "
     "where that phase left it (data/phase_streams.py)."),
    ("seq_length", int, "stream", "carried", "model.seq_length", "The phase's sample length, at most the model's "
     "positions (--seq-length)."),
    ("sample_mode", str, "stream", "carried", "data.sample_mode", "The phase's --sample-mode: windows, "
     "packed_documents or document_per_row. A corpus an earlier phase read in another mode starts from the documents "
     "its epoch has left (data/phase_streams.py)."),
    ("rope_theta", float, "shape", "carried", "model.rope_theta", "The phase's RoPE base (context extension); the "
     "model's rotary tables are rebuilt at the phase's start."),
    ("local_rope_theta", float, "shape", "carried", "model.local_rope_theta", "The sliding-window layers' RoPE base "
     "in this phase."),
    ("mask_ratio", float, "masking", "carried", "objective.mask_ratio", "MLM/MNTP: the phase's probability that a "
     "non-special token is selected."),
    *((f"mask_{what}_prob", float, "masking", "carried", f"objective.mask_{what}_prob", "MLM/MNTP: probability that "
       f"a selected token {becomes}.") for what, becomes in (("replace", "becomes the mask token"),
                                                            ("random", "becomes a random token"), ("keep", "is kept"))),
    ("lr", float, "schedule", "own", "training.lr", "The phase's learning rate: the level it holds, or decays from "
     "when it sets lr_decay (default: where the phase before ended; the first phase's is --lr, reached after "
     "--lr-warmup-iters)."),
    ("lr_decay", bool, "schedule", "own", None, "The phase decays its learning rate over its steps (--lr-decay-style "
     "wsd): the last phase to --min-lr (WSD's decay), an earlier one to the next phase's lr, which it then must set."),
    ("lr_wsd_decay_style", str, "schedule", "own", "training.lr_wsd_decay_style", "The decay phase's shape: linear, "
     "cosine, exponential or minus_sqrt (1-sqrt; default --lr-wsd-decay-style)."),
    ("global_batch_size", int, "batch", "carried", "training.global_batch_size", "The phase's samples per step (and "
     "the phases' after it, until one sets another), instead of the run's --global-batch-size and "
     "--rampup-batch-size; a multiple of micro x data-parallel."),
    ("lr_warmup_iters", int, "schedule", "own", "training.lr_warmup_iters", "A re-warmup at the phase's start: the "
     "learning rate of its first N steps is the schedule's times step / N (not in the first phase: --lr-warmup-iters "
     "warms up the run's start)."),
    ("valid_data_path", list[str], "evaluation", "carried", "data.valid_data_path", "The phase's validation data "
     "(--valid-data-path's syntax): every validation inside the phase, its last step's included, scores these "
     "documents (default: the phase before's; the first phase's is the run's --valid-data-path or --split "
     "documents); each record names its data."),
)
"""(name, type, role, kind, run setting, doc) of what a phase may set; a field left out (None) is inherited.

- role: as the run-level setting it overrides (config/roles.py): what a difference means on resume and to the
  study planner, which read it from here (``compared_phase_fields``);
- kind: ``length`` (where the phase ends), ``carried`` (inherited by the phases after it until one sets another;
  the first phase's is the run setting's), ``own`` (this phase only: its piece of the LR schedule);
- run setting: ``section.field`` of the run-level flag of the same setting, whose check (config/setting_checks.py)
  a phase's value gets too.

Declared as a table, not as annotations: the run-level settings they override are declared once, in their sections.
"""
KINDS = ("length", "carried", "own")


def phase_section(table: tuple = _PHASE_FIELDS) -> type:
    """The ``PhaseConfig`` class of a table of phase fields (``_PHASE_FIELDS``' columns)."""
    entries = [(name, kind | None, setting(None, role, kind=how, run_setting=flag))
               for name, kind, role, how, flag, _ in table]
    assert all(how in KINDS for _, _, _, how, _, _ in table), "every phase field has its kind"
    return section_class("PhaseConfig", entries, {name: doc for name, *_, doc in table}, __name__,
                         "One phase of a recipe: what it sets (None: inherited from the phase before).")


PhaseConfig = phase_section()


@dataclass(frozen=True)
class RecipeConfig:
    phases: list[PhaseConfig] = setting(factory=list, role="objective", yaml_only=True)
    """The recipe's phases in order (YAML only: a top-level ``phases:`` list); each field of a phase has its own
    role (default: none; --objective a,b --switch ... is then the objective-only form of the same phases)."""


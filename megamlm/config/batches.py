"""Batch sizes the user did not set, chosen to fit the parallel layout.

A batch flag left unset (``None`` in the config: neither on the command line nor in the YAML file) is derived
here, so adding ``--pp 2``, ``--tp 2`` or a ``--world-size`` to a working command keeps it working. The
starting point is the preset's recipe (``RECIPE_BATCH``: the paper's sizes train with global 1,152 and
micro 12, as ``examples/configs/paper_*.yaml`` say) or global 16 / micro 16. Then:

- the global batch stays at the starting point whenever some micro-batch fits, and only grows (to the
  smallest size that fits) where data parallel x the pipeline's micro-batches need more samples;
- the micro-batch is the largest one up to the starting point that splits the global batch over the
  data-parallel ranks into enough micro-batches for the pipeline (at least PP, a multiple of PP for
  interleaved 1F1B).

Flags the user did set are never changed: a layout they do not fit is refused by
``megamlm.training.startup.resolve_parallel_dims``. ``resolve.py`` applies this before the one validation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from megamlm.config import rampup
from megamlm.config.rampup import BatchSizes
from megamlm.config.recipes import RECIPES, recipe_batch
from megamlm.config.sections import Config

DEFAULT_BATCH = (16, 16)
"""(micro, global) of presets without a recipe."""
RECIPE_BATCH = {preset: recipe_batch(preset) for preset in RECIPES}
"""(micro, global) of the paper's recipe per preset (recipes.py, as examples/configs/paper_<preset>_*.yaml)."""


@dataclass(frozen=True)
class BatchChoice:
    micro: int
    global_: int
    chosen: tuple[str, ...]
    """The flags this choice filled in (empty when the user set both)."""
    ramp_start: int | None = None
    """The first batch of a --rampup-batch-size the micro-batch was also fitted to."""

    def describe(self, dp: int, pp: int, preset: str) -> str:
        micro_batches = self.global_ // (self.micro * dp)
        start_micro, start_global = batch_start(preset)
        origin = f"the {preset} recipe's" if preset in RECIPE_BATCH else "the default"
        return (f"{' and '.join(self.chosen)} not given: global {self.global_} = micro {self.micro} x DP {dp} x "
                f"{micro_batches} micro-batches per step ({origin} global {start_global} / micro {start_micro}, "
                f"fitted to DP {dp}{f', PP {pp}' if pp > 1 else ''}"
                f"{f' and to --rampup-batch-size from {self.ramp_start}' if self.ramp_start else ''}); "
                "set the flags to choose")


def batch_start(preset: str) -> tuple[int, int]:
    return RECIPE_BATCH.get(preset, DEFAULT_BATCH)


def _fits(global_: int, micro: int, dp: int, min_micro_batches: int, multiple: int) -> bool:
    if global_ % (micro * dp):
        return False
    micro_batches = global_ // (micro * dp)
    return micro_batches >= min_micro_batches and micro_batches % multiple == 0


def fit_batch(micro: int | None, global_: int | None, dp: int, pp: int, interleaved: bool,
              start: tuple[int, int] = DEFAULT_BATCH, ramp: list[int] | None = None) -> BatchChoice:
    """Fill the unset one(s) of (micro, global) for ``dp`` data-parallel ranks and a ``pp``-stage pipeline; a chosen
    micro-batch also splits every batch of a (well-formed) ``--rampup-batch-size`` over the data-parallel ranks."""
    chosen = tuple(flag for flag, value in (("--micro-batch-size", micro), ("--global-batch-size", global_))
                   if value is None)
    min_micro_batches = pp if pp > 1 else 1
    multiple = pp if (pp > 1 and interleaved) else 1
    start_micro, start_global = start
    if micro is not None and global_ is not None:
        return BatchChoice(micro, global_, chosen)
    if micro is not None:  # the smallest global batch at or above the starting one that this micro-batch fits
        unit = micro * dp * multiple
        needed = max(start_global, micro * dp * min_micro_batches)
        return BatchChoice(micro, -(-needed // unit) * unit, chosen)
    if global_ is None:  # the starting global batch, or the smallest above it that the layout can split
        unit = dp * multiple
        global_ = -(-max(start_global, dp * min_micro_batches) // unit) * unit
    well_formed = ramp is not None and not rampup.problem(ramp, global_)
    ramp_sizes = BatchSizes(global_, tuple(ramp)).distinct()[:-1] if well_formed else ()
    for candidate in range(min(start_micro, global_), 0, -1):
        if _fits(global_, candidate, dp, min_micro_batches, multiple) and not any(
                size % (candidate * dp) for size in ramp_sizes):
            return BatchChoice(candidate, global_, chosen, ramp_sizes[0] if ramp_sizes else None)
    # No micro-batch fits the given global batch: keep the start and let the layout check name the fix.
    return BatchChoice(start_micro, global_, chosen)


def fit_batch_sizes(cfg: Config, world_size: int) -> tuple[Config, str | None]:
    """``cfg`` with the unset batch sizes chosen for its layout on ``world_size`` processes, and the line to log
    (None when both were set, or when the layout cannot split the world: its check names the fix)."""
    t, p = cfg.training, cfg.parallel
    tp, pp = p.tensor_model_parallel_size, p.pipeline_model_parallel_size
    given = [size for size in (t.micro_batch_size, t.global_batch_size) if size is not None]
    if tp < 1 or pp < 1 or world_size < 1 or world_size % (tp * pp) or any(size <= 0 for size in given):
        return cfg, None  # values the checks refuse, naming the fix
    dp = world_size // (tp * pp)
    choice = fit_batch(t.micro_batch_size, t.global_batch_size, dp, pp, p.pipeline_schedule == "interleaved_1f1b",
                       batch_start(cfg.model.model), t.rampup_batch_size)
    if not choice.chosen:
        return cfg, None
    training = dataclasses.replace(t, micro_batch_size=choice.micro, global_batch_size=choice.global_)
    return dataclasses.replace(cfg, training=training), choice.describe(dp, pp, cfg.model.model)

"""Samples per optimizer step: the global batch size, or Megatron's batch-size ramp-up (``--rampup-batch-size START
INCREMENT SAMPLES``) up to it; the one function every reader of a step's batch size asks (``BatchSizes``).

Megatron's semantics (megatron-core's ``RampupBatchsizeNumMicroBatchesCalculator``): with ``n = (global - START) /
INCREMENT`` increments, the batch of a step that starts after ``c`` samples of the run is ``START + INCREMENT x
int(c / (SAMPLES / n))`` while ``c <= SAMPLES``, and the global batch after. ``c`` counts the samples this run's
steps consumed from its step 1 (0 at the start of a fresh run, as Megatron's ``consumed_train_samples``), so the
batch size of step k is a pure function of k and the settings: a resume at any step, and any layout, gets the
same sizes (``sizes``), while the sample stream itself is consumed in order from the checkpoint's consumed count
(data/sampler.py). Megatron's rules for the numbers are checked in ``problem`` (config-only) and
``layout_problem`` (against micro x data-parallel and the pipeline's micro-batches).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

FLAG = "--rampup-batch-size"


@dataclass(frozen=True)
class BatchSizes:
    """The global batch size of every step of a run."""

    global_batch_size: int
    rampup: tuple[int, int, int] | None = None
    """(START, INCREMENT, SAMPLES), or None: every step takes the global batch."""

    @classmethod
    def of(cls, training) -> BatchSizes:
        """The batch sizes of a (resolved) TrainingConfig."""
        ramp = training.rampup_batch_size
        return cls(training.global_batch_size, tuple(int(v) for v in ramp) if ramp is not None else None)

    def size_after(self, consumed: int) -> int:
        """The global batch of a step that starts once the run has consumed ``consumed`` samples."""
        if self.rampup is None:
            return self.global_batch_size
        start, increment, samples = self.rampup
        if consumed > samples:
            return self.global_batch_size
        per_increment = samples / ((self.global_batch_size - start) // increment)
        return start + int(consumed / per_increment) * increment

    def sizes(self, last_step: int) -> array:
        """The global batch of steps 1 to ``last_step`` (at index ``step - 1``), computed once before the first
        step, as the LR table is."""
        out = array("q")
        if self.rampup is None:
            out.extend([self.global_batch_size] * last_step)
            return out
        consumed = 0
        for _ in range(last_step):
            size = self.size_after(consumed)
            out.append(size)
            consumed += size
        return out

    def distinct(self) -> tuple[int, ...]:
        """Every size a step can take (START, START + INCREMENT, ..., global), smallest first."""
        if self.rampup is None:
            return (self.global_batch_size,)
        start, increment, _ = self.rampup
        return tuple(range(start, self.global_batch_size + 1, increment))

    def describe(self) -> str | None:
        """The start-up line of a ramp (None without one)."""
        if self.rampup is None:
            return None
        start, increment, samples = self.rampup
        return (f"batch-size ramp-up: global batch {start} at the start, +{increment} every "
                f"{samples / ((self.global_batch_size - start) // increment):g} samples, "
                f"{self.global_batch_size} from sample {samples} on")


def problem(ramp, global_batch_size: int | None) -> str | None:
    """What is wrong with ``--rampup-batch-size`` on its own and against the global batch (Megatron's rules), as
    the one line naming the fix; None when it is well formed (or unset)."""
    if ramp is None:
        return None
    values = ramp if isinstance(ramp, (list, tuple)) else [ramp]
    shown = " ".join(map(str, values))
    if len(values) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return (f"{FLAG} takes three integers, START INCREMENT SAMPLES (e.g. {FLAG} 32 32 1000000), got {shown}")
    start, increment, samples = values
    if start < 1 or increment < 1 or samples < 1:
        return f"{FLAG} {shown}: START, INCREMENT and SAMPLES must be positive"
    if global_batch_size is None:
        return None  # the batch checks name a missing or bad global batch
    if start >= global_batch_size:
        return (f"{FLAG} {shown} starts at {start}, not below --global-batch-size {global_batch_size}: nothing to ramp "
                f"up; give a START below the global batch, or drop {FLAG}")
    if (global_batch_size - start) % increment:
        return (f"{FLAG} {shown}: --global-batch-size {global_batch_size} - START {start} = "
                f"{global_batch_size - start} is not a multiple of INCREMENT {increment}; pick an INCREMENT that "
                f"divides {global_batch_size - start}")
    return None


def layout_problem(sizes: BatchSizes, micro: int, dp: int) -> str | None:
    """A ramp whose sizes do not split into micro-batches over the data-parallel ranks (Megatron's consistency check
    of every size the ramp takes); None when every size does."""
    if sizes.rampup is None:
        return None
    unit = micro * dp
    bad = [size for size in sizes.distinct() if size % unit]
    if not bad:
        return None
    start, increment, samples = sizes.rampup
    return (f"{FLAG} {start} {increment} {samples} takes global batch {bad[0]}, not a multiple of --micro-batch-size "
            f"{micro} x data-parallel size {dp}; make START and INCREMENT multiples of {unit}")

"""What a plan costs: tokens and GPU-hours per run, and the total against training every model from scratch.

GPU-hours = tokens / (training tokens per second of one GPU) / 3600, per objective: a run's CLM steps are priced
at the CLM figure and its MLM steps at the MLM figure of its size. The figures come from ``--tokens-per-second``
(one number, or SIZE=N, for every objective) or from result files of ``benchmarks/train_step.py --json`` (their
``megamlm_tokens_per_s`` for their preset and objective, measured on one GPU). The estimate assumes throughput
scales linearly with the GPUs of a job and leaves out validation, checkpointing and queueing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from megamlm.config.phases import recipe_of
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.prefixes import planned_config
from megamlm.study.planning.runs import Run
from megamlm.study.planning.schema import Study, StudyError


@dataclass
class Throughput:
    """Training tokens per second of one GPU, by (size, objective); ``None`` as size or objective matches any."""

    figures: dict[tuple[str | None, str | None], float] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def per_gpu(self, size: str, objective: str) -> float | None:
        for key in ((size, objective), (size, None), (None, objective), (None, None)):
            if key in self.figures:
                return self.figures[key]
        return None

    def add(self, size: str | None, objective: str | None, tokens_per_second: float, source: str) -> None:
        if not tokens_per_second > 0:
            raise StudyError(f"{source}: tokens per second must be positive, got {tokens_per_second}")
        self.figures[(size, objective)] = float(tokens_per_second)
        self.sources.append(source)


def read_benchmark(path: Path, throughput: Throughput) -> None:
    """Add the megamlm figure of a ``benchmarks/train_step.py --json`` result file."""
    try:
        result = json.loads(Path(path).read_text())
        preset, objective, value = result["preset"], result["objective"], result["megamlm_tokens_per_s"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StudyError(f"{path} is not a benchmarks/train_step.py result file with preset, objective and "
                         f"megamlm_tokens_per_s ({err}); give one written by its --json flag") from None
    device = result.get("device_name") or result.get("device", "?")
    where = (f"{Path(path).name}: {value:,.0f} tokens/s on one {device} ({preset} {objective}, micro-batch "
             f"{result.get('micro_batch_size')} x {result.get('seq_length')})")
    throughput.add(preset, objective, value, where)


def throughput_for(study: Study, tokens_per_second: list[str] = (), benchmarks: list[str] = ()) -> Throughput:
    """The figures of the command line (``[SIZE=]N`` and benchmark files), else the study file's ``cost``."""
    throughput = Throughput()
    if tokens_per_second or benchmarks:
        for item in tokens_per_second:
            size, sep, number = item.rpartition("=")
            try:
                value = float(number)
            except ValueError:
                raise StudyError(f"--tokens-per-second {item!r}: give N or SIZE=N (e.g. 96449 or 610m=96449)") from None
            throughput.add(size or None, None, value, f"--tokens-per-second {item}")
        for path in benchmarks:
            read_benchmark(Path(path), throughput)
        return throughput
    for path in study.cost.benchmarks:
        read_benchmark(study.resolve(path), throughput)
    if study.cost.tokens_per_second is not None:
        throughput.add(None, None, study.cost.tokens_per_second, "cost.tokens_per_second "
                                                                 f"{study.cost.tokens_per_second:g}")
    return throughput


@dataclass
class RunCost:
    steps: int
    tokens: int
    gpu_hours: float | None


def tokens_trained(run: Run, first: int, last: int) -> int:
    """The tokens of ``run``'s steps ``first + 1``..``last`` as its launch trains them: step by step through its
    recipe (a batch ramp-up, a phase's own batch or sequence length), not steps x a full step's tokens."""
    tokens_through = recipe_of(planned_config(run.config)).tokens_through
    return tokens_through(last) - tokens_through(first)


def run_cost(run: Run, throughput: Throughput, independent: bool = False) -> RunCost:
    """What ``run`` trains itself (``independent``: from step 0, as if nothing were shared), its tokens counted
    step by step as the launch trains them (a batch ramp-up, a phase's own batch or sequence length)."""
    first = 0 if independent else run.branch_step
    steps = sum(run.objective_steps(independent).values())
    tokens_through = recipe_of(planned_config(run.config)).tokens_through
    hours = 0.0
    for objective, start, end in run.phase_spans():
        rate, since = throughput.per_gpu(run.size, objective), max(first, start - 1)
        if end <= since:
            continue
        if rate is None:
            hours = None
            break
        hours += (tokens_through(end) - tokens_through(since)) / rate / 3600
    return RunCost(steps, tokens_through(run.train_iters) - tokens_through(first), hours)


@dataclass
class Totals:
    plan: RunCost
    independent: RunCost

    @property
    def saving_fraction(self) -> float:
        return 1 - self.plan.tokens / self.independent.tokens if self.independent.tokens else 0.0


def _sum(costs: list[RunCost]) -> RunCost:
    hours = None if any(c.gpu_hours is None for c in costs) else sum(c.gpu_hours for c in costs)
    return RunCost(sum(c.steps for c in costs), sum(c.tokens for c in costs), hours)


def totals(plan: Plan, throughput: Throughput) -> Totals:
    """The plan's cost and that of training every model from scratch (continuations from their parent: they are
    continued pretraining by definition)."""
    return Totals(_sum([run_cost(r, throughput) for r in plan.runs]),
                  _sum([run_cost(r, throughput, independent=True) for r in plan.runs]))

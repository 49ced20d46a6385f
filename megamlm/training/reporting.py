"""Where a run's numbers go: the console log line, TensorBoard scalars and ``metrics.jsonl``."""

from __future__ import annotations

import time

from megamlm.log import log
from megamlm.training.metrics import IntervalMeter, TensorBoardWriter, format_duration
from megamlm.training.metrics_file import MetricsFile
from megamlm.training.step import StepResult
from megamlm.training.validation import ValidationResult


class RunReporter:
    """Logs every ``log_interval`` steps (and at the switch and the last step) and every validation."""

    def __init__(self, save_dir: str | None, tensorboard_dir: str | None, log_interval: int, train_iters: int,
                 start_step: int, seq_length: int):
        self.log_interval, self.train_iters, self.start_step = log_interval, train_iters, start_step
        self.seq_length = seq_length
        self.meter = IntervalMeter()
        self.tensorboard = TensorBoardWriter(tensorboard_dir)
        self.metrics = MetricsFile(save_dir, start_step)
        self.run_start = time.perf_counter()

    def step(self, step: int, objective: str, out: StepResult, lr: float, global_batch_size: int,
             consumed_samples: int, is_switch_step: bool) -> None:
        self.meter.add(out.loss, out.grad_norm, global_batch_size * self.seq_length)
        self.tensorboard.scalars(step, {"loss": out.loss, f"loss/{objective}": out.loss, "lr": lr,
                                        "grad_norm": out.grad_norm})
        if not (step % self.log_interval == 0 or step == self.train_iters or is_switch_step):
            return
        summary = self.meter.flush()
        eta = (time.perf_counter() - self.run_start) / (step - self.start_step) * (self.train_iters - step)
        log(f"step {step}/{self.train_iters} | objective {objective} | loss {summary.loss:.4f} | lr {lr:.1e} | "
            f"grad-norm {summary.grad_norm:.2f} | {summary.tokens_per_second:.0f} tok/s | eta {format_duration(eta)}")
        self.tensorboard.scalars(step, {"tokens_per_second": summary.tokens_per_second})
        self.metrics.append("train", step, samples=consumed_samples, tokens=consumed_samples * self.seq_length,
                            objective=objective, loss=summary.loss, lr=lr, grad_norm=summary.grad_norm,
                            tokens_per_second=summary.tokens_per_second)

    def validation(self, result: ValidationResult, consumed_samples: int) -> None:
        self.meter.start += result.seconds  # tokens/s measures training: the evaluation's time does not count
        log(result.describe())
        self.tensorboard.scalars(result.step, {f"validation/{name}": value for name, value in result.scalars().items()})
        self.metrics.append("validation", result.step, samples=consumed_samples,
                            tokens=consumed_samples * self.seq_length, **result.scalars(),
                            validation_samples=result.samples, mlm_tokens=result.mlm_tokens,
                            clm_tokens=result.clm_tokens)

    def close(self) -> None:
        self.tensorboard.close()

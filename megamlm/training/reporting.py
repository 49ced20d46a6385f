"""Where a run's numbers go: the console log line, TensorBoard scalars and ``metrics.jsonl``."""

from __future__ import annotations

import time

import torch

from megamlm.log import log
from megamlm.model.config import ModelArgs
from megamlm.training.metrics import (
    IntervalMeter,
    TensorBoardWriter,
    format_duration,
    throughput,
)
from megamlm.training.metrics_file import MetricsFile
from megamlm.training.step import StepResult
from megamlm.training.validation import ValidationResult


class RunReporter:
    """Logs every ``log_interval`` steps (and at the switch and the last step) and every validation.

    Throughput is ``metrics.throughput`` of the interval's tokens, the benchmark's function: tokens/s of the whole
    job, MFU over the ``devices`` devices' peak (where the device's peak is known) and this process's peak device
    memory (GPU only).
    """

    def __init__(self, save_dir: str | None, tensorboard_dir: str | None, log_interval: int, train_iters: int,
                 start_step: int, model_args: ModelArgs, device: torch.device, devices: int = 1):
        self.log_interval, self.train_iters, self.start_step = log_interval, train_iters, start_step
        self.model_args, self.device, self.devices = model_args, device, devices
        self.seq_length = model_args.max_seq_length
        self.meter = IntervalMeter()
        self.tensorboard = TensorBoardWriter(tensorboard_dir)
        self.metrics = MetricsFile(save_dir, start_step)
        self.run_start = time.perf_counter()

    def logs_at(self, step: int, is_switch_step: bool) -> bool:
        return step % self.log_interval == 0 or step == self.train_iters or is_switch_step

    def step(self, step: int, objective: str, out: StepResult, lr: float, global_batch_size: int,
             consumed_samples: int, is_switch_step: bool) -> None:
        """One finished step, with host numbers (``out`` read)."""
        self.meter.add(out.loss, out.grad_norm, global_batch_size * self.seq_length, out.predicted_tokens)
        self.tensorboard.scalars(step, {"loss": out.loss, f"loss/{objective}": out.loss, "lr": lr,
                                        "grad_norm": out.grad_norm})
        if not self.logs_at(step, is_switch_step):
            return
        summary = self.meter.flush()
        rate = throughput(self.model_args, summary.tokens, summary.predicted, objective == "clm", summary.seconds,
                          self.device, devices=self.devices)
        eta = (time.perf_counter() - self.run_start) / (step - self.start_step) * (self.train_iters - step)
        mfu = f" | MFU {100 * rate.mfu:.1f}%" if rate.mfu is not None else ""
        memory = f" | peak memory {rate.peak_memory_mib:.0f} MiB" if rate.peak_memory_mib is not None else ""
        log(f"step {step}/{self.train_iters} | objective {objective} | loss {summary.loss:.4f} | lr {lr:.1e} | "
            f"grad-norm {summary.grad_norm:.2f} | {rate.tokens_per_second:.0f} tok/s{mfu}{memory} | "
            f"eta {format_duration(eta)}")
        self.tensorboard.scalars(step, {"tokens_per_second": rate.tokens_per_second,
                                        **({"mfu": rate.mfu} if rate.mfu is not None else {}),
                                        **({"peak_memory_mib": rate.peak_memory_mib}
                                           if rate.peak_memory_mib is not None else {})})
        self.metrics.append("train", step, samples=consumed_samples, tokens=consumed_samples * self.seq_length,
                            objective=objective, loss=summary.loss, lr=lr, grad_norm=summary.grad_norm,
                            tokens_per_second=rate.tokens_per_second, mfu=rate.mfu,
                            peak_memory_mib=rate.peak_memory_mib)

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

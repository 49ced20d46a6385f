"""Where a run is: the last finished step and how many samples of the stream it has consumed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainProgress:
    step: int = 0
    consumed_samples: int = 0

    def advance(self, global_batch_size: int) -> None:
        self.step += 1
        self.consumed_samples += global_batch_size

    def state_dict(self) -> dict:
        return {"step": self.step, "consumed_samples": self.consumed_samples}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.consumed_samples = int(state["step"]), int(state["consumed_samples"])

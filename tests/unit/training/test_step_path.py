"""One optimizer step, batch to update, crosses at most 6 megamlm files (benchmarks/step_path.py traces a tiny run's
second step): what does not change between steps is decided before the first one and read as plain values."""

import pytest
from helpers import load_tool


@pytest.mark.parametrize("defer", [False, True], ids=["host-reads", "deferred-reads"])
def test_one_step_crosses_at_most_six_files(defer, cache_dir):
    step_path = load_tool("step_path", "benchmarks")
    ran, stops = step_path.trace_second_step(defer, cache_dir)
    crossed = step_path.crossed_files(ran, stops)
    # The tracer saw the whole step: its sequence, the model's forward, the loss and the update's caller.
    assert {"training/trainer.py", "training/step.py", "model/transformer.py"} <= set(crossed), crossed
    assert "train_step" in stops["training/step.py"]
    assert len(crossed) <= 6, crossed

"""metrics.jsonl: appended records, extra fields kept, non-finite numbers as null, a restart drops later steps."""

import json
import math

import pytest

from megamlm.training.metrics_file import METRICS_FILE, MetricsError, MetricsFile, read_metrics


def test_records_carry_any_fields_and_a_restart_keeps_only_the_steps_up_to_its_start(tmp_path):
    metrics = MetricsFile(tmp_path, start_step=0)
    for step in (1, 2, 3):
        metrics.append("train", step, loss=1.0 / step, mfu=0.4, peak_memory_gib=12.5)
    metrics.append("validation", 3, mlm_loss=math.nan, clm_loss=math.inf)
    assert read_metrics(tmp_path, kind="validation") == [{"kind": "validation", "step": 3, "mlm_loss": None,
                                                         "clm_loss": None}]
    assert read_metrics(tmp_path)[0] == {"kind": "train", "step": 1, "loss": 1.0, "mfu": 0.4, "peak_memory_gib": 12.5}
    with open(tmp_path / METRICS_FILE, "a") as f:
        f.write('{"kind": "train", "step": 4, "lo')  # a crash while writing
    MetricsFile(tmp_path, start_step=2).append("train", 3, loss=0.25)
    assert [(r["kind"], r["step"], r["loss"]) for r in read_metrics(tmp_path)] == [("train", 1, 1.0),
                                                                                 ("train", 2, 0.5),
                                                                                 ("train", 3, 0.25)]
    assert all(json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines())


def test_no_folder_no_file_and_a_missing_file_is_named(tmp_path):
    MetricsFile(None, start_step=0).append("train", 1, loss=1.0)
    with pytest.raises(MetricsError, match="metrics.jsonl not found; pass the --save folder of a run"):
        read_metrics(tmp_path)

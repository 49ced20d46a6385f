"""The small study of these tests (imported by conftest.py and the tests)."""

from pathlib import Path

import yaml

# A small grid: MLM, CLM and 25/50% CLM at 100 and 60 steps (WSD: 10 warmup, 20 decay steps), one continuation of
# 40 MLM steps from the 100-step CLM run, a global batch of 8 x 64 tokens.
SMALL = {
    "name": "small",
    "sizes": ["tiny"],
    "seeds": [7],
    "pretrain": {"model": {"seq_length": 64},
                 "training": {"micro_batch_size": 8, "global_batch_size": 8, "lr_warmup_iters": 10,
                              "lr_wsd_decay_iters": 20}},
    "grids": [{"budgets": [100, 60], "clm_fractions": [0, 0.25, 0.5, 1]}],
    "continued_pretraining": [{"parents": ["clm100-m40"], "steps": [40], "objective": "mlm",
                               "pretrain": {"training": {"lr_warmup_fraction": 0.1, "lr_wsd_decay_fraction": 0.2}}}],
}


def write_study(folder: Path, data: dict, name: str = "study.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return path

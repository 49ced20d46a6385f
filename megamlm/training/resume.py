"""Which checkpoint a launch continues from: the newest whole one in ``--save`` (auto-resume), else ``--load``.

Launching the same command again after a pre-emption or crash continues from the newest checkpoint of its
``--save`` folder whose files match their completion marker; incomplete or damaged ones are skipped with a
warning. The checkpoint's run record must fit this run (model shape, data fingerprint).
"""

from __future__ import annotations

import json
from pathlib import Path

from megamlm.checkpoint.catalog import CONFIG, list_checkpoints
from megamlm.checkpoint.checkpointer import find_checkpoint, resolve_checkpoint
from megamlm.log import log
from megamlm.training.run_record import check_resume


def checkpoint_to_resume(ckpt_cfg, record: dict) -> Path | None:
    """The checkpoint this launch resumes from (checked against ``record``), or None for a fresh start."""
    path = None
    if ckpt_cfg.save and list_checkpoints(ckpt_cfg.save):
        # The run's own checkpoints win over --load/--init-from: a requeued job must not restart from them.
        path = find_checkpoint(ckpt_cfg.save)
        start = ckpt_cfg.load or ckpt_cfg.init_from
        if path is None:
            log(f"no complete checkpoint in --save {ckpt_cfg.save} (see the warnings above): starting from "
                f"{start or 'scratch'}")
        elif start:
            log(f"--save {ckpt_cfg.save} already holds checkpoints of this run: resuming from {path} "
                f"instead of starting from {start}")
    if path is None and ckpt_cfg.load:
        path = resolve_checkpoint(ckpt_cfg.load)
    if path is not None:
        warning = check_resume(path, json.loads((path / CONFIG).read_text()), record, ckpt_cfg.override_data)
        if warning:
            log(f"warning: {warning}")
    return path

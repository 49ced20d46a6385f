"""Which checkpoint a launch continues from: ``--load``, or (auto-resume) the newest whole one in ``--save``.

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
    if ckpt_cfg.load:
        path = resolve_checkpoint(ckpt_cfg.load)
    elif ckpt_cfg.save and list_checkpoints(ckpt_cfg.save):
        path = find_checkpoint(ckpt_cfg.save)
        if path is None:
            log(f"no complete checkpoint in --save {ckpt_cfg.save} (see the warnings above): starting from scratch")
        elif ckpt_cfg.init_from:
            log(f"--save {ckpt_cfg.save} already holds checkpoints of this run: resuming from {path} "
                f"instead of initialising from {ckpt_cfg.init_from}")
    else:
        path = None
    if path is not None:
        warning = check_resume(path, json.loads((path / CONFIG).read_text()), record, ckpt_cfg.override_data)
        if warning:
            log(f"warning: {warning}")
    return path

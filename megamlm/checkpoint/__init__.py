"""Distributed checkpoints: crash-safe commit (completion marker with checksums), latest pointer, retention; the saved
run a launch starts from, found and read once (``saved_run.py``)."""

from megamlm.checkpoint.checkpointer import (
    CheckpointError,
    CheckpointSaveError,
    find_checkpoint,
    load_checkpoint,
    load_model_weights,
    read_checkpoint_config,
    read_train_state,
    resolve_checkpoint,
    save_checkpoint,
    save_state_checkpoint,
)

__all__ = ["CheckpointError", "CheckpointSaveError", "save_checkpoint", "save_state_checkpoint", "load_checkpoint",
           "load_model_weights", "resolve_checkpoint", "find_checkpoint", "read_checkpoint_config",
           "read_train_state"]

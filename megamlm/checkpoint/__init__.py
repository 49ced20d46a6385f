"""Distributed checkpoints with an atomic commit and a latest pointer."""

from megamlm.checkpoint.checkpointer import (
    CheckpointError,
    load_checkpoint,
    load_model_weights,
    read_checkpoint_config,
    resolve_checkpoint,
    save_checkpoint,
)

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "load_model_weights", "resolve_checkpoint",
           "read_checkpoint_config"]

"""The one error type of Hugging Face conversion."""

from megamlm.checkpoint import CheckpointError


class ConversionError(CheckpointError):
    """Input that cannot be converted (architecture, files, shapes, vocabulary, output folder).

    A CheckpointError, so `pretrain.py --init-from <hf folder>` reports it like any bad checkpoint.
    """

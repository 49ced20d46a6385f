"""megamlm: a Megatron-style trainer for text encoders."""

__version__ = "0.2.0"

"""Hugging Face interop: key maps, export to EuroBERT/ModernBERT/Llama-family folders, import of Llama-family,
EuroBERT, ModernBERT-family and GGUF models."""

from megamlm.hf.errors import ConversionError
from megamlm.hf.export import export_checkpoint
from megamlm.hf.importer import import_hf, load_hf_weights, model_args_from_hf

__all__ = ["ConversionError", "export_checkpoint", "import_hf", "load_hf_weights", "model_args_from_hf"]

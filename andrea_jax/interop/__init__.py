"""Conversions between andrea_jax and other libraries' checkpoints (Hugging Face GPT-2)."""

from andrea_jax.interop.hf_gpt2 import InteropError, export_gpt2, import_gpt2

__all__ = ["InteropError", "export_gpt2", "import_gpt2"]

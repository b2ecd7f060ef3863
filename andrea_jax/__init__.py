"""andrea_jax: the ANDREA GPT-style language models as pure JAX functions."""

__version__ = "0.1.0"

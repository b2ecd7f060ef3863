"""The configs the benchmarks time, at their training shapes.

``SHAPE_DEFAULTS`` is each named config's ``(batch, seq)``; ``load_config`` reads a named
config (with overrides); ``model_config`` is its ``ModelConfig`` at a sequence length, its
``"auto"`` settings resolved from the platform (float32 and the XLA flash kernel on CPUs,
bf16 and cuDNN attention on NVIDIA GPUs).
"""

from __future__ import annotations

import importlib.util

from andrea_jax import configdict
from andrea_jax import model
from experiments import cli

SHAPE_DEFAULTS = {"tiny": (16, 128), "andrea12m": (4, 1024), "andrea120m": (1, 1024),
                  "andrea480m": (1, 1024)}


def load_config(name: str, settings: str = ""):
  """The named config; ``settings`` is ``"model.attention_block=256,model.scan_unroll=2"``-
  style overrides."""
  path = cli.resolve_config_path(name)
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  if settings:
    configdict.apply_variants(config, settings)
  return config


def model_config(config, seq: int, platform: str | None = None) -> model.ModelConfig:
  """``config``'s model with room for ``seq`` tokens, its ``"auto"`` settings resolved for
  ``platform`` (default: JAX's backend; the peer's process names its own, so JAX does not
  start on a GPU there)."""
  cfg = model.ModelConfig(**{**config.model, "block_size": max(seq, config.model.block_size)})
  return model.resolve_auto(cfg, platform, verbose=False)

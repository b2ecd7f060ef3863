"""Named configs: one Python file per config, each with ``get_config(arg=None)``; ``build`` gives one by name with overrides."""

import importlib


def build(name: str, overrides):
  """``<name>.py``'s ``get_config()`` with ``overrides`` (``{"model.d_model": 64, ...}``) applied: a
  study cell's config (``research.registry.group_config``, registered by ``experiments/__init__.py``)."""
  from andrea_jax import configdict  # pylint: disable=import-outside-toplevel
  return configdict.apply_overrides(importlib.import_module(f"{__name__}.{name}").get_config(), overrides)

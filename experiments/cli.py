"""Command-line helpers shared by the entry points (prepare, run, ...).

``define_config_flag()`` defines ``--config`` like ``config_flags.DEFINE_config_file``
but also accepts a bare config name: ``--config=tiny`` and ``--config=tiny:norm=post``
mean ``experiments/configs/tiny.py`` (relative to the repository, not the current
directory); overrides such as ``--config.data.max_docs=10`` work as usual.
"""

from __future__ import annotations

import pathlib

from absl import flags
from ml_collections import config_flags

CONFIG_DIR = pathlib.Path(__file__).resolve().parent / "configs"


def config_names() -> list[str]:
  """The named configs in ``experiments/configs`` (``tiny``, ``andrea120m``, ...)."""
  return sorted(p.stem for p in CONFIG_DIR.glob("*.py")
                if p.stem not in ("__init__", "common"))


def resolve_config_path(name_or_path: str) -> str:
  """``"tiny:arg"`` -> ``"<repo>/experiments/configs/tiny.py:arg"``; paths pass through."""
  target, sep, arg = name_or_path.partition(":")
  if pathlib.Path(target).is_file():
    return name_or_path
  candidate = CONFIG_DIR / f"{target}.py"
  if "/" not in target and not target.endswith(".py") and candidate.is_file():
    return f"{candidate}{sep}{arg}"
  raise ValueError(f"--config={name_or_path!r}: {target!r} is neither a config file nor a "
                   f"config name; names are {', '.join(config_names())}")


class _NamedConfigParser(flags.ArgumentParser):
  """Wraps the config-file parser, resolving a bare config name to its file first."""

  def __init__(self, inner: flags.ArgumentParser):
    self.inner = inner

  def parse(self, argument):
    return self.inner.parse(resolve_config_path(argument))

  def flag_type(self):
    return self.inner.flag_type()


def define_config_flag(name: str = "config", default: str | None = None,
                       flag_values: flags.FlagValues = flags.FLAGS) -> flags.FlagHolder:
  """Define ``--<name>`` taking a config name or path (see the module docstring)."""
  holder = config_flags.DEFINE_config_file(
      name, default, "config name (e.g. tiny, andrea120m:norm=post) or path to a config file",
      flag_values=flag_values, lock_config=True)
  # The flag parses its value with .parser; wrap it so names resolve to files.
  flag = flag_values[name]
  flag.parser = _NamedConfigParser(flag.parser)
  return holder

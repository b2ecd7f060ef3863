"""What a sweep is: a base config and a list of cells, each an ordinary experiments.run."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from andrea_jax import errors


@dataclasses.dataclass(frozen=True)
class Cell:
  """One training: its name, its ``--config.*`` overrides and the arms it belongs to."""
  name: str
  overrides: dict[str, Any]
  # Arm names this cell is a member of, e.g. ("norm:post/no-warmup", "mlp_width:4").
  arms: tuple[str, ...]
  seed: int

  def args(self) -> list[str]:
    return [f"--config.{k}={v}" for k, v in self.overrides.items()]


@dataclasses.dataclass(frozen=True)
class Sweep:
  name: str
  scale: str
  # Named config (or config path) every cell starts from.
  base_config: str
  cells: list[Cell]
  # Free text for the report: the settings shared by all cells and why.
  description: str = ""


def load(name: str, scale: str) -> Sweep:
  """``experiments/sweeps/<name>.py``'s sweep at ``scale``; unknown names are an error."""
  try:
    module = importlib.import_module(f"experiments.sweeps.{name}")
  except ModuleNotFoundError as e:
    raise errors.ConfigError(f"--sweep={name!r}: no module experiments/sweeps/{name}.py") from e
  return module.get_sweep(scale)


def merge(cells: list[Cell]) -> list[Cell]:
  """One cell per distinct set of overrides; a shared cell keeps every arm it belongs to."""
  merged: dict[tuple, Cell] = {}
  for cell in cells:
    key = tuple(sorted(cell.overrides.items()))
    if key in merged:
      old = merged[key]
      merged[key] = dataclasses.replace(old, arms=old.arms + tuple(a for a in cell.arms if a not in old.arms))
    else:
      merged[key] = cell
  return list(merged.values())

"""What a study's sweep is: a base config and a list of cells, their groups and the rounds of rates added around optima.

A cell is one trained model. Cells of one ``group`` (same overrides but rate and seed) train
as one vmapped program (``andrea_jax/multi.py``); a cell without a group is its own run.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Any

from andrea_jax import errors
from research import curves
from research import optimum


@dataclasses.dataclass(frozen=True)
class Cell:
  """One training: its name, its ``--config.*`` overrides and the arms it belongs to."""
  name: str
  overrides: dict[str, Any]
  arms: tuple[str, ...]  # e.g. ("norm:post/no-warmup", "mlp_width:4")
  seed: int
  group: str = ""  # its vmapped group ("": a run of its own)
  round: int = 0  # 0: the grid; 1, 2, ...: rates added by ``refine``
  refinable: bool = False  # whether ``refine`` may add rates to its group

  @property
  def learning_rate(self) -> float | None:
    return self.overrides.get("train.learning_rate")

  @property
  def member(self) -> str:
    """The member's directory inside its group: ``lr0.001-s0``."""
    return f"lr{self.learning_rate:g}-s{self.seed}"

  @property
  def path(self) -> str:
    """Relative to the sweep's workdir."""
    return f"{self.group}/{self.member}" if self.group else self.name

  def shared(self) -> dict[str, Any]:
    """The overrides shared across its group: all but those its members may differ in, rate and
    seed (andrea_jax/multi.py's Member)."""
    return {k: v for k, v in self.overrides.items() if k not in ("train.learning_rate", "train.seed")}


@dataclasses.dataclass(frozen=True)
class Sweep:
  name: str
  scale: str
  base_config: str  # named config (or path) every cell starts from
  cells: list[Cell]
  description: str = ""  # for the report
  study: str = ""  # the study judging it (default: the sweep's name)

  @property
  def judged_by(self) -> str:
    return self.study or self.name


def groups(cells: list[Cell]) -> dict[str, list[Cell]]:
  """The grouped cells by group, checked: members share all but rate and seed, and round-0
  rates pass ``optimum.check_rates``."""
  out: dict[str, list[Cell]] = {}
  for cell in cells:
    if cell.group:
      out.setdefault(cell.group, []).append(cell)
  for name, members in out.items():
    if any(m.shared() != members[0].shared() for m in members):
      raise errors.ConfigError(f"group {name!r}: its cells differ in more than the learning rate "
                               f"and seed; give cells of another shape their own group")
    paths = [m.member for m in members]
    if len(set(paths)) != len(paths):
      raise errors.ConfigError(f"group {name!r}: two cells with the same rate and seed")
    try:
      optimum.check_rates({m.learning_rate for m in members if m.round == 0} - {None})
    except errors.ConfigError as e:
      raise errors.ConfigError(f"group {name!r}: {e}") from None
  return out


def split_groups(cells: list[Cell], size: int | None) -> list[Cell]:
  """Groups of at most ``size`` members (``<group>.<i>``), for models too big to stack many."""
  if not size:
    return cells
  member = collections.defaultdict(itertools.count)  # per group: 0, 1, 2, ...
  return [dataclasses.replace(c, group=f"{c.group}.{next(member[c.group]) // size}") for c in cells]


# At most this many rounds of added rates after the grid.
REFINE_ROUNDS = 2


def refine(cells: list[Cell], runs: dict[str, curves.Run], rnd: int) -> list[Cell]:
  """Round ``rnd``'s new cells: ``curves.refine_rates`` for each fully finished refinable group,
  at every seed, as group ``<group>.r<rnd>``."""
  families: dict[str, list[Cell]] = {}
  for c in cells:
    if c.refinable and c.group:  # by the group a refinement group extends: pre-long.r1 -> pre-long
      families.setdefault(c.group.split(".r", 1)[0], []).append(c)
  new = []
  for fam, members in families.items():
    if any(c.path not in runs for c in members):
      continue  # unfinished or failed: nothing to refine from
    proto = members[0]
    for lr in curves.refine_rates([runs[c.path] for c in members]):
      for seed in sorted({c.seed for c in members}):
        new.append(Cell(f"{fam}.r{rnd}-lr{lr:g}-seed{seed}",
                        {**proto.shared(), "train.learning_rate": lr, "train.seed": seed},
                        proto.arms, seed, f"{fam}.r{rnd}", rnd, True))
  return new

"""What a study's sweep is: a base config and a list of cells, their groups, the rounds of rates added around optima and the horizons branched as cooldowns.

A cell is one trained model. Cells of one ``group`` (same overrides but rate and seed) train
as one vmapped program (``andrea_jax/multi.py``); a cell without a group is its own run. A
group may be a cooldown branched off another's stable phase (``cooldown_branches``): the same
WSD run as its overrides describe, trained from the other's checkpoint.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Any

from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import schedule as schedule_lib
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
  # A cooldown: trained from group ``cooldown_from``'s checkpoint of step ``cooldown_step``
  # (``cooldown_branches``), not from step 0 ("": from step 0).
  cooldown_from: str = ""
  cooldown_step: int = 0

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

  @property
  def trained_steps(self) -> int:
    """The updates its program trains: ``train.steps``, less those a cooldown branches past."""
    return int(self.overrides.get("train.steps", 0)) - self.cooldown_step

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


def cooldown_branches(cells: list[Cell]) -> list[Cell]:
  """The horizons of ``cells`` branched off one stable run (Hägele et al. 2024, Sec. 3).

  A family is the cells that differ in ``train.steps`` alone (the same arms, rate, seed and
  other overrides), each a WSD run of S steps decaying over its last D = round(decay_fraction
  x S). Every horizon shorter than the family's longest becomes a cooldown of D updates from
  the longest's checkpoint of step S - D (its stable phase, kept there: ``checkpoint.keep_steps``),
  which ``cooldown.branch_cooldown`` makes the WSD run of S steps, update for update. Each
  cell's ``train.decay_fraction`` is written as D / S, the value its branch records, so its
  overrides are those of the fresh run it equals. A branched group has its source group's
  members (split groups split alike; ``branch_cooldown`` checks). A horizon whose other overrides differ (``Grid.linked``)
  is a family of its own, trained from step 0.
  """
  plan = {c.name: _decay(c) for c in cells}
  families: dict[tuple, list[Cell]] = {}
  for c in cells:
    rest = sorted((k, repr(v)) for k, v in c.overrides.items() if k != "train.steps")
    families.setdefault((c.arms, tuple(rest)), []).append(c)
  out, kept = {}, collections.defaultdict(set)
  for family in families.values():
    # S - round(f S) never falls as S grows (f <= 1): every shorter horizon's decay starts no
    # later than the longest's, inside its stable phase.
    source = max(family, key=lambda c: plan[c.name][0])
    for c in family:
      steps, decay = plan[c.name]
      at = steps - decay
      branch = {} if c is source else {"cooldown_from": source.group, "cooldown_step": at}
      out[c.name] = dataclasses.replace(
          c, overrides={**c.overrides, "train.decay_fraction": decay / steps}, **branch)
      if c is not source:
        kept[source.group].add(at)
  out = {n: dataclasses.replace(c, overrides={**c.overrides, "checkpoint.keep_steps": ",".join(
      map(str, sorted(kept[c.group])))}) if c.group in kept else c for n, c in out.items()}
  return [out[c.name] for c in cells]


def _decay(c: Cell) -> tuple[int, int]:
  """``(S, D)``: a WSD cell's steps and decay updates (``schedule.Shape``'s), or a ConfigError."""
  o = c.overrides
  if not c.group or o.get("train.schedule") != "wsd" or "train.decay_fraction" not in o \
      or "train.steps" not in o:
    raise errors.ConfigError(
        f"cell {c.name}: cooldowns branch a group's WSD runs, whose horizons and decay the grid names: give "
        f"train.schedule='wsd' and train.decay_fraction in its overrides and the train.steps axis")
  shape = schedule_lib.Shape(steps=int(o["train.steps"]), warmup_steps=0, min_lr_ratio=0.0, schedule="wsd",
                             decay_shape=o.get("train.decay_shape", config_lib.defaults()["train.decay_shape"]),
                             decay_fraction=float(o["train.decay_fraction"]))
  if not shape.decay_steps:
    raise errors.ConfigError(f"cell {c.name}: train.decay_fraction={o['train.decay_fraction']!r} gives "
                             f"{shape.steps} steps no decay, so no cooldown to branch: raise it")
  return shape.steps, shape.decay_steps


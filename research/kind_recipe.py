"""The rate recipe's kinds: ``Recipe`` of ``Leg``s (its ``Prediction`` at a target) and ``HeldOut`` (a held-out rung against it).

A recipe moves the optimal rate from a small base along each axis that separates it from the
target, one at a time, each seed's optimum by the flat-basin fit (``research/optimum.py``). Its
report section (``RecipeSection``) is the recipe studies' (``experiments/readings/recipe.py``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research import claims
from research import optimum
from research import stats
from research.kind_base import _missing, Claim, Data, not_located, seed_slopes, words
from research.kind_ladder import axis_optima, local_slopes


@dataclasses.dataclass(frozen=True)
class Leg:
  """One axis of a recipe: ``arm``'s optimum along ``axis``, carried from the base's value to ``target``."""
  arm: str
  axis: str
  target: float  # the target model's value of the axis


@dataclasses.dataclass(frozen=True)
class Prediction:
  """A recipe's log rate at a point, its interval's reach below and above (log units), a row per error source."""
  log_rate: float
  below: float
  above: float
  rows: list

  @property
  def rate(self) -> float:
    return math.exp(self.log_rate)

  @property
  def interval(self) -> tuple[float, float]:
    return math.exp(self.log_rate - self.below), math.exp(self.log_rate + self.above)

  def text(self) -> str:
    return "{:.3g} [{:.3g}, {:.3g}]".format(self.rate, *self.interval)


@dataclasses.dataclass(frozen=True)
class Recipe:
  """The base's optimum (``base_arm``'s one grid point, ``optimum.basin``: its bootstrap interval, or the
  grid points beside the best) plus, per ``Leg``, the mean per-seed slope of log(basin optimum) per
  doubling times the doublings carried. A leg's error (log units): (the slope's 95 % t half-width + its
  bend) times its doublings; the interval adds all errors in quadrature. ``config`` with ``carry`` (the
  target's overrides) at the rate: the command its report section prints."""
  title: str
  name: str
  base_arm: str
  legs: tuple[Leg, ...]
  config: str = "andrea120m"
  carry: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  note: str = ""

  def base(self, data: Data) -> dict[str, Any] | None:
    """The base: ``base_arm``'s one grid point (None: it has none or several)."""
    points = data.points(self.base_arm)
    return dict(points[0]) if len(points) == 1 else None

  def predict(self, data: Data, at: Mapping[str, Any] | None = None, fit: str = "basin",
              missing: list[str] | None = None) -> Prediction | None:
    """The rate at ``at`` (default: the legs' targets), optima by ``fit``; None without a base or a leg's
    slope (what was not located is appended to ``missing``)."""
    missing = [] if missing is None else missing
    base = self.base(data)
    if base is None:
      missing.append(f"{self.base_arm} has no single grid point")
      return None
    b = optimum.basin(optimum.table(data.runs(self.base_arm, base)))
    if b.resolved:  # the base's rate, with its interval (else the grid points beside it)
      center, (lo, hi) = b.optimum, b.interval
    else:
      center, (lo, hi) = b.best, (b.best if x is None else x for x in b.between)
    log_rate, below, above = math.log(center), math.log(center / lo), math.log(hi / center)
    rows = [("base", f"{self.base_arm} at {words(base)}", b.short(), below, above)]
    err2_lo, err2_hi = below ** 2, above ** 2
    for leg in self.legs:
      doublings = math.log2((at or {}).get(leg.axis, leg.target) / base[leg.axis])
      if doublings == 0:
        continue
      points, out = axis_optima(data, leg.arm, leg.axis, fit)
      missing += out
      slopes = seed_slopes(points, 2)
      if len(slopes) < 2:
        missing.append(f"{leg.arm}: fewer than two seeds with two located optima")
        return None
      e = stats.one_sample(list(slopes.values()))
      bend = max((abs(s - e.diff) for s in local_slopes(points)), default=0.0)
      half = (e.hi - e.diff if e.defined else math.inf) + bend
      err = half * abs(doublings)
      log_rate += e.diff * doublings
      err2_lo, err2_hi = err2_lo + err ** 2, err2_hi + err ** 2
      rows.append((leg.axis, leg.arm, e, bend, doublings, err))
    return Prediction(log_rate, math.sqrt(err2_lo), math.sqrt(err2_hi), rows)


@dataclasses.dataclass(frozen=True)
class HeldOut(Claim):
  """A recipe on a rung it did not use (``arm``'s one point): per seed, log(flat-basin optimum / the
  predicted rate), within the predicted interval's half-width on its side (TOST)."""
  arm: str = ""
  recipe: Recipe | None = None
  test_kind = "equivalent"

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.recipe.base_arm, *(leg.arm for leg in self.recipe.legs))

  def quantity_text(self) -> str:
    return f"log({self.arm}'s optimum at the held-out rung / the {self.recipe.name} recipe's rate there)"

  def rule(self) -> str:
    return (f"the {self.recipe.name} recipe's rate at {self.arm}'s grid point with its interval "
            f"(the recipe's rule); per seed, {self.arm}'s flat-basin optimum there; "
            f"{self.quantity_text()} over seeds: reproduced when its mean lies within the "
            f"predicted interval's half-width on its side (two one-sided tests), not reproduced "
            f"when decisively beyond it, inconclusive otherwise or when an optimum or a leg's "
            f"slope is not located")

  def test(self, data: Data) -> claims.Test:
    rung = data.points(self.arm)
    at = dict(rung[0]) if len(rung) == 1 else {}
    p = self.recipe.predict(data, at) if at else None
    points, out = axis_optima(data, self.arm, next(iter(at)), "basin") if at else ({}, [])
    if p is None or len(points) < 2:
      return _missing(self, f"two seeds of {self.arm} with located optima and "
                      f"every leg of the {self.recipe.name} recipe", out)
    diffs = {s: list(by.values())[0] - p.log_rate for s, by in points.items()}
    mean = float(np.mean(list(diffs.values())))
    margin = p.above if mean >= 0 else p.below
    e, pf, pa = stats.within(list(diffs.values()), margin)
    held = math.exp(p.log_rate + mean)
    lines = [f"Predicted at the held-out rung: {p.text()}; {self.arm}'s optimum there (seeds' "
             f"geometric mean) {held:.3g}, x{math.exp(mean):.2f} the prediction (margin "
             f"x{math.exp(margin):.2f} on that side)."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), pf, pa,
                       [not_located(out)], tuple(sorted(diffs)))

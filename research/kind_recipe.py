"""Claims along an axis: ``Slope``; the rate recipe: ``Recipe`` of ``Leg``s (its ``Prediction`` at a
target) and ``HeldOut`` (a held-out rung against it).

``Slope``'s quantity ``of``: the log optimum by ``fitted`` (``curves.optima``, bracketed, where the
arm learns), ``basin`` (``optimum.basin``) or ``bracketed`` (``optimum.seed_optimum``); ``sensitivity``
(over one base grid shared by every value where the arm learns); or ``fixed_rate`` (the final loss
at the grid rate nearest the arm's mean optimum at the smallest value).

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
from research import curves
from research import optimum
from research import stats
from research.kind_base import (
    _missing, at_text, axis_optima, Claim, Data, LEARNS, local_slopes, LOG_RATE, LOG_RATIO, log_text, LOSS, NAN,
    not_located, per_doubling, seed_slopes, span, words)
from research.kind_contrast import decide, PREDICTIONS

FITS = ("fitted", "basin", "bracketed")


@dataclasses.dataclass(frozen=True)
class Reading:
  """One arm's per-seed values along the axis, the values spanned, what was not located, guards and a line."""
  points: dict
  values: list
  missing: list[str]
  guards: list
  line: str = ""


@dataclasses.dataclass(frozen=True)
class Slope(Claim):
  """Per seed, the least-squares slope of ``arm``'s ``of`` (the module docstring) against log2 ``axis``
  (``min_points`` values at least); ``reference``: ``|slope reference| - |slope arm|``; ``times_span``:
  times the axis' doublings. ``predict``: ``higher``/``lower`` than 0 (against: the other way or within
  ``margin``, TOST; ``same_first``: within it is never for), ``same`` (TOST) or ``below`` ``+margin``.
  ``margin`` per doubling, or ``per_span`` over ``span`` doublings (NaN: the data's). ``also``: not judged."""
  arm: str = ""
  axis: str = ""
  of: str = "fitted"
  predict: str = "lower"
  reference: str = ""
  margin: float = NAN
  per_span: bool = False
  span: float = NAN
  times_span: bool = False
  same_first: bool = False
  learns: str = "interval"
  min_points: int = 3
  also: tuple[str, ...] = ()
  CHOICES = {"of": (*FITS, "sensitivity", "fixed_rate"), "predict": PREDICTIONS, "learns": tuple(LEARNS)}

  def plan(self):
    return dataclasses.replace(super().plan(), margin=self.bound(None) if self.predict == "same" else None)

  def needs(self) -> tuple[str, ...]:
    return (self.arm, *((self.reference,) if self.reference else ()), *self.also)

  def what(self) -> str:
    return {"fitted": "log(fitted optimal rate)", "basin": "log(flat-basin optimal rate)",
            "bracketed": "log(bracketed optimal rate)", "sensitivity": "the learning-rate sensitivity",
            "fixed_rate": "the final loss at a fixed rate"}[self.of]

  def quantity_text(self) -> str:
    slope = f"slope of {self.what()} per doubling of {self.axis}" + (" times its doublings" if self.times_span else "")
    return f"abs({self.reference}'s) - abs({self.arm}'s) {slope}" if self.reference else f"{self.arm}: {slope}"

  def unit(self) -> str:
    """A slope of ln(rate) (``FITS``) or of a loss (sensitivity, fixed_rate) per doubling; ``times_span``: the
    change over the axis' span, in the quantity's own unit."""
    of = LOG_RATE if self.of in FITS else LOSS
    return of if self.times_span else per_doubling(of)

  def bound(self, values) -> float:
    """The margin per doubling (``per_span``: over the span of ``values`` or ``span``)."""
    if not self.per_span:
      return self.margin
    doublings = self.span if math.isfinite(self.span) else span(values or [])
    return self.margin / doublings if doublings else NAN

  def margin_text(self) -> str:
    m = log_text(self.margin)
    if not self.per_span:
      return m + ("" if self.times_span else " per doubling")
    if math.isfinite(self.span):
      return f"{m} / {self.span:g} = {self.bound(None):.3f} per doubling"
    return f"{m} over the axis' span (per doubling: divided by its doublings)"

  def rule(self) -> str:
    m = self.margin_text()
    want = {"higher": "decisively above 0", "lower": "decisively below 0",
            "same": f"within ±{m} (TOST)", "below": f"below +{m} (one-sided)"}[self.predict]
    against = {"same": "decisively beyond the margin", "below": "decisively above the margin"}.get(
        self.predict, "decisively the other way" + (f" or equivalent to flat within ±{m} (TOST)"
                                                     if math.isfinite(self.margin) else ""))
    read = (f"per seed and value of {self.axis}, {self.what()}"
            + (f" (located where the arm learns, {self.learns})" if self.of in FITS else ""))
    return (f"{read}; per seed, the least-squares {self.quantity_text()} (at least {self.min_points} "
            f"values); reproduced when the mean over seeds lies {want}"
            + (" and not decisively within the margin" if self.same_first else "")
            + f", not reproduced when it lies {against}; inconclusive otherwise"
            + (", or when a seed's optimum is not located at a value of the axis" if self.of in FITS else "")
            + (f" ({', '.join(self.also)}: reported, not judged)" if self.also else ""))

  def read(self, data: Data, arm: str) -> Reading:
    values = data.values(arm, self.axis)
    runs = {v: data.runs(arm, {self.axis: v}) for v in values}
    if self.of in FITS:
      points, missing = axis_optima(data, arm, self.axis, self.of, self.learns)
      return Reading(points, values, missing, [])
    if self.of == "sensitivity":
      learning = {v: rs for v, rs in runs.items() if LEARNS[self.learns](rs)}
      notes = [f"{at_text({self.axis: v})[2:]}: {arm} does not learn, left out" for v in runs if v not in learning]
      rates = curves.base_rates(*learning.values()) if learning else []
      points: dict[int, dict] = {}
      for v, rs in learning.items():
        for seed, s in curves.sensitivity(rs, rates).items():
          points.setdefault(seed, {})[v] = s
      return Reading(points, list(learning), notes, [])
    opts = curves.optima(runs[values[0]]) if len(values) >= self.min_points else {}  # fixed_rate
    if not opts:
      return Reading({}, values, [f"{self.min_points} values of {self.axis} and an optimum at the smallest"], [])
    centre = sum(math.log(o.lr) for o in opts.values()) / len(opts)
    rate = min(sorted({r.lr for r in runs[values[0]]}), key=lambda r: abs(math.log(r) - centre))
    points = {}
    for v in values:
      for r in runs[v]:
        if r.lr == rate:
          points.setdefault(r.seed, {})[v] = r.clipped
    return Reading(points, values, [], [(not LEARNS[self.learns](runs[values[0]]), f"{arm} does not learn at the "
                                         f"smallest {self.axis}.")], f"At rate {rate:g}.")

  def slopes(self, r: Reading) -> dict[int, float]:
    doublings = span(r.values) if self.times_span else 1.0
    return {s: v * doublings for s, v in seed_slopes(r.points, self.min_points).items()}

  def test(self, data: Data) -> claims.Test:
    arms = (self.reference, self.arm) if self.reference else (self.arm,)
    readings = {a: self.read(data, a) for a in arms}
    mine = readings[self.arm]
    slopes = {a: self.slopes(r) for a, r in readings.items()}
    seeds = sorted(set.intersection(*(set(s) for s in slopes.values())))
    missing = [m for r in readings.values() for m in r.missing]
    if len(seeds) < 2:
      return _missing(self, f"{self.min_points} values with a reading for two seeds of "
                      f"{' and '.join(arms)}", missing)
    values = ([abs(slopes[self.reference][s]) - abs(slopes[self.arm][s]) for s in seeds] if self.reference
              else [slopes[self.arm][s] for s in seeds])
    margin = self.bound([v for r in readings.values() for v in r.values])
    e = stats.one_sample(values, NAN if self.predict == "below" else margin)
    pf, pa = decide([e], self.predict, margin, holm="first" if self.same_first else "")
    if self.reference:
      e = dataclasses.replace(e, kind="paired")
    unit = self.unit()
    lines = [mine.line] if mine.line else []
    parts = [f"{a}'s slope {stats.one_sample(list(slopes[a].values())).text(unit)}" for a in arms] if self.reference else []
    parts += [f"margin {margin:.3f}"] if math.isfinite(margin) else []
    parts += [f"local slopes (seeds' mean) {', '.join(f'{x:+.2f}' for x in local_slopes(mine.points))}"] if self.of in FITS else []
    lines += ["; ".join(parts).capitalize() + "."] if parts else []
    also = {a: self.slopes(self.read(data, a)) for a in self.also}
    others = [f"{a} {stats.one_sample(list(s.values())).text(unit)}" for a, s in also.items() if s]
    lines += (["Reported, not judged: " + "; ".join(others) + "."] if others else [])
    guards = [not_located(missing)] if self.of in FITS else [g for r in readings.values() for g in r.guards]
    lines += [f"{n}." for n in missing] if self.of == "sensitivity" else []
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), pf, pa, guards,
                       tuple(seeds))


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
      err = ((e.hi - e.diff if e.defined else math.inf) + bend) * abs(doublings)  # (half-width + bend) x doublings
      log_rate += e.diff * doublings
      rows.append((leg.axis, leg.arm, e, bend, doublings, err))
    quadrature = lambda reach: math.sqrt(sum((row[-1] ** 2 for row in rows[1:]), reach ** 2))  # the legs' errors
    return Prediction(log_rate, quadrature(below), quadrature(above), rows)


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

  def unit(self) -> str:
    return LOG_RATIO

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
    margin = p.above if np.mean(list(diffs.values())) >= 0 else p.below
    e = stats.one_sample(list(diffs.values()), margin)
    pf, pa = decide([e], "same", margin)
    held = math.exp(p.log_rate + e.diff)
    lines = [f"Predicted at the held-out rung: {p.text()}; {self.arm}'s optimum there (seeds' "
             f"geometric mean) {held:.3g}, x{math.exp(e.diff):.2f} the prediction (margin "
             f"x{math.exp(margin):.2f} on that side)."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), pf, pa,
                       [not_located(out)], tuple(sorted(diffs)))

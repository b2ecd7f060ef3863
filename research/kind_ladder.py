"""Claims along an axis: each seed's optimum per value (``point_optima``) and ``Slope``.

``Slope``'s quantity ``of``: the log optimum by ``fitted`` (``curves.optima``, bracketed, where the
arm learns), ``basin`` (``optimum.basin``) or ``bracketed`` (``optimum.seed_optimum``); ``sensitivity``
(over one base grid shared by every value where the arm learns); or ``fixed_rate`` (the final loss
at the grid rate nearest the arm's mean optimum at the smallest value).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np

from research import claims
from research import curves
from research import optimum
from research import stats
from research.kind_base import _missing, at_text, Claim, Data, log_text, NAN, not_located, seed_slopes, span

# Whether an arm learns: its best losses' t interval (``interval``) or every seed (``every_seed``) below the unigram.
LEARNS = {"interval": curves.learns, "every_seed": curves.learns_every_seed}
FITS = ("fitted", "basin", "bracketed")


def point_optima(runs: list[curves.Run], arm: str, where: str, fit: str = "fitted",
                 learns: str = "interval") -> tuple[dict[int, float], list[str]]:
  """``{seed: log(optimum)}`` of ``arm``'s ``runs`` at one grid point by ``fit``, and what was not located
  (the arm does not learn; a seed's optimum outside the grid)."""
  if not LEARNS[learns](runs):
    return {}, [f"{where}: {arm} does not learn"]
  out, missing = {}, []
  if fit == "fitted":
    for seed, opt in curves.optima(runs).items():
      if opt.bracketed:
        out[seed] = math.log(opt.lr)
      else:
        missing.append(f"{where} seed {seed}: {arm}'s optimum at the grid's edge ({opt.lr:.2g})")
    return out, missing
  table = optimum.table(runs)
  for seed in sorted({r.seed for r in runs}):
    own = {lr: by[seed] for lr, by in table.items() if seed in by}
    if fit == "basin":
      b = optimum.basin({lr: {seed: x} for lr, x in own.items()}, resamples=0)
      opt, why = b.optimum, (f"{arm}'s basin has no minimum inside the grid (best grid rate {b.best:.3g})")
    else:
      opt, why = optimum.seed_optimum(own)
    if opt is None:
      missing.append(f"{where} seed {seed}: {why}")
    else:
      out[seed] = math.log(opt)
  return out, missing


def axis_optima(data: Data, arm: str, axis: str, fit: str = "fitted", learns: str = "interval"
                ) -> tuple[dict[int, dict[Any, float]], list[str]]:
  """``{seed: {value: log(optimum)}}`` of ``arm`` along ``axis`` (``point_optima`` at each value)."""
  points, missing = {}, []
  for v in data.values(arm, axis):
    found, out = point_optima(data.runs(arm, {axis: v}), arm, at_text({axis: v})[2:], fit, learns)
    missing += out
    for seed, x in found.items():
      points.setdefault(seed, {})[v] = x
  return dict(sorted(points.items())), missing


def local_slopes(points) -> list[float]:
  """Per doubling, the seeds' mean log optimum's slopes between neighbouring values (how the line bends)."""
  values = sorted({v for by in points.values() for v in by})
  means = [float(np.mean([by[v] for by in points.values() if v in by])) for v in values]
  return [(b - a) / math.log2(w / v) for (v, a), (w, b) in itertools.pairwise(zip(values, means))]


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
      notes = [f"{at_text({self.axis: v})[2:]}: {arm} does not learn, left out"
               for v, rs in runs.items() if not LEARNS[self.learns](rs)]
      learning = {v: rs for v, rs in runs.items() if LEARNS[self.learns](rs)}
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
    if self.predict == "same":
      e, pf, pa = stats.within(values, margin)
    elif self.predict == "below":
      e, pf, pa = stats.below(values, margin)
    else:
      e, pf, pa = stats.directed(values, self.predict, margin)
      if self.same_first and math.isfinite(e.p_same) and e.p_same < stats.ALPHA:
        pf = 1.0
    if self.reference:
      e = dataclasses.replace(e, kind="paired")
    unit = "per doubling" if not self.times_span else "in log over the axis"
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

"""Power planning before a run: how many seeds a paired or one-sample t test needs to decide a claim at a given effect, spread and level.

Tests as in ``research/stats.py``: ``directed`` (two-sided, exact noncentral-t power) or
``equivalent`` (TOST within ``+-margin``). Claims are planned at ``alpha / m``, Holm's
strictest level, so power holds at any rank. ``admit`` fits claims to a budget.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Mapping, Sequence

from scipy import stats as sps

MAX_SEEDS = 200


def power_directed(n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
  """Power of the two-sided one-sample t test, true mean ``effect`` from the tested value."""
  if n < 2:
    return 0.0
  df = n - 1
  delta = abs(effect) / sd * math.sqrt(n)
  q = sps.t.ppf(1 - alpha / 2, df)
  p = float(sps.nct.sf(q, df, delta) + sps.nct.cdf(-q, df, delta))
  return p if math.isfinite(p) else float(delta > q)  # nct's tail loses precision far out


def power_equivalent(n: int, effect: float, margin: float, sd: float, alpha: float = 0.05) -> float:
  """Power of TOST (``alpha`` each side) within ``+-margin`` when the true mean is ``effect``."""
  if n < 2 or abs(effect) >= margin:
    return 0.0
  df = n - 1
  q = sps.t.ppf(1 - alpha, df)
  se = sd / math.sqrt(n)
  miss = 0.0
  for delta in ((margin + effect) / se, (margin - effect) / se):  # each side's miss
    m = float(sps.nct.cdf(q, df, delta))
    miss += m if math.isfinite(m) else float(delta < q)
  return max(0.0, 1.0 - miss)


def seeds_needed(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8,
                 margin: float | None = None) -> int | None:
  """The fewest seeds (>= 2) reaching ``power`` (directed, or TOST with ``margin``); None past ``MAX_SEEDS``."""
  if not (sd > 0 and math.isfinite(sd)):
    return 2 if (margin is None and effect) or (margin is not None and abs(effect) < margin) else None
  f = ((lambda n: power_directed(n, effect, sd, alpha)) if margin is None
       else (lambda n: power_equivalent(n, effect, margin, sd, alpha)))
  return next((n for n in range(2, MAX_SEEDS + 1) if f(n) >= power), None)


def upper_sd(sd: float, n: int, level: float = 0.8) -> float:
  """The one-sided ``level`` upper confidence bound (chi-squared) of an sd from ``n`` values."""
  df = n - 1
  return sd * math.sqrt(df / sps.chi2.ppf(1 - level, df)) if df > 0 else float("nan")


@dataclasses.dataclass(frozen=True)
class ClaimPlan:
  """One claim as a plan sees it."""
  key: str
  claim: str
  quantity: str  # the per-seed value its test is on
  test: str  # "directed" (the mean lies beyond a bound) or "equivalent" (within +-margin)
  effect: float  # true distance from the bound (directed) or true mean (equivalent)
  margin: float | None  # equivalence margin
  source: str  # where the effect (or margin) comes from
  arms: tuple[str, ...]  # the sweep groups it needs
  power: float | None = None  # its own power target (else the plan's)


@dataclasses.dataclass(frozen=True)
class Spread:
  """A claim's planned per-seed sd, from ``n`` seeds, and their mean."""
  sd: float
  n: int
  mean: float = float("nan")

  @classmethod
  def of(cls, values: Sequence[float]) -> "Spread":
    """The finite ``values``' sd (ddof 1; nan for fewer than two), count and mean."""
    v = [float(x) for x in values if x is not None and math.isfinite(x)]
    m = sum(v) / len(v) if v else float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else float("nan")
    return cls(sd, len(v), m)


@dataclasses.dataclass
class Planned:
  plan: ClaimPlan
  sd: float
  n_exploratory: int
  seeds: int | None  # needed at the family's level (None: more than MAX_SEEDS)
  seeds_sd_upper: int | None  # the same with the sd at its one-sided 80 % upper bound
  minutes: float  # its arms at its seeds, alone
  powered: bool = False

  def row(self) -> str:
    p = self.plan
    eff = (f"{p.effect:+.3f} beyond the bound" if p.test == "directed"
           else f"true {p.effect:g} within ±{p.margin:.3f}")
    seeds = self.seeds if self.seeds is not None else f">{MAX_SEEDS}"
    return (f"| {p.claim} | {self.sd:.3f} ({self.n_exploratory} seeds) | {eff} | {seeds} "
            f"({self.seeds_sd_upper or f'>{MAX_SEEDS}'}) | {self.minutes:.0f} | "
            f"{'powered' if self.powered else '**not powered**'} |")


def admit(claims: Sequence[ClaimPlan], spreads: Mapping[str, Spread],
          per_seed: Mapping[str, float], budget: float, min_seeds: int, power: float = 0.8,
          alpha: float = 0.05) -> tuple[list[Planned], dict[str, int], float, int]:
  """``(planned, seeds per group, level, family size)``: claims at ``alpha / family`` admitted
  cheapest first within ``budget`` minutes; the family shrinks (never grows) until stable."""
  family = [p.key for p in claims]
  while True:
    level = alpha / len(family)
    planned = []
    for p in claims:
      sp = spreads[p.key]
      need = functools.partial(seeds_needed, p.effect, alpha=level, power=p.power or power, margin=p.margin)
      n = need(sp.sd)
      seeds = None if n is None else max(n, min_seeds)
      minutes = sum(per_seed[a] for a in p.arms) * seeds if seeds else float("inf")
      planned.append(Planned(p, sp.sd, sp.n, seeds, need(upper_sd(sp.sd, sp.n)), minutes))
    group_seeds: dict[str, int] = {}
    for c in sorted(planned, key=lambda c: c.minutes):
      if c.seeds is None or c.plan.key not in family:
        continue
      trial = dict(group_seeds)
      for a in c.plan.arms:
        trial[a] = max(trial.get(a, 0), c.seeds)
      if sum(per_seed[a] * n for a, n in trial.items()) <= budget:
        group_seeds, c.powered = trial, True
    admitted = [c.plan.key for c in planned if c.powered]
    if admitted == family or not admitted:
      return planned, group_seeds, level, len(family)
    family = admitted


def table_lines(claims: Sequence[Planned], seeds: Mapping[str, int], minutes: Mapping[str, float],
                budget: float, sd_label: str) -> list[str]:
  """A plan's markdown: claims table (``sd_label``: the spreads' source), effect sources, seeds
  per group, and the claims not powered."""
  total = sum(minutes.values())
  not_powered = [c.plan.key for c in claims if not c.powered]
  return ["| claim | per-seed SD (" + sd_label + ") | planned effect | seeds needed (SD upper) | "
          "minutes | plan |", "|---|---|---|---|---|---|",
          *[c.row() for c in claims], "",
          "Planned effects: " + " ".join(f"*{c.plan.claim}*: {c.plan.source}." for c in claims), "",
          "Seeds per group: " + ", ".join(f"{g} {n} ({minutes[g]:.1f} min)" for g, n in seeds.items())
          + f"; total {total:.0f} minutes of {budget:.0f}.", "",
          f"Not powered (declared before the run; their figures are reported, not judged): "
          f"{', '.join(not_powered) or 'none'}.", ""]

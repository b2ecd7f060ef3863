"""The width ladder's kinds (the proxies study and the muTransfer ladder): where the optimal rate moves along an axis and how flat the loss is around it.

``OptimumSlopeGap``, ``OptimumFlat``, ``NotWorseAtEvery``, ``FixedRateSlope``, ``SensitivityGap``
and ``SensitivitySlope``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from research import claims
from research import curves
from research import power
from research import stats
from research.kind_base import (
    _missing, at_text, Claim, Data, NAN, not_located, QUANTITIES, seed_slopes, slope, span)


# ----------------------------------------------------------------------------- the width ladder
# (the proxies study and the muTransfer ladder; any study with an axis of widths)
#
# Claims on how the optimum, the loss and the learning-rate sensitivity move along an axis
# (``model.d_model``: the maths is on log2 of its values, "per doubling"), and the rate the
# optima predict at another value of it. An optimum is a seed's fitted vertex
# (``curves.optima``), located only where it is bracketed and the arm learns there
# (``learns``: ``curves.learns``, the t interval of the seeds' best losses below the unigram
# plateau, or ``curves.learns_every_seed``, every seed below it).

LEARNS = {"interval": curves.learns, "every_seed": curves.learns_every_seed}


def located_optima(data: Data, arm: str, axis: str, learns: str = "interval"
                   ) -> tuple[dict[int, dict[Any, float]], list[str]]:
  """``{seed: {value: log(fitted optimum)}}`` of ``arm`` along ``axis``, and what was not
  located: a value where it does not learn, a seed's optimum at the grid's edge."""
  missing, points = [], {}
  for v in data.values(arm, axis):
    runs, where = data.runs(arm, {axis: v}), at_text({axis: v})[2:]
    if not LEARNS[learns](runs):
      missing.append(f"{where}: {arm} does not learn")
      continue
    for seed, opt in curves.optima(runs).items():
      if opt.bracketed:
        points.setdefault(seed, {})[v] = math.log(opt.lr)
      else:
        missing.append(f"{where} seed {seed}: {arm}'s optimum at the grid's edge ({opt.lr:.2g})")
  return dict(sorted(points.items())), missing


def directed_ps(values: list[float], margin: float, same_first: bool, predict: str = "higher"
                ) -> tuple[stats.Effect, float, float]:
  """``stats.directed``; with ``same_first``, a mean decisively within ``+-margin`` is
  against the claim even when it is decisively beyond 0 (``stats.outcome``'s order: an
  effect too small to matter, however certain)."""
  e, p_for, p_against = stats.directed(values, predict, margin)
  if same_first and math.isfinite(e.p_same) and e.p_same < stats.ALPHA:
    p_for = 1.0
  return e, p_for, p_against


@dataclasses.dataclass(frozen=True)
class OptimumSlopeGap(Claim):
  """Transfer (Yang et al. 2022): per seed, the slope of log(fitted optimum) against log2
  ``axis``; ``|slope reference| - |slope arm|`` paired by seed, reproduced when decisively
  positive (the arm's optimum moves less), not reproduced when decisively negative or within
  ``+-log(factor)`` over the axis' span (TOST); inconclusive when an optimum is not located."""
  arm: str = ""
  reference: str = ""
  axis: str = ""
  factor: float = curves.RATE_FACTOR
  learns: str = "interval"
  min_points: int = 3
  same_first: bool = False

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def quantity_text(self) -> str:
    return (f"|slope {self.reference}| - |slope {self.arm}| of log(fitted optimum) per doubling "
            f"of {self.axis}")

  def rule(self) -> str:
    return (f"per seed and {self.axis}, the fitted optimal rate; per seed, the least-squares "
            f"slope of its log against log2({self.axis}) (at least {self.min_points} values); "
            f"{self.quantity_text()}, paired by seed: reproduced when decisively positive, not "
            f"reproduced when decisively negative or equivalent within a factor {self.factor:g} "
            f"over the axis' span (TOST); inconclusive otherwise, or when any seed's optimum "
            f"lies at the grid's edge or an arm does not learn at a value ({self.learns}).")

  def test(self, data: Data) -> claims.Test:
    (ref, ref_out), (arm, arm_out) = (located_optima(data, a, self.axis, self.learns)
                                      for a in (self.reference, self.arm))
    sr, sa = seed_slopes(ref, self.min_points), seed_slopes(arm, self.min_points)
    shared = sorted(set(sr) & set(sa))
    if len(shared) < 2:
      return _missing(self, self.rule(), f"{self.min_points} located optima for two seeds of "
                      f"both {self.reference} and {self.arm}", ref_out + arm_out)
    margin = math.log(self.factor) / span(data.values(self.reference, self.axis)
                                          + data.values(self.arm, self.axis))
    e, pf, pa = directed_ps([abs(sr[s]) - abs(sa[s]) for s in shared], margin, self.same_first)
    e = dataclasses.replace(e, kind="paired")
    lines = [f"Slope of log(optimum) per doubling: {self.reference} "
             f"{stats.one_sample(list(sr.values())).text('per doubling')}; {self.arm} "
             f"{stats.one_sample(list(sa.values())).text('per doubling')} (margin {margin:.3f})."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), pf, pa,
                       [not_located(ref_out + arm_out)], tuple(shared))


@dataclasses.dataclass(frozen=True)
class OptimumFlat(Claim):
  """The optimum stays put (Yang et al. 2022, under muP): per seed, ``arm``'s slope of
  log(fitted optimum) against log2 ``axis`` times the axis' span (the log of the factor it
  moves over the axis), within ``+-log(factor)`` (TOST), against when decisively beyond."""
  arm: str = ""
  axis: str = ""
  factor: float = 2.0
  learns: str = "interval"
  min_points: int = 3
  test_kind = "equivalent"

  @property
  def margin(self) -> float:
    return math.log(self.factor)

  def needs(self) -> tuple[str, ...]:
    return (self.arm,)

  def quantity_text(self) -> str:
    return f"log factor the {self.arm} optimum moves over the axis' span"

  def rule(self) -> str:
    return (f"per seed, {self.arm}'s slope of log(optimal rate) against log2({self.axis}) times "
            f"the axis' span (the log of the factor the optimum moves over it): reproduced when "
            f"within ±log {self.factor:g} (TOST), not reproduced when decisively beyond it; "
            f"inconclusive otherwise or when an optimum was not located.")

  def test(self, data: Data) -> claims.Test:
    points, out = located_optima(data, self.arm, self.axis, self.learns)
    doublings = span(data.values(self.arm, self.axis))
    moved = {s: v * doublings for s, v in seed_slopes(points, self.min_points).items()}
    if len(moved) < 2:
      return _missing(self, self.rule(), f"{self.min_points} located optima for two seeds of "
                      f"{self.arm}", out)
    e, pf, pa = stats.within(list(moved.values()), self.margin)
    factor = (f"{math.exp(e.diff):.2f} [{math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}]"
              if e.defined else f"{math.exp(e.diff):.2f}")
    lines = [f"{self.arm}'s optimum moves by a factor {factor} over {doublings:.0f} doublings."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), pf, pa,
                       [not_located(out)], tuple(moved))


@dataclasses.dataclass(frozen=True)
class NotWorseAtEvery(Claim):
  """No cost: at every value of ``axis`` both arms have, ``arm - reference`` of a per-seed
  ``quantity`` paired by seed lies below ``+margin`` (one-sided): for, the largest p of the
  values (an intersection-union test); against, the smallest p above the margin times the
  values; inconclusive when an arm does not learn at a value."""
  arm: str = ""
  reference: str = ""
  axis: str = ""
  quantity: str = "best_loss"
  margin: float = NAN
  learns: str = "interval"
  # Its power target per value (None: the study's): every value must pass, so with k values
  # each is planned at power ** (1 / k).
  power: float | None = None

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def quantity_text(self) -> str:
    return f"{self.arm} - {self.reference}: {QUANTITIES[self.quantity][0]} at each {self.axis}"

  def rule(self) -> str:
    return (f"per {self.axis}, {self.quantity_text()}, paired by seed; reproduced when at every "
            f"value it lies below +{self.margin:g} (one-sided; the largest p of the values, an "
            f"intersection-union test); not reproduced when at some value it lies decisively "
            f"above (the smallest p times the values); inconclusive otherwise or when an arm "
            f"does not learn at a value ({self.learns}).")

  def test(self, data: Data) -> claims.Test:
    f, results, seeds, quiet = QUANTITIES[self.quantity][1], [], set(), []
    for v in sorted(set(data.values(self.arm, self.axis)) & set(data.values(self.reference, self.axis))):
      a, b = data.runs(self.arm, {self.axis: v}), data.runs(self.reference, {self.axis: v})
      qa, qb = f(a), f(b)
      d = {s: qa[s] - qb[s] for s in sorted(set(qa) & set(qb))}
      seeds |= set(d)
      results.append((v, *stats.below(list(d.values()), self.margin)))
      quiet += [f"{at_text({self.axis: v})[2:]}: {n} does not learn"
                for n, rs in ((self.reference, b), (self.arm, a)) if not LEARNS[self.learns](rs)]
    if not results:
      return _missing(self, self.rule(), f"a value of {self.axis} with both arms")
    worst = max(results, key=lambda r: r[1].diff)
    lines = [f"{self.arm} - {self.reference} per {self.axis}: "
             + "; ".join(f"{v} {e.text()}" for v, e, _, _ in results) + "."]
    return claims.Test(self.key, self.claim, self.rule(), lines, worst[1],
                       f"{self.arm} - {self.reference} at {worst[0]} (the widest gap)",
                       max(r[2] for r in results), min(1.0, min(r[3] for r in results) * len(results)),
                       [(bool(quiet), "; ".join(quiet) + ".")], tuple(sorted(seeds)))


@dataclasses.dataclass(frozen=True)
class FixedRateSlope(Claim):
  """Wider is not worse at a fixed rate: at the grid rate nearest ``arm``'s mean log optimum
  at the axis' smallest value, per seed the least-squares slope of the final loss
  (``min(final, initial)``) against log2 ``axis``, below ``+margin`` (one-sided), against
  when decisively above; inconclusive when the arm does not learn at the smallest value."""
  arm: str = ""
  axis: str = ""
  margin: float = 0.0
  learns: str = "interval"
  min_points: int = 3

  def needs(self) -> tuple[str, ...]:
    return (self.arm,)

  def quantity_text(self) -> str:
    return f"{self.arm}: slope of the final loss per doubling of {self.axis} at a fixed rate"

  def rule(self) -> str:
    return (f"at the grid rate nearest {self.arm}'s fitted optimum at the smallest {self.axis}, "
            f"per seed the least-squares slope of the final loss (min(final, initial)) against "
            f"log2({self.axis}): reproduced when it lies below +{self.margin:g} nats per doubling "
            f"(one-sided), not reproduced when decisively above; inconclusive otherwise or when "
            f"{self.arm} does not learn at the smallest value ({self.learns}).")

  def test(self, data: Data) -> claims.Test:
    values = data.values(self.arm, self.axis)
    if len(values) < self.min_points:
      return _missing(self, self.rule(), f"{self.min_points} values of {self.axis} for {self.arm}")
    base = data.runs(self.arm, {self.axis: values[0]})
    opts = curves.optima(base)
    if not opts:
      return _missing(self, self.rule(), f"an optimum of {self.arm} at the smallest {self.axis}")
    centre = sum(math.log(o.lr) for o in opts.values()) / len(opts)
    rate = min(sorted({r.lr for r in base}), key=lambda r: abs(math.log(r) - centre))
    per_seed: dict[int, dict] = {}
    for v in values:
      for r in data.runs(self.arm, {self.axis: v}):
        if r.lr == rate:
          per_seed.setdefault(r.seed, {})[v] = r.clipped
    slopes = seed_slopes(per_seed, self.min_points)
    e, pf, pa = stats.below(list(slopes.values()), self.margin)
    lines = [f"At rate {rate:g}: slope of the final loss per doubling of {self.axis} {e.text()}."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e,
                       f"slope of the loss at {rate:g} (nats per doubling)", pf, pa,
                       [(not LEARNS[self.learns](base), f"{self.arm} does not learn at the "
                         f"smallest {self.axis}.")], tuple(slopes))


@dataclasses.dataclass(frozen=True)
class SensitivityGap(Claim):
  """Wortsman et al. 2023: ``arm`` lowers the learning-rate sensitivity. Per value of
  ``axis``, ``reference - arm`` of the sensitivity over the base grid both share, paired by
  seed. ``at="largest"``: judged at the largest value either arm has (both must have it),
  the smaller values the Holm family's other members: reproduced when it is decisively
  positive and no value decisively negative, not reproduced when decisively negative or
  within ``+-margin`` (TOST). ``at="shared"``: at the largest value both have, alone.
  Inconclusive when an arm does not learn there."""
  arm: str = ""
  reference: str = ""
  axis: str = ""
  at: str = "largest"
  margin: float = curves.SENSITIVITY_MARGIN
  learns: str = "interval"

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def quantity_text(self) -> str:
    return f"sensitivity {self.reference} - {self.arm} (Wortsman et al. 2023)"

  def rule(self) -> str:
    where = ("at the largest value either arm has (both must have it; the smaller values are "
             "the Holm family's other members and are reported; reproduced only when none is "
             "decisively negative)" if self.at == "largest" else "at the largest value both have")
    return (f"per {self.axis}, the learning-rate sensitivity per seed over the base grid both "
            f"arms share, {self.reference} - {self.arm} paired by seed, judged {where}: "
            f"reproduced when decisively positive; not reproduced when decisively negative or "
            f"equivalent within {self.margin:g} nats (TOST); inconclusive otherwise, or when "
            f"either arm does not learn there ({self.learns}).")

  def gap(self, data: Data, v) -> tuple[dict[int, float], dict[int, float], list[str]]:
    a, b = data.runs(self.reference, {self.axis: v}), data.runs(self.arm, {self.axis: v})
    rates = curves.base_rates(a, b)
    quiet = [n for n, rs in ((self.reference, a), (self.arm, b)) if not LEARNS[self.learns](rs)]
    return curves.sensitivity(a, rates), curves.sensitivity(b, rates), quiet

  def test(self, data: Data) -> claims.Test:
    ref, arm = data.values(self.reference, self.axis), data.values(self.arm, self.axis)
    shared = sorted(set(ref) & set(arm))
    top = max(ref + arm, default=None) if self.at == "largest" else (shared or [None])[-1]
    if not shared or shared[-1] != top:
      return _missing(self, self.rule(), f"{self.reference} and {self.arm} at the largest {self.axis}")
    at = shared if self.at == "largest" else [top]
    gaps = [self.gap(data, v) for v in at]
    effects = [stats.compare(a, b, self.margin) for a, b, _ in gaps]
    if self.at == "largest":
      outs = stats.outcomes(effects)
      p_diff, p_same = stats.holm([e.p for e in effects]), stats.holm([e.p_same for e in effects])
      pf = p_diff[-1] if outs[-1] == "higher" and "lower" not in outs else 1.0
      pa = p_same[-1] if outs[-1] == "same" else p_diff[-1] if outs[-1] == "lower" else 1.0
    else:
      outs = [""]
      a, b, _ = gaps[-1]
      _, pf, pa = stats.directed([a[s] - b[s] for s in sorted(set(a) & set(b))], "higher", self.margin)
    lines = [f"Per {self.axis}, {self.reference} - {self.arm}: " + "; ".join(
        f"{v} {e.text()}" + (f" ({o})" if o else "") for v, e, o in zip(at, effects, outs)) + "."]
    quiet = gaps[-1][2]
    return claims.Test(self.key, self.claim, self.rule(), lines, effects[-1],
                       f"Sensitivity {self.reference} - {self.arm} at {self.axis} {top}", pf, pa,
                       [(bool(quiet), f"{' and '.join(quiet)} does not learn at {top}.")],
                       tuple(sorted(set(gaps[-1][0]) & set(gaps[-1][1]))))


@dataclasses.dataclass(frozen=True)
class SensitivitySlope(Claim):
  """Wortsman et al. 2023: the learning-rate sensitivity grows with size. Per seed, the
  least-squares slope of ``arm``'s sensitivity against log2 ``axis`` over one base grid
  shared by every value where it learns (the others left out, at least ``min_points``);
  ``predict`` "rises" (or "falls") beyond 0, not reproduced when decisively the other way
  or within ``margin`` over the learning values' span (TOST). ``also``: arms whose slopes
  are reported, not judged."""
  arm: str = ""
  axis: str = ""
  predict: str = "rises"
  margin: float = curves.SENSITIVITY_MARGIN
  learns: str = "interval"
  min_points: int = 3
  same_first: bool = False
  also: tuple[str, ...] = ()

  def needs(self) -> tuple[str, ...]:
    return (self.arm, *self.also)

  def quantity_text(self) -> str:
    return f"slope of {self.arm}'s sensitivity (nats per doubling of {self.axis})"

  def rule(self) -> str:
    return (f"per seed, the least-squares {self.quantity_text()}, over one base grid shared by "
            f"every value (at least {self.min_points} values where the arm learns); a t "
            f"interval over seeds. Reproduced when decisively {'positive' if self.predict == 'rises' else 'negative'}; "
            f"not reproduced when decisively the other way or equivalent to flat (TOST: less "
            f"than {self.margin:g} nats over the span); inconclusive otherwise."
            + (f" The slopes of {', '.join(self.also)} are reported, not judged." if self.also else ""))

  def slopes(self, data: Data, arm: str) -> tuple[dict[int, float], list, list[str]]:
    runs = {v: data.runs(arm, {self.axis: v}) for v in data.values(arm, self.axis)}
    notes = [f"{at_text({self.axis: v})[2:]}: {arm} does not learn, left out"
             for v, rs in runs.items() if not LEARNS[self.learns](rs)]
    learning = {v: rs for v, rs in runs.items() if LEARNS[self.learns](rs)}
    rates = curves.base_rates(*learning.values()) if learning else []
    per_seed: dict[int, dict] = {}
    for v, rs in learning.items():
      for seed, s in curves.sensitivity(rs, rates).items():
        per_seed.setdefault(seed, {})[v] = s
    return seed_slopes(per_seed, self.min_points), list(learning), notes

  def test(self, data: Data) -> claims.Test:
    slopes, learning, notes = self.slopes(data, self.arm)
    if len(slopes) < 2:
      return _missing(self, self.rule(), f"{self.min_points} values where {self.arm} learns, "
                      f"for two seeds", notes)
    margin = self.margin / span(learning)
    e, pf, pa = directed_ps(list(slopes.values()), margin, self.same_first,
                            "higher" if self.predict == "rises" else "lower")
    lines = [f"Slope per doubling of {self.axis} (margin {margin:.3f}): {self.arm} {e.text()}."]
    others = [f"{a} {stats.one_sample(list(s.values())).text()}"
              for a in self.also for s in [self.slopes(data, a)[0]] if s]
    lines += (["Reported, not judged: " + "; ".join(others) + "."] if others else []) + [f"{n}." for n in notes]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), pf, pa,
                       [], tuple(slopes))

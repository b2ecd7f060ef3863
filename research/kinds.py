"""The library of claim kinds a study chooses its claims from: each a frozen record of its parameters, its test and its power plan.

A study (``research/study.py``) lists claims such as ``Difference("qk-norm lowers the best
loss", arm="pre+qk", reference="pre", predict="lower")``. Each kind turns a study's
``Data`` (its finished cells by arm and grid point) into a ``claims.Test``: the effect with
its interval, the p-value for the claim and against it, the guards that make it
inconclusive whatever the test says (an arm that does not learn, an optimum at the grid's
edge) and the seeds it used. The study decides each family of tests together under Holm
(``claims.decide_family``); what every kind shares (guards, the missing-runs verdict, the
decision) is in ``research/claims.py``, the maths in ``curves.py`` and ``stats.py``.

Every kind also states its plan (``plan``): the per-seed quantity, whether its test is
directed or an equivalence, and the effect it is sized for, from which ``research.power``
gives the seeds it needs at its family's Holm level.

The kinds:

- ``Difference``: the paired per-seed difference ``arm - reference`` of a quantity (the
  best loss at the fitted optimum, the log optimal rate, Wortsman et al.'s sensitivity),
  predicted lower or higher (beyond ``margin`` when one is given);
- ``Equivalent``: the same difference within ``+-margin`` (two one-sided tests);
- ``Slope``: the per-seed least-squares slope of a quantity against log2 of a grid axis
  (the optimal rate's drift with width, depth, horizon...), predicted falling, rising, or
  flat within ``+-margin``;
- ``Profile``: a probe at initialisation (``init`` in a cell record: a per-layer profile,
  last layer over first), predicted flat within a factor, or growing.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import numpy as np
from scipy import stats as sps

from research import claims
from research import curves
from research import power
from research import stats

NAN = float("nan")


# ----------------------------------------------------------------------------- the data


@dataclasses.dataclass(frozen=True)
class Data:
  """A study's finished cells: each run with its arm, its grid point and its record.

  ``point`` is a tuple of ``(axis, value)`` over the study's axes (``()`` with none)."""
  rows: tuple[tuple[str, tuple, curves.Run, Mapping[str, Any]], ...]

  @classmethod
  def of(cls, records: list[dict], axes: tuple[str, ...], to_run: Callable) -> "Data":
    rows = []
    for r in records:
      point = tuple((a, r["overrides"].get(a)) for a in axes)
      for arm in r["arms"]:
        rows.append((arm, point, to_run(r), r))
    return cls(tuple(rows))

  def runs(self, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[curves.Run]:
    """The runs of ``arm`` at the grid point ``at`` (axes not named: any value)."""
    at = dict(at)
    return [run for a, point, run, _ in self.rows
            if a == arm and all(dict(point).get(k) == v for k, v in at.items())]

  def records(self, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[Mapping[str, Any]]:
    at = dict(at)
    return [rec for a, point, _, rec in self.rows
            if a == arm and all(dict(point).get(k) == v for k, v in at.items())]

  def values(self, arm: str, axis: str) -> list:
    """The values ``axis`` takes among ``arm``'s runs, sorted."""
    return sorted({dict(p)[axis] for a, p, _, _ in self.rows if a == arm and axis in dict(p)})

  def points(self, arm: str) -> list[tuple]:
    return sorted({p for a, p, _, _ in self.rows if a == arm}, key=repr)

  def arms(self) -> list[str]:
    return list(dict.fromkeys(a for a, _, _, _ in self.rows))


# The per-seed quantities a claim can be on: name -> (what it is, function of an arm's runs).
QUANTITIES: dict[str, tuple[str, Callable[[list[curves.Run]], dict[int, float]]]] = {
    "best_loss": ("the best validation loss at the fitted optimum (nats)", curves.best_losses),
    "log_optimum": ("the natural log of the fitted optimal peak rate", curves.log_optima),
    "sensitivity": ("Wortsman et al.'s sensitivity over the base rates (nats)", curves.sensitivity),
}


def at_text(at: Mapping[str, Any] | tuple) -> str:
  return "".join(f", {k.split('.')[-1]} {v}" for k, v in dict(at).items())


def guards(named: dict[str, list[curves.Run]]) -> list[tuple[bool, str]]:
  """An arm that does not learn, or a learning arm with an optimum at the grid's edge."""
  lost = claims.not_learning(named)
  return [(bool(lost), f"Does not learn: {', '.join(lost)}." if lost else ""),
          claims.edge_guard(named)]


def se_of(e: stats.Effect) -> float:
  """The standard error behind an effect's t interval."""
  q = float(sps.t.ppf(1 - stats.ALPHA / 2, e.df)) if e.df > 0 else NAN
  return (e.hi - e.diff) / q if e.defined and q > 0 else NAN


def p_beyond(e: stats.Effect, bound: float, side: str) -> float:
  """One-sided t p-value that the mean lies ``above`` or ``below`` ``bound``, doubled
  (the two-sided test's level, as ``stats``' intervals are)."""
  se = se_of(e)
  if not math.isfinite(se):
    return NAN
  if se == 0:
    return 0.0 if (e.diff > bound if side == "above" else e.diff < bound) else 1.0
  t = (e.diff - bound) / se if side == "above" else (bound - e.diff) / se
  return float(min(1.0, 2 * sps.t.sf(t, e.df)))


def p_outside(e: stats.Effect, margin: float) -> float:
  """p that the mean lies outside ``+-margin``: beyond the margin on the estimate's side."""
  return p_beyond(e, margin, "above") if e.diff >= 0 else p_beyond(e, -margin, "below")


# ----------------------------------------------------------------------------- the kinds


@dataclasses.dataclass(frozen=True)
class Claim:
  """What every kind has: its text, its multiplicity family (None: judged alone) and the
  effect its power is planned for, with where that effect comes from."""
  claim: str
  family: str | None = "main"
  effect: float = NAN
  source: str = ""

  test_kind = "directed"

  @property
  def key(self) -> str:
    return self.claim

  def needs(self) -> tuple[str, ...]:
    raise NotImplementedError

  def quantity_text(self) -> str:
    raise NotImplementedError

  def plan(self) -> power.ClaimPlan:
    return power.ClaimPlan(self.key, self.claim, self.quantity_text(), self.test_kind,
                           self.effect, getattr(self, "margin", None) if self.test_kind ==
                           "equivalent" else None, self.source, self.needs())


@dataclasses.dataclass(frozen=True)
class Difference(Claim):
  """``arm - reference`` of a per-seed ``quantity`` at grid point ``at``, paired by seed:
  reproduced when its interval lies ``predict`` (lower or higher) of ``-margin``/``+margin``
  (0 without one), not reproduced when it lies on the other side or within a given margin."""
  arm: str = ""
  reference: str = ""
  predict: str = "lower"
  quantity: str = "best_loss"
  at: tuple = ()
  margin: float = NAN

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def quantity_text(self) -> str:
    return f"{self.arm} - {self.reference}: {QUANTITIES[self.quantity][0]}{at_text(self.at)}"

  def rule(self) -> str:
    bound = 0.0 if not math.isfinite(self.margin) else (-self.margin if self.predict == "lower" else self.margin)
    return (f"paired by seed, {self.quantity_text()}; reproduced when the difference lies "
            f"{'below' if self.predict == 'lower' else 'above'} {bound:+g} (its test at the "
            f"family's Holm level), not reproduced when it lies on the other side of 0"
            + (f" or within ±{self.margin:g}" if math.isfinite(self.margin) else "")
            + "; inconclusive otherwise, or when an arm does not learn or has an optimum at the "
            "grid's edge")

  def test(self, data: Data) -> claims.Test:
    named = {self.arm: data.runs(self.arm, self.at), self.reference: data.runs(self.reference, self.at)}
    f = QUANTITIES[self.quantity][1]
    a, b = f(named[self.arm]), f(named[self.reference])
    shared = sorted(set(a) & set(b))
    if len(shared) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"two seeds shared by {self.arm} and {self.reference}{at_text(self.at)}", self.rule()))
    margin = self.margin if math.isfinite(self.margin) else NAN
    e = stats.paired(a, b, margin)
    side, other = ("below", "above") if self.predict == "lower" else ("above", "below")
    bound = 0.0 if not math.isfinite(margin) else (-margin if self.predict == "lower" else margin)
    p_for = p_beyond(e, bound, side)
    p_against = p_beyond(e, 0.0, other)
    if math.isfinite(margin):
      p_against = min(p_against, e.p_same)
    return claims.Test(self.key, self.claim, self.rule(), [], e, self.quantity_text(), p_for,
                       p_against, guards(named), tuple(shared))


@dataclasses.dataclass(frozen=True)
class Equivalent(Difference):
  """``arm - reference`` within ``+-margin``: reproduced by two one-sided tests, not
  reproduced when the difference lies decisively outside the margin."""
  predict: str = "same"
  test_kind = "equivalent"

  def rule(self) -> str:
    return (f"paired by seed, {self.quantity_text()}; reproduced when two one-sided tests put "
            f"the difference within ±{self.margin:g} (margin: {self.source or 'stated'}), not "
            f"reproduced when it lies decisively outside it; inconclusive otherwise, or when an "
            f"arm does not learn or has an optimum at the grid's edge")

  def test(self, data: Data) -> claims.Test:
    t = Difference.test(self, data)
    if t.missing is not None:
      return t
    return dataclasses.replace(t, p_for=t.effect.p_same, p_against=p_outside(t.effect, self.margin))


def slope(xs: list[float], ys: list[float]) -> float:
  """The least-squares slope of ``ys`` on ``xs`` (nan with fewer than two distinct xs)."""
  if len(set(xs)) < 2:
    return NAN
  return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0])


@dataclasses.dataclass(frozen=True)
class Slope(Claim):
  """Per seed, the least-squares slope of ``quantity`` of ``arm`` against log2 of ``axis``
  over the axis' values (at least ``min_points`` per seed); over seeds, a one-sample t test:
  ``falls`` / ``rises`` (beyond 0), or ``flat`` (within ``+-margin`` per doubling)."""
  arm: str = ""
  axis: str = ""
  predict: str = "flat"
  quantity: str = "log_optimum"
  margin: float = NAN
  min_points: int = 3

  @property
  def test_kind(self) -> str:  # type: ignore[override]
    return "equivalent" if self.predict == "flat" else "directed"

  def needs(self) -> tuple[str, ...]:
    return (self.arm,)

  def quantity_text(self) -> str:
    return f"{self.arm}: slope of {QUANTITIES[self.quantity][0]} per doubling of {self.axis}"

  def rule(self) -> str:
    want = (f"within ±{self.margin:g} per doubling (two one-sided tests)" if self.predict == "flat"
            else f"{'below' if self.predict == 'falls' else 'above'} 0")
    return (f"per seed, the least-squares {self.quantity_text()} (at least {self.min_points} "
            f"values of the axis); reproduced when the mean slope lies {want}, not reproduced "
            f"when it lies decisively on the other side"
            + (" (outside the margin)" if self.predict == "flat" else " of 0") +
            "; inconclusive otherwise, or when the arm does not learn or has an optimum at the "
            "grid's edge at a value of the axis")

  def per_seed(self, data: Data) -> tuple[dict[int, float], dict[str, list[curves.Run]]]:
    f = QUANTITIES[self.quantity][1]
    named, by_seed = {}, {}
    for v in data.values(self.arm, self.axis):
      runs = data.runs(self.arm, {self.axis: v})
      named[f"{self.arm}{at_text({self.axis: v})}"] = runs
      for seed, q in f(runs).items():
        by_seed.setdefault(seed, []).append((math.log2(v), q))
    return ({s: slope(*zip(*pts)) for s, pts in by_seed.items() if len(pts) >= self.min_points},
            named)

  def test(self, data: Data) -> claims.Test:
    slopes, named = self.per_seed(data)
    if len(slopes) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"two seeds of {self.arm} at {self.min_points} values of {self.axis}", self.rule()))
    e = stats.one_sample(list(slopes.values()), self.margin)
    if self.predict == "flat":
      p_for, p_against = e.p_same, p_outside(e, self.margin)
    else:
      side = "below" if self.predict == "falls" else "above"
      p_for, p_against = p_beyond(e, 0.0, side), p_beyond(e, 0.0, "above" if side == "below" else "below")
    return claims.Test(self.key, self.claim, self.rule(), [], e, self.quantity_text(), p_for,
                       p_against, guards(named), tuple(sorted(slopes)))


@dataclasses.dataclass(frozen=True)
class Profile(Claim):
  """A probe at initialisation: per seed, log of ``probe``'s last layer over its first
  (``init`` of the cell record; one rate per seed suffices: init does not depend on it),
  ``flat`` within ``log(factor)`` or ``grows`` beyond 0."""
  arm: str = ""
  probe: str = "grad_mlp"
  predict: str = "flat"
  factor: float = 1.5
  at: tuple = ()

  @property
  def test_kind(self) -> str:  # type: ignore[override]
    return "equivalent" if self.predict == "flat" else "directed"

  @property
  def margin(self) -> float:
    return math.log(self.factor)

  def needs(self) -> tuple[str, ...]:
    return (self.arm,)

  def quantity_text(self) -> str:
    return f"{self.arm}: log({self.probe} last layer / first) at initialisation{at_text(self.at)}"

  def rule(self) -> str:
    want = (f"within a factor {self.factor:g} (two one-sided tests)" if self.predict == "flat"
            else "above 1 (grows with depth)")
    return f"per seed, {self.quantity_text()}; reproduced when the ratio lies {want}, not reproduced when it lies decisively on the other side"

  def test(self, data: Data) -> claims.Test:
    per_seed: dict[int, float] = {}
    for rec in data.records(self.arm, self.at):
      profile = (rec.get("init") or {}).get(self.probe)
      if profile and profile[0] and profile[-1] and int(rec["seed"]) not in per_seed:
        per_seed[int(rec["seed"])] = math.log(profile[-1] / profile[0])
    if len(per_seed) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"a probe at initialisation for two seeds of {self.arm}", self.rule()))
    e = stats.one_sample(list(per_seed.values()), self.margin)
    if self.predict == "flat":
      p_for, p_against = e.p_same, p_outside(e, self.margin)
    else:
      p_for, p_against = p_beyond(e, 0.0, "above"), p_beyond(e, 0.0, "below")
    return claims.Test(self.key, self.claim, self.rule(), [], e, self.quantity_text(), p_for,
                       p_against, [], tuple(sorted(per_seed)))

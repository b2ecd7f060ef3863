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


@dataclasses.dataclass
class Section:
  """A report section a claim or a report item adds: markdown lines, the plots it drew into
  the report's directory, and its numbers for results.json."""
  lines: list[str]
  plots: list[str | None] = dataclasses.field(default_factory=list)
  results: dict[str, Any] = dataclasses.field(default_factory=dict)


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

  def section(self, data: Data, out: str) -> Section | None:
    """What the claim adds to the report beyond its verdict (None: nothing)."""
    return None

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


# ----------------------------------------------------------------------------- norm_mlp
#
# The norm x MLP study's kinds (experiments/studies/norm_mlp.py): Versus, Interaction,
# ProfilePair, EndProbe, AllAlike, Diminishing; its report items RateTable and BestCurves.
# Each is decided alone by default (``family=None``), Holm over its own parts, a part's
# outcome that of ``stats.outcomes``: decisively within a margin counts against a claim and
# never for it. ``p_for`` and ``p_against`` are the claim's tests, so that its family of one
# decides exactly as its rule states.


def outcome_ps(effects: list[stats.Effect], predict: str) -> list[tuple[float, float]]:
  """Per part, ``(p for, p against)`` a prediction ``higher`` or ``lower``, Holm over the
  parts (for the difference and, apart, for the TOST): for, the adjusted p when the estimate
  points that way and the part is not decisively within its margin (else 1); against, the
  smaller of the adjusted TOST p and the adjusted p when it points the other way."""
  ps, same = stats.holm([e.p for e in effects]), stats.holm([e.p_same for e in effects])
  out = []
  for e, p, s in zip(effects, ps, same):
    if not math.isfinite(p):
      out.append((NAN, s if math.isfinite(s) else NAN))
      continue
    toward = e.diff > 0 if predict == "higher" else e.diff < 0
    within = math.isfinite(s) and s < stats.ALPHA
    away = e.diff != 0 and not toward
    out.append((p if toward and not within else 1.0, min(s if math.isfinite(s) else 1.0, p if away else 1.0)))
  return out


def lowest(ps) -> float:
  """The smallest finite p (nan when none): "some part decisively"."""
  finite = [p for p in ps if math.isfinite(p)]
  return min(finite) if finite else NAN


def highest(ps) -> float:
  """The largest p, nan when one is (an intersection: "every part decisively")."""
  ps = list(ps)
  return max(ps) if ps and all(math.isfinite(p) for p in ps) else NAN


def learn_guard(named: dict[str, list[curves.Run]], reason: str = "Does not learn") -> tuple[bool, str]:
  lost = claims.not_learning(named)
  return bool(lost), f"{reason}: {', '.join(lost)}." if lost else ""


def per_seed_values(data: Data, arm: str, quantity: str, other: str = "") -> dict[int, float]:
  """``quantity`` of ``arm`` per seed; the sensitivity over the base rates it shares with
  ``other`` (the same grid for both sides of a comparison)."""
  runs = data.runs(arm)
  if quantity == "sensitivity" and other:
    return curves.sensitivity(runs, curves.base_rates(runs, data.runs(other)))
  return QUANTITIES[quantity][1](runs)


@dataclasses.dataclass(frozen=True)
class Versus(Claim):
  """``arm - reference`` of a per-seed quantity, paired by seed (Welch when they share fewer
  than two): reproduced when decisively ``predict`` (higher or lower) of 0 and not within
  ``+-margin``; not reproduced when decisively the other way, within ``+-margin`` (TOST: too
  small to matter), or, with a finite ``against``, when it lies decisively on the far side
  of that bound (an effect smaller than its literature's); inconclusive otherwise. Its
  ``guard``: ``learns`` (both arms must learn), ``edge`` (no learning arm's optimum at the
  grid's edge)."""
  family: str | None = None  # decided alone, Holm over its own parts
  arm: str = ""
  reference: str = ""
  predict: str = "lower"
  quantity: str = "best_loss"
  margin: float = NAN
  against: float = NAN
  guard: tuple[str, ...] = ("learns", "edge")

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def quantity_text(self) -> str:
    return f"{self.arm} - {self.reference}: {QUANTITIES[self.quantity][0]}"

  def rule(self) -> str:
    far = "below" if self.predict == "higher" else "above"
    return (f"paired by seed, {self.quantity_text()}; reproduced when decisively {self.predict}"
            + (f" and not within ±{self.margin:g} (TOST)" if math.isfinite(self.margin) else "")
            + "; not reproduced when decisively the other way"
            + (f" or within ±{self.margin:g}" if math.isfinite(self.margin) else "")
            + (f" or decisively {far} {self.against:+g}" if math.isfinite(self.against) else "")
            + "; inconclusive otherwise" + "".join(
                {"learns": ", or when an arm does not learn",
                 "edge": ", or when a learning arm has a seed's optimum at the grid's edge"}[g]
                for g in self.guard) + ".")

  def test(self, data: Data) -> claims.Test:
    a = per_seed_values(data, self.arm, self.quantity, self.reference)
    b = per_seed_values(data, self.reference, self.quantity, self.arm)
    if not a or not b:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"{QUANTITIES[self.quantity][0]} of {self.arm} and {self.reference}", self.rule()))
    named = {self.arm: data.runs(self.arm), self.reference: data.runs(self.reference)}
    e = stats.compare(a, b, self.margin)
    (p_for, p_against), = outcome_ps([e], self.predict)
    if math.isfinite(self.against):
      p_against = lowest([p_against, p_beyond(e, self.against, "above" if self.predict == "lower" else "below")])
    lines = [f"{self.arm}: {curves.describe(named[self.arm])}; {self.reference}: "
             f"{curves.describe(named[self.reference])}."]
    guards = {"learns": learn_guard(named), "edge": claims.edge_guard(named)}
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), p_for,
                       p_against, [guards[g] for g in self.guard], tuple(sorted(set(a) & set(b))))


@dataclasses.dataclass(frozen=True)
class Interaction(Claim):
  """Per seed, ``(a - b) - (c - d)`` of a quantity over ``arms = (a, b, c, d)`` (a difference
  of differences: post-LN's warmup penalty minus pre-LN's, or the post - pre gap's growth
  with depth), a t interval over seeds: reproduced when decisively ``predict`` (with
  ``and_first``, ``a - b`` too, Holm over the two); not reproduced when decisively the other
  way or within ``+-margin`` (TOST); inconclusive otherwise, when an arm of ``learn`` does
  not learn, or when a learning arm has a seed's optimum at the grid's edge."""
  family: str | None = None  # decided alone, Holm over its own parts
  arms: tuple[str, ...] = ()
  predict: str = "higher"
  quantity: str = "best_loss"
  margin: float = NAN
  and_first: bool = False
  learn: tuple[str, ...] = ()

  def needs(self) -> tuple[str, ...]:
    return tuple(self.arms)

  def quantity_text(self) -> str:
    a, b, c, d = self.arms
    return f"({a} - {b}) - ({c} - {d}): {QUANTITIES[self.quantity][0]}"

  def rule(self) -> str:
    a, b = self.arms[:2]
    return (f"per seed, {self.quantity_text()}, a t interval over seeds; reproduced when "
            f"decisively {self.predict}" + (f", and {a} - {b} too (Holm over the two)" if self.and_first else "")
            + f"; not reproduced when the interaction is decisively the other way"
            + (f" or within ±{self.margin:g} (TOST)" if math.isfinite(self.margin) else "")
            + "; inconclusive otherwise" + (f", when {', '.join(self.learn)} does not learn" if self.learn else "")
            + ", or when a learning arm has a seed's optimum at the grid's edge.")

  def test(self, data: Data) -> claims.Test:
    named = {a: data.runs(a) for a in self.arms}
    if not all(named.values()):
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"runs of {', '.join(self.arms)}", self.rule()))
    q = {a: QUANTITIES[self.quantity][1](rs) for a, rs in named.items()}
    a, b, c, d = self.arms
    seeds = sorted(set.intersection(*(set(v) for v in q.values())))
    e = dataclasses.replace(stats.one_sample(
        [(q[a][s] - q[b][s]) - (q[c][s] - q[d][s]) for s in seeds], self.margin), kind="paired")
    parts = [e] + ([stats.paired(q[a], q[b])] if self.and_first else [])
    ps = outcome_ps(parts, self.predict)
    lines = [f"{arm}: {curves.describe(rs)}." for arm, rs in named.items()]
    if self.and_first:
      lines.append(f"{a} - {b}: {parts[1].text()}; {c} - {d}: {stats.paired(q[c], q[d]).text()}.")
    lines += self.at_rates(named)
    guards = [learn_guard({x: named[x] for x in self.learn}), claims.edge_guard(named)]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, "Interaction " + self.quantity_text(),
                       highest(p for p, _ in ps), ps[0][1], guards, tuple(seeds))

  def at_rates(self, named: dict[str, list[curves.Run]]) -> list[str]:
    """The interaction of the clipped loss at each rate all four arms share (reported, not judged)."""
    a, b, c, d = self.arms
    at = []
    for lr in sorted(set.intersection(*(set(curves.by_rate(rs)) for rs in named.values()))):
      per = {k: {r.seed: r.clipped for r in rs if r.lr == lr} for k, rs in named.items()}
      seeds = set.intersection(*(set(p) for p in per.values()))
      at.append(f"{lr:.2g}: " + stats.one_sample(
          [per[a][s] - per[b][s] - per[c][s] + per[d][s] for s in seeds]).text())
    return ["The interaction at each shared rate (reported, not judged): " + "; ".join(at) + "."] if at else []


def probe_ratio(record: Mapping[str, Any], when: str, probe: str, first: int = 0) -> float:
  """A per-layer probe's last entry over its ``first`` (``when``: ``init`` or ``end``); nan
  where it is missing or zero."""
  profile = (record.get(when) or {}).get(probe)
  if not profile or len(profile) <= first or not profile[first] or profile[-1] is None:
    return NAN
  return float(profile[-1] / profile[first])


def log_mean(values: dict[int, float]) -> stats.Effect:
  return stats.one_sample([math.log(v) for v in values.values()])


def exp_text(e: stats.Effect) -> str:
  if not math.isfinite(e.diff):
    return "none"
  ci = f" [95 % CI {math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}]" if e.defined else ""
  return f"{math.exp(e.diff):.2f}{ci} ({e.n} seeds)"


@dataclasses.dataclass(frozen=True)
class ProfilePair(Claim):
  """A probe at initialisation that grows with depth in one arm and stays flat in another
  (Xiong et al. 2020: post-LN's gradients grow toward the output, pre-LN's do not): per seed
  the log of its last layer over its first, a t interval over seeds for each arm; reproduced
  when ``grows``' lies above ``log(factor)`` and ``flat``'s within ``+-log(factor)``; not
  reproduced when ``grows``' lies below ``log(factor)`` or ``flat``'s wholly outside the
  band; inconclusive otherwise. ``reported``: further (grows, flat) pairs shown, not judged."""
  family: str | None = None  # decided alone, Holm over its own parts
  grows: str = ""
  flat: str = ""
  probe: str = "grad_mlp"
  factor: float = 1.5
  reported: tuple[tuple[str, str], ...] = ()

  def needs(self) -> tuple[str, ...]:
    return (self.grows, self.flat, *(a for pair in self.reported for a in pair))

  def quantity_text(self) -> str:
    return f"log({self.probe} last layer / first) at initialisation, {self.grows} and {self.flat}"

  def rule(self) -> str:
    return (f"per seed, {self.quantity_text()}, a t interval over seeds each: reproduced when "
            f"{self.grows}'s lies above log {self.factor:g} and {self.flat}'s within ±log "
            f"{self.factor:g}; not reproduced when {self.grows}'s lies below log {self.factor:g} "
            f"or {self.flat}'s wholly outside that band; inconclusive otherwise"
            + (f" ({', '.join(f'{g} against {f}' for g, f in self.reported)}: reported, not judged)"
               if self.reported else "") + ".")

  def per_seed(self, data: Data, arm: str) -> dict[int, float]:
    """One ratio per seed (a seed's cells share its initialisation): the first finite one."""
    out: dict[int, float] = {}
    for rec in data.records(arm):
      v = probe_ratio(rec, "init", self.probe)
      if math.isfinite(v) and v > 0:
        out.setdefault(int(rec["seed"]), v)
    return out

  def test(self, data: Data) -> claims.Test:
    lines = []
    for grows, flat in self.reported:
      lines.append(f"{grows}: {exp_text(log_mean(self.per_seed(data, grows)))}, {flat}: "
                   f"{exp_text(log_mean(self.per_seed(data, flat)))} (reported, not judged).")
    up, level = log_mean(self.per_seed(data, self.grows)), log_mean(self.per_seed(data, self.flat))
    if not up.n or not level.n:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"step-0 {self.probe} profiles of {self.grows} and {self.flat}", self.rule()))
    lines.insert(0, f"{self.probe} last layer / first (geometric mean): {self.grows} "
                    f"{exp_text(up)}, {self.flat} {exp_text(level)}.")
    g = math.log(self.factor)
    p_for = highest([p_beyond(up, g, "above"), p_beyond(level, g, "below"), p_beyond(level, -g, "above")])
    p_against = lowest([p_beyond(up, g, "below"), p_beyond(level, g, "above"), p_beyond(level, -g, "below")])
    return claims.Test(self.key, self.claim, self.rule(), lines, up, f"{self.grows} log(last/first)",
                       p_for, p_against, [], ())

  def section(self, data: Data, out: str) -> Section:
    """A figure: the arms' per-layer gradient norms and residual stream at initialisation."""
    arms = (self.grows, self.flat, *(a for pair in self.reported for a in pair))
    panels = tuple(dict.fromkeys((p, "init") for p in ("grad_attn", self.probe, "residual_norm")))
    return Section([], [plot_profiles(data, arms, panels, out, "init_profiles.png")])


@dataclasses.dataclass(frozen=True)
class EndProbe(Claim):
  """A probe at the end of training of ``arm``, one model per seed (at the seed's best rate
  tried): per seed the log of the probe's last entry over its ``first`` (1: the first block,
  0 being the embedding), a t interval over seeds; reproduced when it lies above
  ``log(factor)``, not reproduced when below, inconclusive otherwise."""
  family: str | None = None  # decided alone, Holm over its own parts
  arm: str = ""
  probe: str = "residual_norm"
  first: int = 1
  factor: float = 1.5
  beside: tuple[str, ...] = ()  # arms drawn beside it in its figure

  def needs(self) -> tuple[str, ...]:
    return (self.arm,)

  def quantity_text(self) -> str:
    return f"{self.arm}: log({self.probe} last / entry {self.first}) at the end, at each seed's best rate"

  def rule(self) -> str:
    return (f"per seed, {self.quantity_text()}, a t interval over seeds: reproduced when it "
            f"lies above log {self.factor:g}, not reproduced when below; inconclusive otherwise.")

  def test(self, data: Data) -> claims.Test:
    rows = [(run, rec) for a, _, run, rec in data.rows if a == self.arm]
    opts = curves.optima([run for run, _ in rows])
    end, init = {}, {}
    for run, rec in rows:
      v = probe_ratio(rec, "end", self.probe, self.first)
      if run.seed in opts and run.lr == opts[run.seed].grid_lr and not run.diverged and math.isfinite(v) and v > 0:
        end[run.seed] = v
      v = probe_ratio(rec, "init", self.probe, self.first)
      if math.isfinite(v) and v > 0:
        init.setdefault(run.seed, v)
    if len(end) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"end-of-training probes of two seeds of {self.arm}", self.rule()))
    e = log_mean(end)
    lines = [f"{self.arm}, {self.probe} last / entry {self.first} at the end of training: "
             f"{exp_text(e)}" + (f"; at init {exp_text(log_mean(init))}" if init else "") + "."]
    g = math.log(self.factor)
    return claims.Test(self.key, self.claim, self.rule(), lines, e, "log(last/first) at the end",
                       p_beyond(e, g, "above"), p_beyond(e, g, "below"), [], tuple(sorted(end)))

  def section(self, data: Data, out: str) -> Section:
    """A figure: the probe per layer at initialisation and at the end (mean over models)."""
    panels = ((self.probe, "init"), (self.probe, "end"))
    return Section([], [plot_profiles(data, (self.arm, *self.beside), panels, out, f"{self.probe}.png")])


@dataclasses.dataclass(frozen=True)
class AllAlike(Claim):
  """Every pair of ``arms`` (those with runs) alike in a per-seed quantity, paired by seed,
  within ``margin`` (with ``relative``, that fraction of ``reference``'s mean): reproduced
  when every pair is equivalent (TOST, Holm over the pairs); not reproduced when some pair
  lies decisively outside the margin; inconclusive otherwise, or when a learning arm has a
  seed's optimum at the grid's edge."""
  family: str | None = None  # decided alone, Holm over its own parts
  arms: tuple[str, ...] = ()
  reference: str = ""
  quantity: str = "best_loss"
  margin: float = NAN
  relative: bool = True
  test_kind = "equivalent"

  def needs(self) -> tuple[str, ...]:
    return tuple(self.arms)

  def quantity_text(self) -> str:
    return f"every pair of {', '.join(self.arms)}: {QUANTITIES[self.quantity][0]}"

  def rule(self) -> str:
    within = f"{self.margin:.0%} of {self.reference}'s mean" if self.relative else f"±{self.margin:g}"
    return (f"{self.quantity_text()}, paired by seed: reproduced when every pair is equivalent "
            f"within {within} (TOST, Holm over the pairs); not reproduced when some pair lies "
            f"decisively outside that margin; inconclusive otherwise, or when a learning arm has "
            f"a seed's optimum at the grid's edge.")

  def test(self, data: Data) -> claims.Test:
    named = {a: data.runs(a) for a in self.arms if data.runs(a)}
    if len(named) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"two of {', '.join(self.arms)}", self.rule()))
    q = {a: QUANTITIES[self.quantity][1](rs) for a, rs in named.items()}
    ref = q.get(self.reference) or next(iter(q.values()))
    margin = self.margin * stats.one_sample(list(ref.values())).diff if self.relative else self.margin
    pairs = [(a, b) for i, a in enumerate(named) for b in list(named)[i + 1:]]
    effects = [stats.compare(q[a], q[b], margin) for a, b in pairs]
    same = stats.holm([e.p_same for e in effects])
    p_against = lowest([p for e in effects for p in (p_beyond(e, margin, "above"), p_beyond(e, -margin, "below"))])
    lines = ["; ".join(f"{a}: {curves.describe(rs)}" for a, rs in named.items()) + ".",
             f"Margin {margin:.3f}. Pairs: " + "; ".join(
                 f"{a} - {b} {e.text()}" for (a, b), e in zip(pairs, effects)) + "."]
    largest = max(effects, key=lambda e: abs(e.diff) if math.isfinite(e.diff) else -1)
    return claims.Test(self.key, self.claim, self.rule(), lines, largest, "Largest pairwise difference",
                       highest(same), p_against, [claims.edge_guard(named)], ())


@dataclasses.dataclass(frozen=True)
class Diminishing(Claim):
  """Along ``arms`` in order (at least three with runs: e.g. MLP ratios 1, 2, 4, 8), each step
  lowers a per-seed quantity with diminishing returns: each step compared paired by seed,
  and each later gain against the first (Holm over all of them); reproduced when the first
  step is decisively lower and no part decisively the other way (a step up, a later gain
  larger than the first); not reproduced when some part is; inconclusive otherwise, or when
  a learning arm has a seed's optimum at the grid's edge."""
  family: str | None = None  # decided alone, Holm over its own parts
  arms: tuple[str, ...] = ()
  quantity: str = "best_loss"

  def needs(self) -> tuple[str, ...]:
    return tuple(self.arms)

  def quantity_text(self) -> str:
    return f"the steps along {', '.join(self.arms)}: {QUANTITIES[self.quantity][0]}"

  def rule(self) -> str:
    return (f"{self.quantity_text()}, each step and each later gain against the first paired by "
            f"seed (Holm over all): reproduced when the first step is decisively lower and no "
            f"part decisively the other way; not reproduced when a step is decisively higher or "
            f"a later gain decisively larger than the first; inconclusive otherwise, or when a "
            f"learning arm has a seed's optimum at the grid's edge.")

  def test(self, data: Data) -> claims.Test:
    named = {a: data.runs(a) for a in self.arms if data.runs(a)}
    if len(named) < 3:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"three of {', '.join(self.arms)}", self.rule()))
    keys = list(named)
    q = {a: QUANTITIES[self.quantity][1](rs) for a, rs in named.items()}
    gain = lambda a, b: {s: q[a][s] - q[b][s] for s in set(q[a]) & set(q[b])}
    steps = [stats.compare(q[b], q[a]) for a, b in zip(keys, keys[1:])]
    growth = [stats.compare(gain(a, b), gain(keys[0], keys[1])) for a, b in zip(keys[1:], keys[2:])]
    ps = outcome_ps(steps + growth, "lower")
    lines = ["; ".join(f"{a}: {curves.describe(rs)}" for a, rs in named.items()) + ".",
             "Steps: " + "; ".join(f"{a} -> {b} {e.text()}" for a, b, e in zip(keys, keys[1:], steps)) + ".",
             "Later gains minus the first: " + "; ".join(
                 f"{a} -> {b} {e.text()}" for a, b, e in zip(keys[1:], keys[2:], growth)) + "."]
    # Against: some part decisively higher (a step up, a later gain larger than the first).
    p_against = lowest([p if e.diff > 0 else NAN for e, p in zip(steps + growth, stats.holm([e.p for e in steps + growth]))])
    p_for = ps[0][0] if not p_against < stats.ALPHA else 1.0
    return claims.Test(self.key, self.claim, self.rule(), lines, steps[0], f"First step {keys[0]} -> {keys[1]}",
                       p_for, p_against, [claims.edge_guard(named)], ())


# The norm x MLP study's report items: the loss against the rate per arm (a table and a
# figure per comparison), per-layer profiles, and the loss curves at each arm's best rate.


def _pm(c: dict) -> str:
  return f"{c['mean']:.3f}" + ("" if np.isnan(c["std"]) else f" ± {c['std']:.3f}") + (
      f" ({c['diverged']}✕)" if c["diverged"] else "")


@dataclasses.dataclass(frozen=True)
class RateTable:
  """A report item: per arm (and grid point), its loss against the rate: the fitted optimum
  and the loss there with their intervals over seeds, the seeds bracketed, whether it learns,
  the sensitivity over its base grid, the models that diverged, and the mean ± std over seeds
  at each rate (a diverged model at the loss at init); then a figure per comparison
  (``comparisons``: ``(key, title, arms, beside)``, drawn when one of ``arms`` has runs at
  two rates, with the arms ``beside`` them for reference)."""
  comparisons: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = ()

  def table(self, data: Data) -> dict[str, dict]:
    out = {}
    for arm in sorted(data.arms()):
      for point in data.points(arm):
        rs = data.runs(arm, point)
        curve = curves.rate_curve(rs)
        out[arm + at_text(point)] = {"rates": {f"{lr:g}": c for lr, c in curve.items()}, **curves.summary(rs),
                                     "cells": len(rs), "diverged": sum(r.diverged for r in rs)}
    return out

  def section(self, data: Data, out: str) -> Section:
    from research import report as reporting  # pylint: disable=import-outside-toplevel
    table = self.table(data)
    rates = sorted({float(lr) for a in table.values() for lr in a["rates"]})
    f = reporting.interval_text
    lines = ["## Learning-rate curves per arm", "",
             "Final validation loss (mean ± std over seeds, a diverged seed counted at the loss at "
             "init) at each peak rate; ✕ = diverged seeds. Fitted optimum: the geometric mean over "
             "seeds of each seed's fitted optimal rate, and the mean of the fitted losses there, "
             "with 95 % t intervals; bracketed: seeds whose best rate tried is not the smallest or "
             f"largest; learns: best loss decisively {curves.LEARNS_BY} nats below the unigram "
             "baseline; sensitivity (Wortsman et al. 2023) per seed over the arm's base grid.", ""]
    if table and all(len(a["rates"]) == 1 for a in table.values()):
      lines += ["**Every arm was trained at a single learning rate**, so no optimum is bracketed: "
                "the claims on optima are inconclusive by rule.", ""]
    lines += ["| arm | fitted optimum [95 % CI] | loss there [95 % CI] | bracketed | learns | "
              "LR sensitivity [95 % CI] | diverged | " + " | ".join(f"{lr:.3g}" for lr in rates) + " |",
              "|---" * (7 + len(rates)) + "|"]
    for arm, a in table.items():
      cells = [_pm(a["rates"][f"{lr:g}"]) if f"{lr:g}" in a["rates"] else "" for lr in rates]
      lines.append(f"| {arm} | {f(a['optimum_lr'], a['optimum_lr_interval'], '.2g')} | "
                   f"{f(a['optimum_loss'], a['optimum_loss_interval'], '.3f')} | "
                   f"{a['bracketed_seeds']}/{a['seeds']} | {'yes' if a['learns'] else 'no'} | "
                   f"{f(a['sensitivity'], a['sensitivity_interval'], '.3f')} | "
                   f"{a['diverged']}/{a['cells']} | " + " | ".join(cells) + " |")
    return Section(lines + [""], [self.plot(data, *c, out) for c in self.comparisons], {"arms": table})

  def plot(self, data: Data, key: str, title: str, arms: tuple[str, ...], beside: tuple[str, ...],
           out: str) -> str | None:
    """Final loss (mean ± std over seeds) against the rate per arm, with the loss at init and
    the unigram baseline (a model that learnt only token frequencies)."""
    from research import report as reporting  # pylint: disable=import-outside-toplevel
    if not any(len(curves.by_rate(data.runs(a))) > 1 for a in arms):
      return None
    runs = {a: data.runs(a) for a in arms + beside if data.runs(a)}
    fig = reporting.figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, (arm, rs) in enumerate(runs.items()):
      curve = curves.rate_curve(rs)
      lrs = list(curve)
      ax.errorbar(lrs, [curve[lr]["mean"] for lr in lrs], yerr=np.nan_to_num([curve[lr]["std"] for lr in lrs]),
                  marker="o", ms=4, capsize=3, color=f"C{i}", label=arm)
      div = [lr for lr in lrs if curve[lr]["diverged"]]
      ax.plot(div, [curve[lr]["mean"] for lr in div], "x", color=f"C{i}", ms=10, mew=2)
    every = [r for _, _, r, _ in data.rows]
    initial, unigram = float(np.nanmedian([r.initial for r in every])), curves.unigram(every)
    ax.axhline(initial, color="gray", ls=":", lw=1, label=f"loss at init ({initial:.2f})")
    if np.isfinite(unigram):
      ax.axhline(unigram, color="gray", ls="--", lw=1, label=f"unigram baseline ({unigram:.2f})")
    ax.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss (nats)",
           title=f"{title}\n(mean ± std over seeds; ✕ = a seed diverged, counted at the init loss)")
    ax.legend(fontsize=7)
    return reporting.save(fig, out, f"lr_{key}.png")


def mean_profile(data: Data, arm: str, probe: str, when: str) -> np.ndarray | None:
  """The mean of ``arm``'s per-layer ``probe`` (``when``: ``init``, one per seed; ``end``,
  each completed model)."""
  seen = {}
  for _, _, run, rec in (r for r in data.rows if r[0] == arm):
    prof = (rec.get(when) or {}).get(probe)
    if prof and all(v is not None for v in prof) and np.all(np.isfinite(prof)) and (when == "init" or not run.diverged):
      seen.setdefault(run.seed if when == "init" else rec["name"], prof)
  return np.mean(list(seen.values()), axis=0) if seen else None


def plot_profiles(data: Data, arms: tuple[str, ...], panels: tuple[tuple[str, str], ...], out: str,
                  name: str) -> str | None:
  """Per-layer probes, a panel per ``(probe, when)``, a line per arm (mean over its models)."""
  from research import report as reporting  # pylint: disable=import-outside-toplevel
  fig = reporting.figure(figsize=(4.3 * len(panels), 4))
  axes = fig.subplots(1, len(panels))
  drawn = False
  for ax, (probe, when) in zip(np.atleast_1d(axes), panels):
    for i, arm in enumerate(arms):
      prof = mean_profile(data, arm, probe, when)
      if prof is not None:
        first = 0 if probe == "residual_norm" else 1  # the residual stream starts at the embedding
        ax.plot(range(first, first + len(prof)), prof, "o-", ms=4, color=f"C{i}", label=arm)
        drawn = True
    ax.set(title=f"{probe} {'at init' if when == 'init' else 'at the end'}", yscale="log",
           xlabel="after block (0 = embedding)" if probe == "residual_norm" else "layer")
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=7)
  return reporting.save(fig, out, name) if drawn else None


@dataclasses.dataclass(frozen=True)
class BestCurves:
  """A report item: the training and validation loss of each of ``arms`` at each seed's best
  rate tried, a line per seed."""
  arms: tuple[str, ...] = ()

  def section(self, data: Data, out: str) -> Section:
    from research import report as reporting  # pylint: disable=import-outside-toplevel
    arms = [a for a in self.arms if data.runs(a)]
    if not arms:
      return Section([])
    fig = reporting.figure(figsize=(12, 4.5))
    axes = fig.subplots(1, 2, sharey=True)
    for i, arm in enumerate(arms):
      opts = curves.optima(data.runs(arm))
      best = np.exp(np.mean([np.log(o.grid_lr) for o in opts.values()])) if opts else float("nan")
      mine = sorted(((run.seed, rec) for a, _, run, rec in data.rows
                     if a == arm and run.seed in opts and run.lr == opts[run.seed].grid_lr), key=lambda x: x[0])
      for j, (_, rec) in enumerate(mine):
        for ax, key in ((axes[0], "train_curve"), (axes[1], "val_curve")):
          pts = [(s, l) for s, l in rec.get(key, []) if l is not None and np.isfinite(l)]
          if pts:
            ax.plot(*zip(*pts), color=f"C{i}", lw=1, alpha=0.8, label=f"{arm} @ ~{best:.2g}" if j == 0 else None)
    for ax, title in zip(axes, ("train loss", "validation loss")):
      ax.set(title=f"{title} at each arm's best rate", xlabel="step")
    axes[0].set_ylabel("nats / token")
    if axes[1].get_legend_handles_labels()[0]:
      axes[1].legend(fontsize=7)
    return Section([], [reporting.save(fig, out, "loss_curves.png")])

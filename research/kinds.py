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
  last layer over first), predicted flat within a factor, or growing (beyond a factor);
- ``Contrast``: a signed sum of arms' per-seed quantity (a difference, a difference of
  differences), "none" within a margin an outcome; ``AllEquivalent``: several arms each
  within a margin of one reference; ``NotRun``: a claim the plan sized and its budget cut
  (these three first for the confirmatory norm x MLP study).
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
  """A probe at initialisation: per seed, log of ``probe``'s last layer over its layer
  ``first`` (``init`` of the cell record; one rate per seed suffices: init does not depend on
  it; ``first=1`` for a residual profile whose entry 0 is the embedding), ``flat`` within
  ``log(factor)`` or ``grows`` beyond ``log(beyond)`` (the effect is then the mean minus
  it). The same ratio of the arms in ``report`` is reported beside it, not judged."""
  arm: str = ""
  probe: str = "grad_mlp"
  predict: str = "flat"
  factor: float = 1.5
  at: tuple = ()
  first: int = 0
  beyond: float = 1.0
  report: tuple[str, ...] = ()

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
            else f"above {self.beyond:g} (grows with depth)")
    return f"per seed, {self.quantity_text()}; reproduced when the ratio lies {want}, not reproduced when it lies decisively on the other side"

  @staticmethod
  def figures(profiles: list["Profile"], data: Data, out: str) -> list[str]:
    """Its report figures (``Study.page`` asks each kind with ``figures`` for its claims')."""
    return profile_figure(profiles, data, out)

  def ratios(self, data: Data, arm: str) -> dict[int, float]:
    """Per seed, log of the probe's last layer over layer ``first`` (the first record of a seed)."""
    per_seed: dict[int, float] = {}
    for rec in data.records(arm, self.at):
      profile = (rec.get("init") or {}).get(self.probe)
      if (profile and len(profile) > self.first and profile[self.first] and profile[-1]
          and int(rec["seed"]) not in per_seed):
        per_seed[int(rec["seed"])] = math.log(profile[-1] / profile[self.first])
    return per_seed

  def test(self, data: Data) -> claims.Test:
    per_seed = self.ratios(data, self.arm)
    if len(per_seed) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"a probe at initialisation for two seeds of {self.arm}", self.rule()))
    lines = [f"{a}: {self.probe} last / first at initialisation {ratio_text(self.ratios(data, a))}"
             + (" (reported, not judged)." if a != self.arm else ".") for a in (self.arm, *self.report)]
    if self.predict == "flat":
      e = stats.one_sample(list(per_seed.values()), self.margin)
      p_for, p_against = e.p_same, p_outside(e, self.margin)
    else:
      e = stats.one_sample([v - math.log(self.beyond) for v in per_seed.values()], self.margin)
      p_for, p_against = p_beyond(e, 0.0, "above"), p_beyond(e, 0.0, "below")
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text()
                       + (f" - log {self.beyond:g}" if self.predict != "flat" and self.beyond != 1 else ""),
                       p_for, p_against, [], tuple(sorted(per_seed)))


def profile_figure(profiles: list["Profile"], data: Data, out: str) -> list[str]:
  """A report's figure per probe the ``Profile`` claims judge: the mean of each arm's
  per-layer profile at initialisation (its arm and the ones it reports), on a log scale."""
  from research import report as reporting  # pylint: disable=import-outside-toplevel
  names = []
  for probe in dict.fromkeys(p.probe for p in profiles):
    arms = dict.fromkeys(a for p in profiles if p.probe == probe for a in (p.arm, *p.report))
    fig = reporting.figure(figsize=(6, 4))
    ax = fig.add_subplot(1, 1, 1)
    for i, arm in enumerate(arms):
      rows = [(rec.get("init") or {}).get(probe) for rec in data.records(arm)]
      rows = [r for r in rows if r and len(r) == len(rows[0] or ())]
      if rows:
        ax.plot(range(len(rows[0])), np.exp(np.log(np.asarray(rows, float)).mean(0)), "o-",
                color=f"C{i}", label=f"{arm} ({len(rows)} cells)")
    if not ax.get_legend_handles_labels()[0]:
      continue
    ax.set(yscale="log", xlabel="layer" + (" (0: the embedding)" if probe == "residual_norm" else ""),
           ylabel=f"{probe} at initialisation (geometric mean)")
    ax.legend(fontsize=7)
    names.append(reporting.save(fig, out, f"init_{probe}.png"))
  return names


def ratio_text(logs: Mapping[int, float]) -> str:
  """A geometric mean of per-seed ratios with its interval, from their logs."""
  e = stats.one_sample(list(logs.values()))
  if not math.isfinite(e.diff):
    return "none"
  ci = f" [95 % CI {math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}]" if e.defined else ""
  return f"{math.exp(e.diff):.2f}{ci} ({e.n} seeds)"


# ----------------------------------------------------------------------------- norm_mlp_confirm
# The confirmatory norm x MLP study's kinds: a contrast of arms (a difference, or a
# difference of differences) whose "none" is an outcome; several arms equivalent to one
# reference at once; a claim the power plan sized but whose arms its budget cut.


def on_shared_rates(named: dict[str, list[curves.Run]]) -> dict[str, list[curves.Run]]:
  """Each named arm's runs at the rates every one of them was trained at."""
  rates = set.intersection(*(set(curves.by_rate(rs)) for rs in named.values())) if named else set()
  return {k: [r for r in rs if r.lr in rates] for k, rs in named.items()}


def per_rate_text(named: dict[str, list[curves.Run]], combine: Callable[[dict], dict]) -> str:
  """At each rate every named arm has, ``combine({arm: {seed: loss}})`` -> per-seed values,
  their mean with its interval: ``1e-03: +0.012 nats [...]; ...``."""
  rates = sorted(set.intersection(*(set(curves.by_rate(rs)) for rs in named.values())))
  return "; ".join(f"{lr:.2g}: " + stats.one_sample(list(combine(
      {k: {r.seed: r.clipped for r in rs if r.lr == lr} for k, rs in named.items()}).values())).text()
      for lr in rates)


def signed(terms: tuple[tuple[str, int], ...], per: Mapping[str, Mapping[int, float]]) -> dict[int, float]:
  """Per seed every term has, ``sum(sign * per[arm][seed])``."""
  seeds = sorted(set.intersection(*(set(per[a]) for a, _ in terms)))
  return {s: sum(sign * per[a][s] for a, sign in terms) for s in seeds}


@dataclasses.dataclass(frozen=True)
class Contrast(Claim):
  """Per seed, ``sum(sign * quantity(arm))`` over ``terms`` at grid point ``at``: ``(("a", 1),
  ("b", -1))`` is a - b paired by seed, four terms a difference of differences (an
  interaction). ``predict`` ``higher``/``lower``: reproduced when the mean lies decisively
  on that side of 0, not reproduced when decisively on the other side or equivalent to 0
  within ``none_within`` (TOST: an effect too small to matter); ``same``: reproduced when
  within ``+-margin`` (TOST), not reproduced when decisively outside. Guards: the arms in
  ``learners`` (None: every term's) must learn; with ``edge``, a learning arm's optimum at
  the grid's edge makes it inconclusive. With ``shared_rates`` each arm's quantity is taken
  over the rates all its terms were trained at. Its lines report each arm's optimum and the
  contrast at each shared rate."""
  terms: tuple[tuple[str, int], ...] = ()
  predict: str = "higher"
  quantity: str = "best_loss"
  at: tuple = ()
  none_within: float = NAN
  margin: float = NAN
  shared_rates: bool = False
  learners: tuple[str, ...] | None = None
  edge: bool = True
  name: str = ""  # the effect's name in the report

  @property
  def test_kind(self) -> str:  # type: ignore[override]
    return "equivalent" if self.predict == "same" else "directed"

  def needs(self) -> tuple[str, ...]:
    return tuple(a for a, _ in self.terms)

  def quantity_text(self) -> str:
    expr = " ".join(f"{'+' if s > 0 else '-'} {a}" for a, s in self.terms).removeprefix("+ ")
    return (f"{expr}: {QUANTITIES[self.quantity][0]}{at_text(self.at)}"
            + (", over the rates they share" if self.shared_rates else ""))

  def rule(self) -> str:
    if self.predict == "same":
      want = (f"reproduced when two one-sided tests put it within ±{self.margin:g}, not "
              f"reproduced when it lies decisively outside")
    else:
      want = (f"reproduced when it lies decisively {'below' if self.predict == 'lower' else 'above'} "
              f"0 (its test at the family's Holm level), not reproduced when decisively on the "
              f"other side" + (f" or equivalent to 0 within ±{self.none_within:g} (TOST)"
                               if math.isfinite(self.none_within) else ""))
    return (f"per seed, {self.quantity_text()}; {want}; inconclusive otherwise"
            + (f", or when {', '.join(self.learners if self.learners is not None else self.needs()) or 'no arm'}"
               " does not learn" if self.learners != () else "")
            + (", or when a learning arm has a seed's optimum at the grid's edge" if self.edge else ""))

  def test(self, data: Data) -> claims.Test:
    named = {a: data.runs(a, self.at) for a in self.needs()}
    if self.shared_rates:
      named = on_shared_rates(named)
    f = QUANTITIES[self.quantity][1]
    per = {a: f(rs) for a, rs in named.items()}
    values = signed(self.terms, per)
    if len(values) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"two seeds shared by {', '.join(named)}{at_text(self.at)}", self.rule()))
    if self.predict == "same":
      e = stats.one_sample(list(values.values()), self.margin)
      p_for, p_against = e.p_same, p_outside(e, self.margin)
    else:
      e = stats.one_sample(list(values.values()), self.none_within)
      side, other = ("below", "above") if self.predict == "lower" else ("above", "below")
      p_for, p_against = p_beyond(e, 0.0, side), p_beyond(e, 0.0, other)
      if math.isfinite(self.none_within):
        p_against = min(p_against, e.p_same)
    lost = claims.not_learning({a: named[a] for a in (self.needs() if self.learners is None else self.learners)})
    checks = [(bool(lost), f"Does not learn: {', '.join(lost)}." if lost else "")]
    checks += [claims.edge_guard(named)] if self.edge else []
    lines = [f"{a}: {curves.describe(rs)}; {self.quantity} {stats.one_sample(list(per[a].values())).text()}."
             for a, rs in named.items()]
    lines.append("At each shared rate (reported, not judged): "
                 + per_rate_text(named, lambda per: signed(self.terms, per)) + ".")
    return claims.Test(self.key, self.claim, self.rule(), lines, dataclasses.replace(e, kind="paired"),
                       self.name or self.quantity_text(), p_for, p_against, checks, tuple(values))


@dataclasses.dataclass(frozen=True)
class AllEquivalent(Claim):
  """Every one of ``arms`` equivalent to ``reference`` within ``+-margin`` (with
  ``relative``, a fraction of the reference's mean quantity), paired by seed at grid point
  ``at``: an intersection-union test, reproduced when every arm's TOST passes (its p the
  largest of theirs), not reproduced when one lies decisively outside the margin
  (Bonferroni over the arms); its effect is the largest difference. With ``shared_rates``
  each pair's quantities are over the rates the two share; a pair's optimum at the grid's
  edge makes it inconclusive. The plan sizes it at ``margin * planned_reference`` when
  ``relative``."""
  arms: tuple[str, ...] = ()
  reference: str = ""
  quantity: str = "best_loss"
  at: tuple = ()
  margin: float = NAN
  relative: bool = False
  planned_reference: float = 1.0
  shared_rates: bool = False
  test_kind = "equivalent"

  def needs(self) -> tuple[str, ...]:
    return (*self.arms, self.reference)

  def quantity_text(self) -> str:
    return (f"each of {', '.join(self.arms)} - {self.reference}: {QUANTITIES[self.quantity][0]}"
            f"{at_text(self.at)}" + (", over the rates each pair shares" if self.shared_rates else ""))

  def rule(self) -> str:
    within = f"{self.margin:.0%} of {self.reference}'s mean" if self.relative else f"±{self.margin:g}"
    return (f"paired by seed, {self.quantity_text()}; reproduced when every one is within "
            f"{within} (TOST each; an intersection-union test: all must pass), not reproduced when "
            f"one lies decisively outside (Bonferroni over the {len(self.arms)}); inconclusive "
            f"otherwise, or when a seed's optimum is at the grid's edge")

  def plan(self) -> power.ClaimPlan:
    m = self.margin * (self.planned_reference if self.relative else 1.0)
    return power.ClaimPlan(self.key, self.claim, self.quantity_text(), "equivalent", self.effect,
                           m, self.source, self.needs())

  def test(self, data: Data) -> claims.Test:
    f = QUANTITIES[self.quantity][1]
    ref = data.runs(self.reference, self.at)
    margin = self.margin * (stats.one_sample(list(f(ref).values())).diff if self.relative else 1.0)
    lines, checks, results, seeds = [f"Margin {margin:.3f}."], [], [], set()
    for arm in self.arms:
      named = {arm: data.runs(arm, self.at), self.reference: ref}
      named = on_shared_rates(named) if self.shared_rates else named
      x = signed(((arm, 1), (self.reference, -1)), {a: f(rs) for a, rs in named.items()})
      if len(x) < 2:
        return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
            self.claim, f"two seeds shared by {arm} and {self.reference}{at_text(self.at)}", self.rule()))
      e = dataclasses.replace(stats.one_sample(list(x.values()), margin), kind="paired")
      results.append((e, e.p_same, p_outside(e, margin)))
      seeds |= set(x)
      lines.append(f"{arm} - {self.reference}: {e.text()}; at each shared rate (reported): "
                   + per_rate_text(named, lambda p, a=arm: signed(((a, 1), (self.reference, -1)), p)) + ".")
      checks.append(claims.edge_guard(named))
    ps = [p for _, p, _ in results]
    p_for = max(ps) if all(math.isfinite(p) for p in ps) else NAN
    against = [p for _, _, p in results if math.isfinite(p)]
    p_against = min(1.0, len(results) * min(against)) if against else NAN
    largest = max((e for e, _, _ in results), key=lambda e: abs(e.diff) if math.isfinite(e.diff) else -1)
    return claims.Test(self.key, self.claim, self.rule(), lines, largest,
                       f"Largest difference from {self.reference}", p_for, p_against, checks,
                       tuple(sorted(seeds)))


@dataclasses.dataclass(frozen=True)
class NotRun(Claim):
  """A claim the power plan sized (``arms``: the arms it would need, ``quantity``: what its
  test would be on) but whose arms the budget cut: not in the study, never judged (the study
  declares it not powered); its row in the plan states what it would have cost."""
  arms: tuple[str, ...] = ()
  quantity: str = ""

  def needs(self) -> tuple[str, ...]:
    return ()

  def quantity_text(self) -> str:
    return self.quantity

  def plan(self) -> power.ClaimPlan:
    return power.ClaimPlan(self.key, self.claim, self.quantity, "directed", self.effect, None,
                           self.source, self.arms)

  def rule(self) -> str:
    return (f"per seed, {self.quantity}; the plan cut its arms ({', '.join(self.arms)}: their "
            f"cost), so the claim is not powered")

  def test(self, data: Data) -> claims.Test:
    return claims.Test(self.key, self.claim, self.rule(), ["Its arms were cut by the plan before the run."])

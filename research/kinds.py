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
  (these three first for the confirmatory norm x MLP study);
- the width ladder's (the proxies study and the muTransfer ladder; the section below):
  ``OptimumSlopeGap``, ``OptimumFlat``, ``NotWorseAtEvery``, ``FixedRateSlope``,
  ``SensitivityGap``, ``SensitivitySlope``; and the report section ``Rates`` of ``RateAt``
  (the rate the optima give at another value of the axis);
- the norm x MLP study's (the section below): ``Versus``, ``Interaction``, ``ProfilePair``,
  ``EndProbe``, ``AllAlike``, ``Diminishing`` (each decided alone, Holm over its own parts,
  as its rules were), and the report items ``RateTable`` and ``BestCurves``;
- ``Holds`` and ``LowersLoss`` (both ``Runaway``): on the seeds where a reference arm's
  output log Z ran away from ``log V``, whether an arm holds it, and lowers the final loss
  (*cannot be judged* where too few ran away: a premise, not a test outcome);
- ``ProbeGap``: a per-layer probe's growth with depth (last entry over first), at the end of
  training or at initialisation, one arm against another paired by seed (the norms study's:
  Kim et al. 2025's hidden-state growth, Peri-LN against pre-LN);
- ``Departs`` and ``Choice``: a finding (where a probe ends away from ``log V``) and a
  choice among arms; ``test_kind = "finding"``: no power plan, no family, no
  leave-one-seed-out.

A claim or a report item (``ExcessTable``, ``RunawaySeeds``: ``Study.reports``) may add a
report ``Section`` (``section(data, out)``); a kind may draw figures over all its claims
(``figures``, ``Profile``'s).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import numpy as np
from scipy import stats as sps

from research import claims
from research import curves
from research import optimum
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
                           "equivalent" else None, self.source, self.needs(),
                           getattr(self, "power", None))


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
  from research import page as reporting  # pylint: disable=import-outside-toplevel
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


# ----------------------------------------------------------------------------- zloss_probe, zloss, mup_base
#
# Kinds on a probe at the end of training (a cell record's ``end``: the output softmax's mean
# ``log_z``) against a uniform softmax's, ``log V`` (V the vocabulary), with the report items
# that show it; and a choice among arms. A finding or a choice is not a test of the
# literature (``test_kind = "finding"``): no power plan, no leave-one-seed-out; its verdict
# is the test's ``missing`` verdict, out of any family.

CANNOT_JUDGE = "Cannot be judged"  # the claim's premise did not hold: not a failure to reproduce
FOUND, NOT_FOUND, CHOSEN = "Found", "Not found", "Chosen"


@dataclasses.dataclass(frozen=True)
class Model:
  """One model as the probe kinds see it."""
  seed: int
  lr: float
  completed: bool
  start: float  # the probe at step 0
  end: float  # the probe at the last probe (nan: the model did not complete)
  vocab: int
  final: float  # the final validation loss (nan: the model did not complete)

  @property
  def excess(self) -> float:
    """The probe at the end minus ``log V``, a uniform softmax's log Z."""
    return self.end - math.log(self.vocab)

  @property
  def read(self) -> bool:
    return self.completed and math.isfinite(self.end)


def models(data: Data, arm: str, at: Mapping[str, Any] | tuple = (), probe: str = "log_z") -> list[Model]:
  """``arm``'s models at ``at``, by rate and seed."""
  value = lambda d: NAN if (d or {}).get(probe) is None else float(d[probe])
  out = []
  for rec in data.records(arm, at):
    done = rec["status"] == "completed"
    out.append(Model(int(rec["seed"]), float(rec["learning_rate"]), done, value(rec.get("init")),
                     value(rec.get("end")) if done else NAN, int(rec["overrides"]["model.vocab_size"]),
                     float(rec["final_val_loss"]) if done else NAN))
  return sorted(out, key=lambda m: (m.lr, m.seed))


def by_rate(ms: list[Model]) -> dict[float, list[Model]]:
  out: dict[float, list[Model]] = {}
  for m in ms:
    out.setdefault(m.lr, []).append(m)
  return out


def state(ms: list[Model], bound: float) -> str:
  """``grows`` (every seed completed |excess| >= ``bound``), ``stays`` (every seed completed
  below it) or ``mixed`` (seeds disagree, or a model did not complete)."""
  if not ms or not all(m.completed and math.isfinite(m.excess) for m in ms):
    return "mixed"
  big = [abs(m.excess) >= bound for m in ms]
  return "grows" if all(big) else "stays" if not any(big) else "mixed"


def median_excess(ms: list[Model]) -> float:
  finite = [m.excess for m in ms if math.isfinite(m.excess)]
  return float(np.median(finite)) if finite else NAN


def named(data: Data, arm: str, keys: tuple[str, ...]) -> dict[str, Any]:
  """The overrides ``keys`` of ``arm``'s first record, by their last name."""
  recs = data.records(arm)
  return {k.split(".")[-1]: recs[0]["overrides"].get(k) for k in keys} if recs else {}


def in_order(points) -> list[tuple]:
  """Grid points by their values (numbers as numbers: d64 before d128)."""
  num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
  return sorted(points, key=lambda p: [(not num(v), v if num(v) else repr(v)) for _, v in p])


def words(values: Mapping[str, Any]) -> str:
  return ", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in values.items())


@dataclasses.dataclass(frozen=True)
class ExcessTable:
  """A report item: per arm, grid point and rate, over seeds, the probe at step 0 and at the
  end (medians), its excess over ``log V`` (median, and each seed's), its ``state`` at
  ``bound`` and the final loss (median; — where a model diverged), and a figure of the
  median excess against the rate, a panel per grid point."""
  bound: float = 2.0
  probe: str = "log_z"
  note: str = ""  # a line under the heading

  def section(self, data: Data, out: str) -> Section:
    med = lambda xs: float(np.median(xs)) if xs else NAN
    lines = [f"## {self.probe} per arm and rate", "", *([self.note, ""] if self.note else []),
             f"Per arm, grid point and rate, over the seeds: {self.probe} at step 0 and at the end "
             f"(medians), the excess (at the end minus log V, a uniform softmax's: median, and each "
             f"seed's), its state at {self.bound:g} nats (grows, stays or mixed) and the final "
             f"validation loss (median; — where a model diverged).", "",
             "| arm | point | rate | start | end | excess over log V (per seed) | state | final loss |",
             "|---" * 8 + "|"]
    curves_: dict[tuple, list[tuple[float, float]]] = {}
    for point in in_order({p for arm in data.arms() for p in data.points(arm)}):
      for arm in [a for a in data.arms() if point in data.points(a)]:
        for lr, ms in by_rate(models(data, arm, point, self.probe)).items():
          fin = lambda f: [f(m) for m in ms if math.isfinite(f(m))]
          seeds = ", ".join("—" if not math.isfinite(m.excess) else f"{m.excess:+.2f}" for m in ms)
          loss = med(fin(lambda m: m.final))
          lines.append(f"| {arm} | {at_text(point)[2:] or '—'} | {lr:g} | {med(fin(lambda m: m.start)):.2f} | "
                       f"{med(fin(lambda m: m.end)):.2f} | {median_excess(ms):+.2f} ({seeds}) | "
                       f"{state(ms, self.bound)} | {'—' if math.isnan(loss) else format(loss, '.3f')} |")
          curves_.setdefault(point, []).append((arm, lr, median_excess(ms)))
    return Section(lines + [""], [self.plot(curves_, out)])

  def plot(self, by_point: dict, out: str) -> str | None:
    if not by_point:
      return None
    from research import page as reporting  # pylint: disable=import-outside-toplevel
    fig = reporting.figure(figsize=(5 * len(by_point), 3.8))
    for i, point in enumerate(in_order(by_point)):
      ax = fig.add_subplot(1, len(by_point), i + 1)
      for j, arm in enumerate(dict.fromkeys(a for a, _, _ in by_point[point])):
        pts = [(lr, x) for a, lr, x in by_point[point] if a == arm]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "os^v"[j % 4] + "-", color=f"C{j}", label=arm)
      for bound in (-self.bound, self.bound):
        ax.axhline(bound, color="grey", lw=0.8, ls=":")
      ax.set(xscale="log", xlabel="peak learning rate", ylabel=f"{self.probe} at the end - log V (nats)",
             title=at_text(point)[2:])
      ax.legend(fontsize=7)
    return reporting.save(fig, out, f"{self.probe}_excess.png")


@dataclasses.dataclass(frozen=True)
class Departs(Claim):
  """A finding: where the probe at the end ends at least ``bound`` from ``log V``. At the
  largest value of ``axis``, per arm of ``arms`` and rate: ``state`` over its seeds. Found when
  one grows, Not found when all stay, Inconclusive otherwise; beside each found setting, its
  arm's partner in ``beside`` (shown, not judged). Its section: ``ExcessTable`` and
  results.json's ``finding`` (the arms found named by their overrides ``names``)."""
  family: str | None = None
  arms: tuple[str, ...] = ()
  beside: tuple[tuple[str, str], ...] = ()  # (arm, the arm shown beside it)
  axis: str = "model.d_model"
  bound: float = 2.0
  probe: str = "log_z"
  names: tuple[str, ...] = ()  # the overrides that name an arm in the finding
  test_kind = "finding"

  def needs(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(self.arms + tuple(b for _, b in self.beside)))

  def quantity_text(self) -> str:
    return f"|{self.probe} at the end - log V| per arm and rate at the largest {self.axis}"

  def rule(self) -> str:
    return (f"per (arm, {self.axis.split('.')[-1]}, rate), 'grows' when every seed completed with "
            f"|{self.probe} at the end - log V| >= {self.bound:g} nats (V the vocabulary), 'stays' "
            f"when every seed completed below it, 'mixed' otherwise; at the largest "
            f"{self.axis.split('.')[-1]} in {', '.join(self.arms)}: Found when one (arm, rate) "
            f"grows, Not found when all stay, Inconclusive otherwise")

  def find(self, data: Data) -> tuple[str, dict, list[tuple[str, float]], list[str]]:
    """``(verdict, the point judged, the (arm, rate) that grow, lines)``."""
    values = sorted({v for a in self.arms for v in data.values(a, self.axis)})
    if not values:
      return claims.INCONCLUSIVE, {}, [], ["No models."]
    top = {self.axis: values[-1]}
    plain = {(a, lr): ms for a in self.arms for lr, ms in by_rate(models(data, a, top, self.probe)).items()}
    states = {k: state(ms, self.bound) for k, ms in plain.items()}
    grows = [k for k, s in states.items() if s == "grows"]
    where, lines = at_text(top)[2:], []
    for arm, lr in grows:
      text = (f"{where}, {words(named(data, arm, self.names)) or arm}, rate {lr:g}: {self.probe} minus "
              f"log V, median {median_excess(plain[(arm, lr)]):+.2f} nats")
      for partner in [b for a, b in self.beside if a == arm]:
        ms = by_rate(models(data, partner, top, self.probe)).get(lr, [])
        text += f"; {partner}: median excess {median_excess(ms):+.2f} ({state(ms, self.bound)})"
      lines.append(text + ".")
    if grows:
      low = {a: min(lr for b, lr in grows if b == a) for a, _ in grows}
      lines.append(f"Found at {where}: " + ", ".join(
          f"{words(named(data, a, self.names)) or a} from rate {lr:g}" for a, lr in low.items()) + ".")
      return FOUND, top, grows, lines
    if states and all(s == "stays" for s in states.values()):
      return NOT_FOUND, top, [], lines + [
          f"At {where} {self.probe} ends within {self.bound:g} nats of log V in every arm and rate "
          f"(largest |median excess| {max(abs(median_excess(ms)) for ms in plain.values()):.2f})."]
    mixed = sum(s == "mixed" for s in states.values())
    return claims.INCONCLUSIVE, top, [], lines + [
        f"At {where} no setting grows in every seed; {mixed} of {len(states)} are mixed (seeds "
        f"disagree or a model diverged)."]

  def test(self, data: Data) -> claims.Test:
    verdict, _, _, lines = self.find(data)
    return claims.Test(self.key, self.claim, self.rule(), [],
                       missing=claims.Verdict(self.claim, verdict, lines, self.rule()))

  def section(self, data: Data, out: str) -> Section:
    verdict, top, grows, _ = self.find(data)
    s = ExcessTable(self.bound, self.probe).section(data, out)
    s.results["finding"] = {"verdict": verdict, **{k.split(".")[-1]: v for k, v in top.items()},
                            "grows": [{**named(data, a, self.names), "learning_rate": lr} for a, lr in grows]}
    return s


def overshoot(m: Model, side: int) -> float:
  """How far the probe ended past the band [0, log V] on ``side`` (+1: above log V)."""
  return m.excess if side > 0 else -m.end


def runaway(m: Model | None, bound: float) -> int:
  """The side (+1 above log V, -1 below 0) where the model's probe ended ``bound`` past the band, else 0."""
  if m is None or not m.read:
    return 0
  return next((side for side in (1, -1) if overshoot(m, side) >= bound), 0)


@dataclasses.dataclass(frozen=True)
class Pairs:
  """At one rate: the reference's and the arm's models by seed, and the seeds where the
  reference ran away (with an arm model to pair) with the side it ran to."""
  text: str  # "d_model 128, rate 0.3"
  reference: str
  arm: str
  plain: dict[int, Model]
  other: dict[int, Model]
  sides: dict[int, int]
  bound: float

  def judged(self) -> list[int]:
    return [s for s in self.sides if self.other[s].read]

  def lost(self) -> list[int]:
    return [s for s in self.sides if not self.other[s].read]

  def overshoots(self) -> tuple[dict[int, float], dict[int, float]]:
    seeds = self.judged()
    return ({s: overshoot(self.plain[s], self.sides[s]) for s in seeds},
            {s: overshoot(self.other[s], self.sides[s]) for s in seeds})

  def losses(self) -> tuple[dict[int, float], dict[int, float]]:
    seeds = self.judged()
    return {s: self.plain[s].final for s in seeds}, {s: self.other[s].final for s in seeds}

  def summary(self) -> str:
    ran = {s: runaway(m, self.bound) for s, m in self.plain.items() if runaway(m, self.bound)}
    up = sum(v > 0 for v in ran.values())
    gone = sorted(s for s, m in self.plain.items() if not m.read)
    unpaired = sorted(s for s in ran if s not in self.other)
    notes = [f"{self.reference} did not complete at {', '.join(map(str, gone))}"] if gone else []
    if unpaired:
      notes.append(f"no {self.arm} model to pair with: {', '.join(map(str, unpaired))}")
    return (f"{self.text}: {self.reference}'s log Z ran away in {len(ran)} of {len(self.plain)} "
            f"seeds ({up} above log V, {len(ran) - up} below" + "".join(f"; {n}" for n in notes) + ")")


@dataclasses.dataclass(frozen=True)
class Runaway(Claim):
  """What ``Holds`` and ``LowersLoss`` share: at ``rate`` (and ``at``), the seeds where the
  ``reference`` arm's model completed with its probe at least ``bound`` past the band
  [0, log V] (above: its excess over log V; below: minus the probe), each paired with
  ``arm``'s model of that seed and rate, on that side. With fewer than ``min_seeds`` such
  seeds the claim cannot be judged there (``CANNOT_JUDGE``: where nothing runs away nothing
  is held). An ``arm`` model that did not complete at a judged seed cannot support the claim
  (its p for is 1), while the seeds that completed can still decide against it."""
  arm: str = ""
  reference: str = ""
  rate: float = NAN
  at: tuple = ()
  bound: float = 2.0
  min_seeds: int = 3
  probe: str = "log_z"

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def pairs(self, data: Data, arm: str | None = None) -> Pairs:
    arm = arm or self.arm
    at_rate = lambda a: {m.seed: m for m in models(data, a, self.at, self.probe) if m.lr == self.rate}
    plain, other = at_rate(self.reference), at_rate(arm)
    sides = {s: runaway(m, self.bound) for s, m in sorted(plain.items())
             if s in other and runaway(m, self.bound)}
    points = {p for p in data.points(self.reference)} if not self.at else {tuple(self.at)}
    where = "; ".join(at_text(p)[2:] for p in sorted(points, key=repr) if p)
    return Pairs(f"{where + ', ' if where else ''}rate {self.rate:g}", self.reference, arm, plain,
                 other, sides, self.bound)

  def judged_test(self, data: Data, p: Pairs) -> claims.Test:
    raise NotImplementedError

  def test(self, data: Data) -> claims.Test:
    p = self.pairs(data)
    if len(p.sides) < self.min_seeds:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.Verdict(
          self.claim, CANNOT_JUDGE, [p.summary() + ".", f"It cannot be judged at this rate: the "
          f"claim is about models whose log Z runs away, and at least {self.min_seeds} seeds are "
          f"needed. This is not a failure to reproduce it."], self.rule()))
    t = self.judged_test(data, p)
    if p.lost():
      t = dataclasses.replace(t, p_for=1.0, lines=t.lines + [
          f"{self.arm} did not complete at seed{'s' * (len(p.lost()) > 1)} "
          f"{', '.join(map(str, p.lost()))}, where {self.reference} ran away: the claim cannot "
          f"come out reproduced; the other seeds can decide against it."])
    return t

  def premise(self) -> str:
    return (f"at rate {self.rate:g}, on the seeds where {self.reference} completed with its "
            f"{self.probe} at least {self.bound:g} nats past the band [0, log V] (above: "
            f"{self.probe} - log V; below: -{self.probe}; at least {self.min_seeds} such seeds, "
            f"else it cannot be judged there), {self.arm} of the same seed and rate")


@dataclasses.dataclass(frozen=True)
class Holds(Runaway):
  """``arm`` holds the probe where ``reference``'s runs away: per judged seed, ``arm``'s
  overshoot past the band on the reference's side; reproduced when its mean lies decisively
  below ``bound`` (one-sided t test), not reproduced when decisively above."""

  def quantity_text(self) -> str:
    return f"{self.arm}'s overshoot past [0, log V] on {self.reference}'s side (held below +{self.bound:g})"

  def rule(self) -> str:
    return (f"{self.premise()}: its overshoot past the band on that side; reproduced when the "
            f"mean overshoot lies decisively below {self.bound:g} nats (one-sided t test), not "
            f"reproduced when decisively above, inconclusive otherwise; a model of {self.arm} that "
            f"did not complete cannot support it")

  def judged_test(self, data: Data, p: Pairs) -> claims.Test:
    plain, held = p.overshoots()
    e, p_for, p_against = stats.below(list(held.values()), self.bound)
    e = dataclasses.replace(e, kind="paired seeds")
    lines = [p.summary() + ".",
             f"Overshoot past the band [0, log V] on {self.reference}'s side: {self.reference} "
             f"{stats.one_sample(list(plain.values())).text()}; {self.arm} {e.text()} (bound "
             f"+{self.bound:g}); {self.reference} - {self.arm} {stats.paired(plain, held).text()}."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), p_for,
                       p_against, [], tuple(held))


@dataclasses.dataclass(frozen=True)
class LowersLoss(Runaway):
  """``arm`` lowers the final loss where ``reference``'s probe runs away: per judged seed,
  ``arm - reference``; reproduced when decisively negative (t test), not reproduced when
  decisively positive or equivalent to none within ``margin`` (TOST)."""
  margin: float = 0.1

  def quantity_text(self) -> str:
    return f"final loss, {self.arm} - {self.reference}"

  def rule(self) -> str:
    return (f"{self.premise()}: the final validation loss minus {self.reference}'s, paired by "
            f"seed; reproduced when decisively negative (t test), not reproduced when decisively "
            f"positive or equivalent to none within {self.margin:g} nats (TOST), inconclusive "
            f"otherwise; a model of {self.arm} that did not complete cannot support it")

  def judged_test(self, data: Data, p: Pairs) -> claims.Test:
    plain, other = p.losses()
    diff = {s: other[s] - plain[s] for s in plain}
    e, p_for, p_against = stats.directed(list(diff.values()), "lower", self.margin)
    e = dataclasses.replace(e, kind="paired")
    lines = [p.summary() + ".",
             f"Final validation loss: {self.reference} {stats.one_sample(list(plain.values())).text()}, "
             f"{self.arm} {stats.one_sample(list(other.values())).text()}."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), p_for,
                       p_against, [], tuple(diff))


@dataclasses.dataclass(frozen=True)
class RunawaySeeds:
  """A report item: per rate and seed, ``reference``'s excess over log V and whether (and on
  which side) it ran away, each of ``arms``' excess, and every model's final loss; then, for
  each of ``reported`` (arms not judged), its overshoot and its loss difference from
  ``reference`` on the seeds where the reference ran away."""
  reference: str
  arms: tuple[str, ...]
  reported: tuple[str, ...] = ()
  bound: float = 2.0
  at: tuple = ()

  def section(self, data: Data, out: str) -> Section:
    del out
    fmt = lambda x, f: "—" if x is None else format(x, f)
    names = (self.reference, *self.arms)
    lines = ["## Per seed", "", f"Each seed's models at one rate: log Z at the end minus log V, "
             f"whether {self.reference} ran away (past the band [0, log V] by {self.bound:g} nats, "
             f"and on which side), and the final validation loss (— where a model did not complete).", "",
             f"| rate | seed | {self.reference}: log Z - log V | ran away | " + " | ".join(self.arms)
             + " | " + " | ".join(f"{a} loss" for a in names) + " |", "|---" * (3 + 2 * len(names)) + "|"]
    rows, reported = [], []
    for rate in sorted({m.lr for m in models(data, self.reference, self.at)}):
      claim = lambda arm: Runaway("", None, arm=arm, reference=self.reference, rate=rate,
                                  at=self.at, bound=self.bound)
      by = {a: claim(a).pairs(data).other for a in names}
      for seed, plain in claim(self.reference).pairs(data).plain.items():
        row = {"learning_rate": rate, "seed": seed, "runaway": runaway(plain, self.bound)}
        for a in names:
          m = by[a].get(seed)
          row[f"{a}_excess"], row[f"{a}_final"] = (m.excess, m.final) if m and m.read else (None, None)
        rows.append(row)
        lines.append(f"| {rate:g} | {seed} | {fmt(row[f'{self.reference}_excess'], '+.2f')} | "
                     f"{ {1: 'above', -1: 'below', 0: 'no'}[row['runaway']]} | "
                     + " | ".join(fmt(row[f"{a}_excess"], "+.2f") for a in self.arms) + " | "
                     + " | ".join(fmt(row[f"{a}_final"], ".3f") for a in names) + " |")
      for arm in self.reported:
        p = claim(arm).pairs(data)
        _, over = p.overshoots()
        plain, other = p.losses()
        o, d = stats.one_sample(list(over.values())), stats.paired(other, plain)
        reported.append((arm, f"- {p.summary()}: overshoot {o.text()}; final loss {arm} - "
                         f"{self.reference} {d.text()}" + (f"; did not complete at seeds "
                         f"{', '.join(map(str, p.lost()))}" if p.lost() else "") + ".",
                         {"arm": arm, "learning_rate": rate, "runaway_seeds": list(p.sides),
                          "overshoot": o, "loss_difference": d, "not_completed": p.lost()}))
    for arm in self.reported:
      lines += ["", f"## {arm} (reported, not judged)", "", f"Not part of the claims: the same "
                f"quantities for {arm}, on the seeds where {self.reference} ran away.", "",
                *[text for a, text, _ in reported if a == arm]]
    return Section(lines + [""], [], {"seeds": rows, "reported": [r for _, _, r in reported]})



# ----------------------------------------------------------------------------- log Z's trajectory


def model_learns(rec: Mapping[str, Any]) -> bool:
  """A model that completed without diverging (``cells.diverged``) with its final validation
  loss ``curves.LEARNS_BY`` below the unigram: one that still trains."""
  from research import cells as cells_lib  # pylint: disable=import-outside-toplevel
  return (rec["status"] == "completed" and not cells_lib.diverged(rec)
          and rec.get("unigram_val_loss") is not None
          and float(rec["final_val_loss"]) < float(rec["unigram_val_loss"]) - curves.LEARNS_BY)


@dataclasses.dataclass(frozen=True)
class Track:
  """One model's probe over training as the drift kinds see it. Wortsman et al. 2023 (sec.
  3.2): the output-logit divergence is a drift of log Z late in training, in a model that
  still trains; its late drift is the probe at the end minus the probe half-way."""
  seed: int
  lr: float
  curve: tuple[tuple[int, float], ...]  # (step, probe) at every probe
  steps: int  # the run's length
  completed: bool
  learns: bool  # ``model_learns``
  final: float  # the final validation loss (nan: the model did not complete)
  attn_end: float  # the largest attention logit at the last probe (nan: none)

  def at(self, step: float) -> float:
    """The probe nearest ``step`` (nan: none)."""
    return min(self.curve, key=lambda sv: abs(sv[0] - step))[1] if self.curve else NAN

  @property
  def start(self) -> float:
    return self.at(0)

  @property
  def mid(self) -> float:
    return self.at(self.steps / 2)

  @property
  def end(self) -> float:
    return self.curve[-1][1] if self.curve else NAN

  @property
  def drift(self) -> float:
    """The late drift: the probe at the end minus the probe nearest half the run (nan where
    the model did not complete, or was probed fewer than 3 times)."""
    if not self.completed or len(self.curve) < 3:
      return NAN
    return self.end - self.mid

  @property
  def read(self) -> bool:
    return math.isfinite(self.drift)


def tracks(data: Data, arm: str, at: Mapping[str, Any] | tuple = (), probe: str = "log_z") -> list[Track]:
  """``arm``'s models at ``at`` with their ``probe`` trajectories, by rate and seed."""
  out = []
  for rec in data.records(arm, at):
    curve = tuple((int(s), float(v)) for s, v in rec.get(f"{probe}_curve") or () if v is not None)
    attn = rec.get("attn_logit_curve") or []
    done = rec["status"] == "completed"
    out.append(Track(int(rec["seed"]), float(rec["learning_rate"]), curve,
                     int(rec["overrides"].get("train.steps") or rec["steps"]), done, model_learns(rec),
                     float(rec["final_val_loss"]) if done else NAN,
                     float(attn[-1][1]) if attn and attn[-1][1] is not None else NAN))
  return sorted(out, key=lambda t: (t.lr, t.seed))


def tracks_by_rate(ts: list[Track]) -> dict[float, list[Track]]:
  out: dict[float, list[Track]] = {}
  for t in ts:
    out.setdefault(t.lr, []).append(t)
  return out


def drift_state(ts: list[Track], bound: float) -> str:
  """``drifts`` (every seed learns, with a late drift of at least ``bound`` nats either way),
  ``stays`` (every seed completed with a late drift below ``bound``) or ``mixed`` (seeds
  disagree, a model did not complete, or one drifted without learning)."""
  if not ts or not all(t.read for t in ts):
    return "mixed"
  big = [abs(t.drift) >= bound for t in ts]
  if all(big) and all(t.learns for t in ts):
    return "drifts"
  return "stays" if not any(big) else "mixed"


def median_of(xs) -> float:
  finite = [x for x in xs if math.isfinite(x)]
  return float(np.median(finite)) if finite else NAN


@dataclasses.dataclass(frozen=True)
class DriftTable:
  """A report item: per arm, grid point and rate, over seeds, how many models learn
  (``model_learns``), the probe at step 0, half-way and at the end (medians), the late drift
  (median, and each seed's), its ``drift_state`` at ``bound``, the largest attention logit at
  the end and the final loss (medians); and a figure of every model's trajectory, a panel
  per rate."""
  bound: float = 2.0
  probe: str = "log_z"
  note: str = ""

  def section(self, data: Data, out: str) -> Section:
    f = lambda x, spec: "—" if not math.isfinite(x) else format(x, spec)
    lines = [f"## {self.probe} over training per arm and rate", "", *([self.note, ""] if self.note else []),
             f"Per arm, grid point and rate, over the seeds: the models that learn (completed, not "
             f"diverged, final loss {curves.LEARNS_BY:g} nats below the unigram), {self.probe} at "
             f"step 0, half-way and at the end (medians), the late drift (the end minus half-way: "
             f"median, and each seed's), its state at {self.bound:g} nats (drifts: every seed learns "
             f"and drifts that far; stays; mixed), the largest attention logit at the end and the "
             f"final validation loss (medians).", "",
             "| arm | point | rate | learn | start | half-way | end | late drift (per seed) | state "
             "| attention logit at the end | final loss |", "|---" * 11 + "|"]
    panels: dict[float, list[tuple[str, Track]]] = {}
    rows = []
    for point in in_order({p for arm in data.arms() for p in data.points(arm)}):
      for arm in [a for a in data.arms() if point in data.points(a)]:
        for lr, ts in tracks_by_rate(tracks(data, arm, point, self.probe)).items():
          seeds = ", ".join(f(t.drift, "+.2f") for t in ts)
          st = drift_state(ts, self.bound)
          lines.append(
              f"| {arm} | {at_text(point)[2:] or '—'} | {lr:g} | {sum(t.learns for t in ts)}/{len(ts)} | "
              f"{f(median_of(t.start for t in ts), '.2f')} | {f(median_of(t.mid for t in ts), '.2f')} | "
              f"{f(median_of(t.end for t in ts), '.2f')} | {f(median_of(t.drift for t in ts), '+.2f')} "
              f"({seeds}) | {st} | {f(median_of(t.attn_end for t in ts), '.3g')} | "
              f"{f(median_of(t.final for t in ts), '.3f')} |")
          rows.append({"arm": arm, **dict(point), "learning_rate": lr, "state": st,
                       "drift": {t.seed: t.drift for t in ts}, "learns": sum(t.learns for t in ts)})
          panels.setdefault(lr, []).extend((arm, t) for t in ts)
    return Section(lines + [""], [self.plot(panels, out)], {"drift": rows})

  def plot(self, panels: dict[float, list[tuple[str, Track]]], out: str) -> str | None:
    if not panels:
      return None
    from research import page as reporting  # pylint: disable=import-outside-toplevel
    fig = reporting.figure(figsize=(4 * len(panels), 3.6))
    arms = list(dict.fromkeys(a for ts in panels.values() for a, _ in ts))
    for i, lr in enumerate(sorted(panels)):
      ax = fig.add_subplot(1, len(panels), i + 1)
      for arm, t in panels[lr]:
        j = arms.index(arm)
        ax.plot([s for s, _ in t.curve], [v for _, v in t.curve], color=f"C{j}", lw=1,
                label=arm if t is next(u for a, u in panels[lr] if a == arm) else None)
      ax.set(xlabel="step", ylabel=self.probe, title=f"rate {lr:g}")
      ax.legend(fontsize=7)
    return reporting.save(fig, out, f"{self.probe}_trajectories.png")


@dataclasses.dataclass(frozen=True)
class Drifts(Claim):
  """A finding: where the probe drifts late in models that still train. Per arm of ``arms``
  and rate, at ``at``: ``drift_state`` over its seeds. Found when one drifts, Not found when
  all stay, Inconclusive otherwise; beside each found setting, its arm's partner in
  ``beside`` (shown, not judged). Its section: ``DriftTable`` and results.json's ``finding``."""
  family: str | None = None
  arms: tuple[str, ...] = ()
  beside: tuple[tuple[str, str], ...] = ()  # (arm, the arm shown beside it)
  at: tuple = ()
  bound: float = 2.0
  probe: str = "log_z"
  test_kind = "finding"

  def needs(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys(self.arms + tuple(b for _, b in self.beside)))

  def quantity_text(self) -> str:
    return f"late drift of {self.probe} (the end minus half-way) per arm and rate, in models that learn"

  def rule(self) -> str:
    return (f"per (arm, rate) of {', '.join(self.arms)}: 'drifts' when every seed completed, "
            f"learns (not diverged, final loss {curves.LEARNS_BY:g} nats below the unigram) and "
            f"its {self.probe} at the end lies at least {self.bound:g} nats from its {self.probe} "
            f"half-way through, 'stays' when every seed completed with a late drift below "
            f"{self.bound:g}, 'mixed' otherwise; Found when one (arm, rate) drifts, Not found when "
            f"all stay, Inconclusive otherwise")

  def find(self, data: Data) -> tuple[str, list[tuple[str, float]], list[str]]:
    """``(verdict, the (arm, rate) that drift, lines)``."""
    plain = {(a, lr): ts for a in self.arms
             for lr, ts in tracks_by_rate(tracks(data, a, self.at, self.probe)).items()}
    if not plain:
      return claims.INCONCLUSIVE, [], ["No models."]
    states = {k: drift_state(ts, self.bound) for k, ts in plain.items()}
    found = [k for k, s in states.items() if s == "drifts"]
    lines = []
    for arm, lr in found:
      text = (f"{arm}, rate {lr:g}: late drift of {self.probe}, median "
              f"{median_of(t.drift for t in plain[(arm, lr)]):+.2f} nats, every seed learning")
      for partner in [b for a, b in self.beside if a == arm]:
        ts = tracks_by_rate(tracks(data, partner, self.at, self.probe)).get(lr, [])
        text += f"; {partner}: median {median_of(t.drift for t in ts):+.2f} ({drift_state(ts, self.bound)})"
      lines.append(text + ".")
    if found:
      return FOUND, found, lines + ["Found: " + ", ".join(f"{a} at rate {lr:g}" for a, lr in found) + "."]
    if all(s == "stays" for s in states.values()):
      return NOT_FOUND, [], [f"{self.probe} moves by less than {self.bound:g} nats over the second half "
                             f"of training in every arm and rate (largest |median late drift| "
                             f"{max(abs(median_of(t.drift for t in ts)) for ts in plain.values()):.2f})."]
    mixed = sum(s == "mixed" for s in states.values())
    return claims.INCONCLUSIVE, [], lines + [
        f"No setting drifts in every seed while learning; {mixed} of {len(states)} are mixed (seeds "
        f"disagree, a model did not complete, or one drifted without learning)."]

  def test(self, data: Data) -> claims.Test:
    verdict, _, lines = self.find(data)
    return claims.Test(self.key, self.claim, self.rule(), [],
                       missing=claims.Verdict(self.claim, verdict, lines, self.rule()))

  def section(self, data: Data, out: str) -> Section:
    verdict, found, _ = self.find(data)
    s = DriftTable(self.bound, self.probe).section(data, out)
    s.results["finding"] = {"verdict": verdict, "drifts": [{"arm": a, "learning_rate": lr} for a, lr in found]}
    return s


@dataclasses.dataclass(frozen=True)
class DriftPairs:
  """At one rate: the reference's and the arm's models by seed, and the seeds where the
  reference learns with a late drift of at least ``bound`` (with an arm model to pair), with
  the drift's sign."""
  text: str
  reference: str
  arm: str
  plain: dict[int, Track]
  other: dict[int, Track]
  sides: dict[int, int]
  bound: float

  def judged(self) -> list[int]:
    return [s for s in self.sides if self.other[s].read]

  def lost(self) -> list[int]:
    return [s for s in self.sides if not self.other[s].read]

  def summary(self) -> str:
    gone = sorted(s for s, t in self.plain.items() if not t.read)
    down = sum(v < 0 for v in self.sides.values())
    return (f"{self.text}: {self.reference}'s log Z drifted at least {self.bound:g} nats over the "
            f"second half of training in a model that learns in {len(self.sides)} of "
            f"{len(self.plain)} seeds ({down} down, {len(self.sides) - down} up"
            + (f"; did not complete at {', '.join(map(str, gone))}" if gone else "") + ")")


@dataclasses.dataclass(frozen=True)
class Drift(Claim):
  """What ``HoldsDrift`` and ``DriftLowersLoss`` share: at ``rate`` (and ``at``), the seeds
  where the ``reference`` arm's model learns (``model_learns``) and its probe drifted at
  least ``bound`` nats over the second half of training, each paired with ``arm``'s model of
  that seed and rate. With fewer than ``min_seeds`` such seeds the claim cannot be judged
  there (``CANNOT_JUDGE``). An ``arm`` model that did not complete at a judged seed cannot
  support the claim (its p for is 1)."""
  arm: str = ""
  reference: str = ""
  rate: float = NAN
  at: tuple = ()
  bound: float = 2.0
  min_seeds: int = 3
  probe: str = "log_z"

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def pairs(self, data: Data) -> DriftPairs:
    at_rate = lambda a: {t.seed: t for t in tracks(data, a, self.at, self.probe) if t.lr == self.rate}
    plain, other = at_rate(self.reference), at_rate(self.arm)
    sides = {s: (1 if t.drift > 0 else -1) for s, t in sorted(plain.items())
             if s in other and t.read and t.learns and abs(t.drift) >= self.bound}
    where = at_text(self.at)[2:]
    return DriftPairs(f"{where + ', ' if where else ''}rate {self.rate:g}", self.reference, self.arm,
                      plain, other, sides, self.bound)

  def premise(self) -> str:
    return (f"at rate {self.rate:g}, on the seeds where {self.reference} learns with its "
            f"{self.probe} at the end at least {self.bound:g} nats from its {self.probe} half-way "
            f"through (at least {self.min_seeds} such seeds, else it cannot be judged there), "
            f"{self.arm} of the same seed and rate")

  def judged_test(self, p: DriftPairs) -> claims.Test:
    raise NotImplementedError

  def test(self, data: Data) -> claims.Test:
    p = self.pairs(data)
    if len(p.sides) < self.min_seeds:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.Verdict(
          self.claim, CANNOT_JUDGE, [p.summary() + ".", f"It cannot be judged at this rate: the "
          f"claim is about models whose log Z drifts late while they train, and at least "
          f"{self.min_seeds} seeds are needed. This is not a failure to reproduce it."], self.rule()))
    t = self.judged_test(p)
    if p.lost():
      t = dataclasses.replace(t, p_for=1.0, lines=t.lines + [
          f"{self.arm} did not complete at seed{'s' * (len(p.lost()) > 1)} "
          f"{', '.join(map(str, p.lost()))}, where {self.reference} drifted: the claim cannot come "
          f"out reproduced; the other seeds can decide against it."])
    return t


@dataclasses.dataclass(frozen=True)
class HoldsDrift(Drift):
  """``arm`` holds the probe where ``reference``'s drifts: per judged seed, ``arm``'s late
  drift in the reference's direction; reproduced when its mean lies decisively below
  ``bound`` (one-sided t test), not reproduced when decisively above."""

  def quantity_text(self) -> str:
    return f"{self.arm}'s late drift of {self.probe} in {self.reference}'s direction (held below +{self.bound:g})"

  def rule(self) -> str:
    return (f"{self.premise()}: its late drift in {self.reference}'s direction; reproduced when "
            f"the mean lies decisively below {self.bound:g} nats (one-sided t test), not "
            f"reproduced when decisively above, inconclusive otherwise; a model of {self.arm} that "
            f"did not complete cannot support it")

  def judged_test(self, p: DriftPairs) -> claims.Test:
    seeds = p.judged()
    plain = {s: p.plain[s].drift * p.sides[s] for s in seeds}
    held = {s: p.other[s].drift * p.sides[s] for s in seeds}
    e, p_for, p_against = stats.below(list(held.values()), self.bound)
    e = dataclasses.replace(e, kind="paired seeds")
    lines = [p.summary() + ".",
             f"Late drift in {self.reference}'s direction: {self.reference} "
             f"{stats.one_sample(list(plain.values())).text()}; {self.arm} {e.text()} (bound "
             f"+{self.bound:g}); {self.reference} - {self.arm} {stats.paired(plain, held).text()}."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), p_for,
                       p_against, [], tuple(held))


@dataclasses.dataclass(frozen=True)
class DriftLowersLoss(Drift):
  """``arm`` lowers the final loss where ``reference``'s probe drifts: per judged seed,
  ``arm - reference``; reproduced when decisively negative (t test), not reproduced when
  decisively positive or equivalent to none within ``margin`` (TOST)."""
  margin: float = 0.02

  def quantity_text(self) -> str:
    return f"final loss, {self.arm} - {self.reference}"

  def rule(self) -> str:
    return (f"{self.premise()}: the final validation loss minus {self.reference}'s, paired by "
            f"seed; reproduced when decisively negative (t test), not reproduced when decisively "
            f"positive or equivalent to none within {self.margin:g} nats (TOST), inconclusive "
            f"otherwise; a model of {self.arm} that did not complete cannot support it")

  def judged_test(self, p: DriftPairs) -> claims.Test:
    seeds = p.judged()
    diff = {s: p.other[s].final - p.plain[s].final for s in seeds}
    e, p_for, p_against = stats.directed(list(diff.values()), "lower", self.margin)
    e = dataclasses.replace(e, kind="paired")
    lines = [p.summary() + ".",
             f"Final validation loss: {self.reference} {stats.one_sample([p.plain[s].final for s in seeds]).text()}, "
             f"{self.arm} {stats.one_sample([p.other[s].final for s in seeds]).text()}."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), p_for,
                       p_against, [], tuple(diff))


# ----------------------------------------------------------------------------- log Z late in training
#
# The runaway kinds (``Holds``, ``LowersLoss``) read the probe at its last reading, one noisy
# number: on the confirmatory drift study's models (``results/zloss_drift-cpu``) log Z moved
# by 1-3 nats between readings 2,500 steps apart. The late kinds read it over the trajectory's
# late window instead, in models that still train.


def late_mean(t: Track, window: float) -> float:
  """The mean of ``t``'s probe over its readings in the last ``window`` of the run (steps at
  or after ``(1 - window) * steps``); nan where the model does not learn (``model_learns``),
  or has no reading there."""
  late = [v for s, v in t.curve if s >= (1 - window) * t.steps]
  return float(np.mean(late)) if t.learns and late else NAN


def late_models(data: Data, arm: str, at: Mapping[str, Any] | tuple = (), probe: str = "log_z",
                window: float = 0.2) -> list[Model]:
  """``arm``'s models (``models``) with ``end`` the probe's ``late_mean`` over ``window``:
  a model that does not learn is not read."""
  late = {(t.lr, t.seed): late_mean(t, window) for t in tracks(data, arm, at, probe)}
  return [dataclasses.replace(m, end=late[(m.lr, m.seed)]) for m in models(data, arm, at, probe)]


@dataclasses.dataclass(frozen=True)
class LateRunaway(Runaway):
  """A runaway kind read late: where the ``reference``'s probe, averaged over the last
  ``window`` of training in a model that still learns, lies ``bound`` past the band, ``arm``'s
  over the same window (``late_models``)."""
  window: float = 0.2

  def pairs(self, data: Data, arm: str | None = None) -> Pairs:
    p = super().pairs(data, arm)
    at_rate = lambda a: {m.seed: m for m in late_models(data, a, self.at, self.probe, self.window)
                         if m.lr == self.rate}
    plain, other = at_rate(self.reference), at_rate(arm or self.arm)
    sides = {s: runaway(m, self.bound) for s, m in sorted(plain.items())
             if s in other and runaway(m, self.bound)}
    return dataclasses.replace(p, plain=plain, other=other, sides=sides)

  def premise(self) -> str:
    return (f"at rate {self.rate:g}, on the seeds where {self.reference} learned (completed, not "
            f"diverged, below the unigram) with its {self.probe} averaged over the readings in the "
            f"last {self.window:.0%} of training at least {self.bound:g} nats past the band [0, "
            f"log V] (above: {self.probe} - log V; below: -{self.probe}; at least "
            f"{self.min_seeds} such seeds, else it cannot be judged there), {self.arm} of the same "
            f"seed and rate over the same readings (a model that does not learn is not read)")


@dataclasses.dataclass(frozen=True)
class HoldsLate(LateRunaway, Holds):
  """``Holds`` read over the late window (``LateRunaway``)."""


@dataclasses.dataclass(frozen=True)
class LowersLossLate(LateRunaway, LowersLoss):
  """``LowersLoss`` on the seeds where the reference ran away over the late window."""


@dataclasses.dataclass(frozen=True)
class LateSeeds:
  """A report item: per seed at ``rate``, each arm's probe over the late window
  (``late_mean``), whether ``reference``'s lies ``bound`` past the band [0, log V] (and on
  which side), and every model's final loss."""
  reference: str
  arms: tuple[str, ...]
  rate: float
  bound: float = 2.0
  window: float = 0.2
  probe: str = "log_z"

  def section(self, data: Data, out: str) -> Section:
    del out
    fmt = lambda x, f: "—" if not math.isfinite(x) else format(x, f)
    names = (self.reference, *self.arms)
    by = {a: {m.seed: m for m in late_models(data, a, (), self.probe, self.window) if m.lr == self.rate}
          for a in names}
    lines = ["## Per seed, late in training", "", f"Each seed's models at rate {self.rate:g}: "
             f"{self.probe} averaged over the readings in the last {self.window:.0%} of training "
             f"(— where a model does not learn), whether {self.reference}'s lies {self.bound:g} nats "
             f"past the band [0, log V] (and on which side), and the final validation loss.", "",
             "| seed | " + " | ".join(f"{a}: late {self.probe}" for a in names) + " | ran away | "
             + " | ".join(f"{a} loss" for a in names) + " |", "|---" * (2 + 2 * len(names)) + "|"]
    rows = []
    for seed, plain in sorted(by[self.reference].items()):
      side = runaway(plain, self.bound)
      get = lambda a, f, seed=seed: getattr(by[a][seed], f) if seed in by[a] else NAN
      rows.append({"seed": seed, "runaway": side, **{f"{a}_late": get(a, "end") for a in names},
                   **{f"{a}_final": get(a, "final") for a in names}})
      lines.append(f"| {seed} | " + " | ".join(fmt(get(a, "end"), "+.2f") for a in names)
                   + f" | { {1: 'above', -1: 'below', 0: 'no'}[side]} | "
                   + " | ".join(fmt(get(a, "final"), ".3f") for a in names) + " |")
    return Section(lines + [""], [], {"late_seeds": rows})


@dataclasses.dataclass
class Setting:
  """One arm of a ``Choice`` over its rates and seeds."""
  arm: str
  values: dict[str, float]  # its ``by`` overrides, by their last name
  score: float  # the mean over seeds of the fitted best loss (nan: no seed has an optimum)
  lr: float  # exp of the mean over seeds of the log optimum
  seeds: int
  eligible: bool
  reason: str  # why not eligible ("" when eligible)


@dataclasses.dataclass(frozen=True)
class Choice(Claim):
  """A choice: among ``arms`` (each set by its overrides ``by``), those eligible (every seed
  learns, ``curves.learns_every_seed``, and has its optimum bracketed by the rates), the one
  with the lowest score, the mean over seeds of the fitted best loss; an eligible arm within
  ``tie`` nats of it nearer ``default`` (in factor-2 steps of its ``by`` values) instead. The
  rate carried: the chosen arm's mean log optimum with its 95 % t interval. A choice at the
  edge of a ``by`` grid is flagged; its effect is the chosen arm minus the default's best
  loss, paired by seed (optimistic: chosen on these seeds). Its section: the arms' scores,
  their rate curves, a figure over the first two ``by``, and results.json's ``choice`` (the
  ``by`` values by last name, ``learning_rate``, ``learning_rate_interval``; null when none
  is eligible) and ``settings``."""
  family: str | None = None
  arms: tuple[str, ...] = ()
  by: tuple[str, ...] = ()
  default: tuple[float, ...] = ()
  tie: float = 0.02
  carried: str = "The next stage"  # who carries the choice, for the section
  test_kind = "finding"

  def needs(self) -> tuple[str, ...]:
    return self.arms

  def quantity_text(self) -> str:
    return "the mean over seeds of the fitted best loss"

  def rule(self) -> str:
    return (f"among the arms that learn with every seed's optimum bracketed, the lowest mean over "
            f"seeds of the fitted best loss; an arm within {self.tie} nats of it nearer the default "
            f"({', '.join(f'{d:g}' for d in self.default)}) is preferred; the rate is the chosen "
            f"arm's mean log optimum with its 95 % t interval.")

  def settings(self, data: Data) -> list[Setting]:
    out = []
    for arm in [a for a in self.arms if data.runs(a)]:
      rs = data.runs(arm)
      best, logs = curves.best_losses(rs), curves.log_optima(rs)
      reason = ("a seed does not learn" if not curves.learns_every_seed(rs) else
                "a seed's optimum is at the rate grid's edge" if not curves.bracketed(rs) else "")
      out.append(Setting(arm, {k: float(v) for k, v in named(data, arm, self.by).items()},
                         sum(best.values()) / len(best) if best else NAN,
                         math.exp(sum(logs.values()) / len(logs)) if logs else NAN, len(best),
                         not reason, reason))
    return sorted(out, key=lambda s: tuple(s.values.values()))

  def distance(self, s: Setting) -> float:
    return sum(abs(math.log2(v / d)) for v, d in zip(s.values.values(), self.default))

  def choose(self, data: Data) -> tuple[Setting | None, tuple | None, list[str],
                                         stats.Effect | None, list[Setting]]:
    """``(chosen, its rate's interval, lines, chosen minus default, every setting)``."""
    table = self.settings(data)
    eligible = [s for s in table if s.eligible]
    if not eligible:
      why = "; ".join(f"{s.arm}: {s.reason}" for s in table)
      return None, None, [f"No arm is eligible: {why}."], None, table
    lowest = min(eligible, key=lambda s: s.score)
    chosen = min([s for s in eligible if s.score <= lowest.score + self.tie],
                 key=lambda s: (self.distance(s), s.score))
    runs = data.runs(chosen.arm)
    logs = list(curves.log_optima(runs).values())
    e = stats.one_sample(logs) if len(logs) > 1 else None
    interval = (math.exp(e.lo), math.exp(e.hi)) if e is not None and e.defined else None
    lines = [f"Chosen: {words(chosen.values)} (mean best loss {chosen.score:.3f} over {chosen.seeds} "
             f"seeds), rate {chosen.lr:.3g}"
             + (f" [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "") + "."]
    if chosen is not lowest:
      lines.append(f"The lowest score was {lowest.arm}'s ({lowest.score:.3f}), within {self.tie} "
                   f"nats: the arm nearer the default is kept.")
    for i, v in enumerate(chosen.values.values()):
      grid = sorted({list(s.values.values())[i] for s in table})
      if len(grid) > 1 and v in (grid[0], grid[-1]):
        lines.append("The choice is at the edge of the grid: the best arm may lie beyond it.")
        break
    default = [s for s in table if self.distance(s) == 0]
    against = None
    if default and default[0] is not chosen:
      against = stats.paired(curves.best_losses(runs), curves.best_losses(data.runs(default[0].arm)))
      lines.append(f"Against the default, paired by seed: {against.text()} (optimistic: chosen "
                   f"on these seeds).")
    return chosen, interval, lines, against, table

  def test(self, data: Data) -> claims.Test:
    chosen, _, lines, against, _ = self.choose(data)
    return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.Verdict(
        self.claim, CHOSEN if chosen else claims.INCONCLUSIVE, lines, self.rule(), against,
        "chosen minus default best loss"))

  def section(self, data: Data, out: str) -> Section:
    chosen, interval, _, _, table = self.choose(data)
    keys = [k.split(".")[-1] for k in self.by]
    if chosen:
      values = ", ".join(f"`{k}={v:g}`" for k, v in zip(self.by, chosen.values.values()))
      head = f"{self.carried} carries {values} and the rate {chosen.lr:.3g} (results.json's `choice`)."
    else:
      head = f"No arm was eligible: {self.carried} has no choice (results.json's `choice` is null)."
    lines = [head, "",
             "## The choice's grid", "", "Per arm: the mean over seeds of the fitted best loss (the "
             "score), the optimum rate (exp of the mean log optimum), and whether the rule could "
             "choose it.", "",
             "| " + " | ".join(keys) + " | score (nats) | optimum rate | seeds | eligible |",
             "|---" * (len(keys) + 4) + "|"]
    for s in table:
      mark = "**chosen**" if s is chosen else ("yes" if s.eligible else f"no: {s.reason}")
      lines.append("| " + " | ".join(f"{v:g}" for v in s.values.values())
                   + f" | {s.score:.3f} | {s.lr:.3g} | {s.seeds} | {mark} |")
    result = None if chosen is None else {**chosen.values, "learning_rate": chosen.lr,
                                          "learning_rate_interval": interval}
    return Section(lines + [""], [self.plot(table, chosen, out)], {"choice": result, "settings": table})

  def plot(self, table: list[Setting], chosen: Setting | None, out: str) -> str | None:
    table = [s for s in table if math.isfinite(s.score)]
    if len(self.by) != 2 or not table:
      return None
    from research import page as reporting  # pylint: disable=import-outside-toplevel
    kx, ky = (k.split(".")[-1] for k in self.by)
    xs, ys = sorted({s.values[kx] for s in table}), sorted({s.values[ky] for s in table})
    z = np.full((len(ys), len(xs)), np.nan)
    for s in table:
      z[ys.index(s.values[ky]), xs.index(s.values[kx])] = s.score
    fig = reporting.figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    im = ax.imshow(z, cmap="viridis_r", aspect="auto")
    ax.set(xticks=range(len(xs)), xticklabels=[f"{x:g}" for x in xs], yticks=range(len(ys)),
           yticklabels=[f"{y:g}" for y in ys], xlabel=kx.replace("_", " "), ylabel=ky.replace("_", " "),
           title="Mean best loss (lower is better)")
    for s in table:
      mark = "*" if s is chosen else ""
      ax.text(xs.index(s.values[kx]), ys.index(s.values[ky]), f"{s.score:.2f}{mark}", ha="center",
              va="center", color="white", fontsize=8)
    fig.colorbar(im, ax=ax, label="nats")
    return reporting.save(fig, out, "choice_grid.png")


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


def span(values) -> float:
  """Doublings the values span (log2 of the largest over the smallest)."""
  return math.log2(max(values) / min(values)) if len(values) else NAN


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


def seed_slopes(points: Mapping[int, Mapping[Any, float]], min_points: int) -> dict[int, float]:
  """Per seed, the least-squares slope of its values against log2 of the axis."""
  return {s: slope([math.log2(v) for v in by], list(by.values()))
          for s, by in points.items() if len(by) >= min_points}


def not_located(missing: list[str]) -> tuple[bool, str]:
  return bool(missing), "Not located, so no verdict: " + "; ".join(missing) + "."


def directed_ps(values: list[float], margin: float, same_first: bool, predict: str = "higher"
                ) -> tuple[stats.Effect, float, float]:
  """``stats.directed``; with ``same_first``, a mean decisively within ``+-margin`` is
  against the claim even when it is decisively beyond 0 (``stats.outcome``'s order: an
  effect too small to matter, however certain)."""
  e, p_for, p_against = stats.directed(values, predict, margin)
  if same_first and math.isfinite(e.p_same) and e.p_same < stats.ALPHA:
    p_for = 1.0
  return e, p_for, p_against


def _missing(c: Claim, rule: str, what: str, notes=()) -> claims.Test:
  return claims.Test(c.key, c.claim, rule, [], missing=claims.missing(c.claim, what, rule, notes))


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


# ----------------------------------------------------------------------------- the ladder's rates
# A report section (``Study.sections``): the peak rate the optima predict at another value
# of the axis (andrea120m's width from a ladder of small ones).


@dataclasses.dataclass(frozen=True)
class RateAt:
  """The rate ``arm``'s located optima give at ``target`` of ``axis``, with a t interval
  over seeds. ``method`` "line": each seed's least-squares line of log(optimum) against
  log2(axis) (at least ``min_points`` values) evaluated at the target, then the mean over
  seeds; with ``holdout``, the lines refitted without the largest value predict it, against
  its fitted optima (a check of the extrapolation). "mean": an optimum that does not move,
  each seed's mean log optimum over the axis, then the mean over seeds."""
  arm: str
  axis: str
  target: float
  method: str = "line"
  learns: str = "interval"
  min_points: int = 3
  holdout: bool = False
  label: str = ""
  # The command that trains ``config`` at the rate, carrying these overrides of the arm's
  # cells (e.g. muP's base width and multipliers); no command without a config.
  config: str = ""
  carry: tuple[str, ...] = ()

  def command(self, data: Data, lr: float) -> str:
    rec = next(iter(data.records(self.arm)), {"overrides": {}})
    return " ".join([f"python -m experiments.run --config={self.config}"]
                    + [f"--config.{k}={rec['overrides'][k]:g}" if isinstance(rec["overrides"].get(k), float)
                       else f"--config.{k}={rec['overrides'].get(k)}" for k in self.carry]
                    + [f"--config.train.learning_rate={lr:.2g}"])

  def per_seed(self, points: dict, target: float) -> dict[int, float]:
    if self.method == "mean":
      return {s: sum(by.values()) / len(by) for s, by in points.items() if by}
    out = {}
    for s, by in points.items():
      if len(by) >= self.min_points:
        b, a = np.polyfit([math.log2(v) for v in by], list(by.values()), 1)
        out[s] = float(a + b * math.log2(target))
    return out

  def result(self, data: Data) -> dict:
    points, missing = located_optima(data, self.arm, self.axis, self.learns)
    e = stats.one_sample(list(self.per_seed(points, self.target).values()))
    used = [v for s, by in points.items() if s in self.per_seed(points, self.target) for v in by]
    out = {"arm": self.arm, "label": self.label, "method": self.method, "target": self.target,
           "lr": math.exp(e.diff) if math.isfinite(e.diff) else None,
           "interval": [math.exp(e.lo), math.exp(e.hi)] if e.defined else None,
           "seeds": e.n, "widest": max(used, default=None), "missing": missing, "check": None}
    if self.holdout and used:
      widest = max(used)
      held = self.per_seed({s: {v: x for v, x in by.items() if v != widest} for s, by in points.items()}, widest)
      c = stats.one_sample([held[s] - by[widest] for s, by in points.items() if s in held and widest in by])
      if math.isfinite(c.diff):
        out["check"] = (f"fitted without {widest}, the lines predict its optimum x{math.exp(c.diff):.2f} "
                        f"of the fitted one" + (f" [{math.exp(c.lo):.2f}, {math.exp(c.hi):.2f}]" if c.defined else ""))
    return out

  def text(self, data: Data) -> str:
    r = self.result(data)
    if r["lr"] is None:
      return f"- {self.label or self.arm}: no prediction ({'; '.join(r['missing']) or 'no located optima'})."
    ci = ("no interval" if r["interval"] is None else
          "95 % t interval over seeds {:.2g} .. {:.2g}".format(*r["interval"]))
    far = (f", extrapolated x{self.target / r['widest']:.1f} beyond {r['widest']}"
           if self.method == "line" and r["widest"] and self.target > r["widest"] else "")
    how = ("each seed's line of log(optimum) against log2 extrapolated" if self.method == "line"
           else "each seed's mean log optimum over the axis (an optimum that does not move)")
    return (f"- {self.label or self.arm}, arm `{self.arm}`: {r['lr']:.2g} ({ci}; {r['seeds']} seeds"
            f"{far}; {how})" + (f"; check: {r['check']}" if r["check"] else "")
            + (f"; optima not located: {'; '.join(r['missing'])}" if r["missing"] else "") + "."
            + (f" To train it: `{self.command(data, r['lr'])}`." if self.config else ""))


@dataclasses.dataclass(frozen=True)
class Rates:
  """A report section of ``RateAt`` lines under ``title``, with a closing note."""
  title: str
  rates: tuple[RateAt, ...]
  note: str = ""
  key: str = "rates"

  def section(self, data: Data, out: str) -> Section:
    del out
    lines = [r.text(data) for r in self.rates] + (["", self.note] if self.note else [])
    return Section([f"## {self.title}", "", *lines, ""], [], {self.key: [r.result(data) for r in self.rates]})


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
    from research import page as reporting  # pylint: disable=import-outside-toplevel
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
    from research import page as reporting  # pylint: disable=import-outside-toplevel
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
  from research import page as reporting  # pylint: disable=import-outside-toplevel
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
    from research import page as reporting  # pylint: disable=import-outside-toplevel
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


# ----------------------------------------------------------------------------- a rate recipe
# The learning-rate recipe (issue 45): how the optimal rate moves along each axis that
# separates a small base from a target model, one axis at a time, each seed's optimum
# placed by the flat-basin fit (``research/optimum.py``), and the axes combined into one
# predicted rate whose interval holds each extrapolation's error.


def basin_optima(data: Data, arm: str, axis: str) -> tuple[dict[int, dict[Any, float]], list[str]]:
  """``{seed: {value: log(optimum)}}`` of ``arm`` along ``axis``, each seed's optimum the
  vertex of the parabola over its rates within ``optimum.BAND`` of its best
  (``optimum.basin`` of that seed alone), and what was not located: a value where the arm
  does not learn, a seed whose basin has no minimum among its rates (an optimum at or
  beyond the grid's edge)."""
  missing, points = [], {}
  for v in data.values(arm, axis):
    runs, where = data.runs(arm, {axis: v}), at_text({axis: v})[2:]
    if not curves.learns(runs):
      missing.append(f"{where}: {arm} does not learn")
      continue
    table = optimum.table(runs)
    for seed in sorted({r.seed for r in runs}):
      own = {lr: {seed: by[seed]} for lr, by in table.items() if seed in by}
      b = optimum.basin(own, resamples=0)
      if b.optimum is None:
        missing.append(f"{where} seed {seed}: {arm}'s basin has no minimum inside the grid "
                       f"(best grid rate {b.best:.3g})")
      else:
        points.setdefault(seed, {})[v] = math.log(b.optimum)
  return dict(sorted(points.items())), missing


def local_slopes(points: Mapping[int, Mapping[Any, float]]) -> list[float]:
  """The slopes between neighbouring values of the axis of the seeds' mean log optimum
  (per doubling): where they differ from the straight line's, the line bends."""
  values = sorted({v for by in points.values() for v in by})
  means = [float(np.mean([by[v] for by in points.values() if v in by])) for v in values]
  return [(b - a) / math.log2(w / v) for (v, a), (w, b) in zip(zip(values, means),
                                                                zip(values[1:], means[1:]))]


@dataclasses.dataclass(frozen=True)
class AxisSlope(Claim):
  """How far the optimal rate moves along one axis: per seed, the least-squares slope of
  log(flat-basin optimum) against log2 ``axis`` (``basin_optima``; at least ``min_points``
  values); over seeds a one-sample t test: ``falls`` / ``rises`` (beyond 0), or ``flat``
  (the optimum moves by less than ``factor`` over the axis' span: within
  ``+-log(factor) / span`` per doubling, two one-sided tests)."""
  arm: str = ""
  axis: str = ""
  predict: str = "falls"
  factor: float = 2.0
  span: float = 2.0  # doublings the axis spans in the grid (for the flat margin and the plan)
  min_points: int = 3

  @property
  def test_kind(self) -> str:  # type: ignore[override]
    return "equivalent" if self.predict == "flat" else "directed"

  @property
  def margin(self) -> float:
    """log(factor) per the span of the axis, in log per doubling (``flat`` only)."""
    return math.log(self.factor) / self.span if self.predict == "flat" else NAN

  def needs(self) -> tuple[str, ...]:
    return (self.arm,)

  def quantity_text(self) -> str:
    return f"{self.arm}: slope of log(flat-basin optimal rate) per doubling of {self.axis}"

  def rule(self) -> str:
    want = (f"within ±log {self.factor:g} / {self.span:g} = ±{self.margin:.3f} per doubling (the "
            f"optimum moves by less than a factor {self.factor:g} over the axis; two one-sided "
            f"tests)" if self.predict == "flat" else
            f"{'below' if self.predict == 'falls' else 'above'} 0")
    return (f"per seed and value of {self.axis}, the optimal rate: the vertex of the parabola in "
            f"log(rate) over the seed's rates within {optimum.BAND:g} nats of its best "
            f"(research/optimum.py); per seed, the least-squares {self.quantity_text()} (at "
            f"least {self.min_points} values); reproduced when the mean slope over seeds lies "
            f"{want}, not reproduced when it lies decisively "
            + ("outside the margin" if self.predict == "flat" else "on the other side of 0")
            + "; inconclusive otherwise, or when a seed's optimum is not located (the arm does "
              "not learn, or its basin has no minimum inside the grid) at a value of the axis")

  def slopes(self, data: Data) -> tuple[dict[int, float], dict, list[str]]:
    points, missing = basin_optima(data, self.arm, self.axis)
    return seed_slopes(points, self.min_points), points, missing

  def test(self, data: Data) -> claims.Test:
    slopes, points, out = self.slopes(data)
    if len(slopes) < 2:
      return _missing(self, self.rule(), f"{self.min_points} located optima for two seeds of "
                      f"{self.arm} along {self.axis}", out)
    if self.predict == "flat":
      e, pf, pa = stats.within(list(slopes.values()), self.margin)
    else:
      e = stats.one_sample(list(slopes.values()))
      side = "below" if self.predict == "falls" else "above"
      pf, pa = p_beyond(e, 0.0, side), p_beyond(e, 0.0, "above" if side == "below" else "below")
    bends = ", ".join(f"{s:+.2f}" for s in local_slopes(points))
    lines = [f"{self.arm}'s optimum moves by a factor {math.exp(e.diff):.2f} "
             f"per doubling of {self.axis.split('.')[-1]}; the local slopes between neighbouring "
             f"values (seeds' mean) are {bends} per doubling."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), pf, pa,
                       [not_located(out)], tuple(sorted(slopes)))


@dataclasses.dataclass(frozen=True)
class Leg:
  """One axis of a recipe: ``arm``'s optimum along ``axis``, carried from the base's value
  to the target's."""
  arm: str
  axis: str
  target: float  # the target model's value of the axis


@dataclasses.dataclass(frozen=True)
class Prediction:
  """A recipe's rate at a point: the log rate, and how far below and above it the interval
  reaches (log units), with a row per source of error."""
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
  """A learning-rate recipe (issue 45): the base's optimal rate (``base_arm`` at its one
  grid point, the base, the multi-seed flat-basin reading: its bootstrap interval where the fit resolves it, the
  grid points beside the best where it does not), carried along each ``Leg``: per seed the
  slope of log(optimum) per doubling (``AxisSlope``), its mean times the doublings from the
  base to the target. Each leg's error, in log units, is (the half-width of the slope's 95 %
  t interval over seeds + the largest gap between a local slope and the line, its bend)
  times the doublings it is carried; the interval adds the base's and every leg's error in
  quadrature (independent sources). ``command``: the run that trains the target model under
  the recipe's rules (``carry``: its overrides) at the predicted rate."""
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

  def base_rate(self, data: Data, base: Mapping[str, Any]) -> tuple[float, float, float, str]:
    b = optimum.basin(optimum.table(data.runs(self.base_arm, base)))
    if b.resolved:
      lo, hi = b.interval
      center = b.optimum
    else:
      center = b.best
      lo, hi = (x if x is not None else b.best for x in b.between)
    return math.log(center), math.log(center / lo), math.log(hi / center), b.text()

  def predict(self, data: Data, at: Mapping[str, Any] | None = None) -> Prediction | None:
    """The rate at ``at`` (default: every leg's target); None without a base or when a leg
    has no slope."""
    base = self.base(data)
    if base is None or not data.runs(self.base_arm, base):
      return None
    log_rate, below, above, base_text = self.base_rate(data, base)
    rows = [("base", f"{self.base_arm} at {words(base)}", base_text, below, above)]
    err2_lo, err2_hi = below ** 2, above ** 2
    for leg in self.legs:
      target = (at or {}).get(leg.axis, leg.target) if at is not None else leg.target
      doublings = math.log2(target / base[leg.axis])
      if doublings == 0:
        continue
      points, missing = basin_optima(data, leg.arm, leg.axis)
      slopes = seed_slopes(points, 2)
      if len(slopes) < 2:
        return None
      e = stats.one_sample(list(slopes.values()))
      bend = max((abs(s - e.diff) for s in local_slopes(points)), default=0.0)
      half = (e.hi - e.diff if e.defined else math.inf) + bend
      err = half * abs(doublings)
      log_rate += e.diff * doublings
      err2_lo, err2_hi = err2_lo + err ** 2, err2_hi + err ** 2
      rows.append((leg.axis, leg.arm, e, bend, doublings, err))
    return Prediction(log_rate, math.sqrt(err2_lo), math.sqrt(err2_hi), rows)

  def command(self, p: Prediction) -> str:
    flags = "".join(f" --config.{k}={v}" for k, v in self.carry.items())
    return (f"python -m experiments.run --config={self.config}{flags} "
            f"--config.train.learning_rate={p.rate:.3g}")

  def section(self, data: Data, out: str) -> Section:
    p = self.predict(data)
    lines = [f"## {self.title}", ""]
    if p is None:
      lines += ["Not predicted: the base has no runs, or a leg has fewer than two seeds with "
                "located optima (the claims above say which).", ""]
      return Section(lines, results={self.name: None})
    lines += ["| source | measured on | slope per doubling (log rate) [95 % t] | bend | doublings "
              "carried | error (x) |", "|---|---|---|---|---|---|"]
    base = p.rows[0]
    lines.append(f"| base rate | {base[1]} | {base[2]} | | | x{math.exp(max(base[3], base[4])):.2f} |")
    for axis, arm, e, bend, doublings, err in p.rows[1:]:
      lines.append(f"| {axis} | {arm} | {e.diff:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] | {bend:.3f} | "
                   f"{doublings:+.2f} | x{math.exp(err):.2f} |")
    lines += ["", f"**{self.name}: {p.text()}** (the interval adds the base's and each leg's "
              f"error in quadrature; a leg's error is its slope's 95 % t half-width plus its bend, "
              f"times the doublings carried).", "", f"    {self.command(p)}", ""]
    if self.note:
      lines += [self.note, ""]
    lo, hi = p.interval
    return Section(lines, results={self.name: {"rate": p.rate, "low": lo, "high": hi,
                                               "command": self.command(p)}})


@dataclasses.dataclass(frozen=True)
class HeldOut(Claim):
  """A recipe checked on a rung it did not use (``arm``'s one grid point): per seed, log of
  ``arm``'s flat-basin optimum there minus the recipe's predicted log rate there; reproduced when the mean lies within
  the predicted interval's half-width on its side (two one-sided tests), not reproduced when
  decisively beyond it, inconclusive otherwise or when an optimum is not located."""
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
    points, out = basin_optima(data, self.arm, next(iter(at))) if at else ({}, [])
    if p is None or len(points) < 2:
      return _missing(self, self.rule(), f"two seeds of {self.arm} with located optima and "
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


# ----------------------------------------------------------------------------- norms
# The norms study's kind (experiments/studies/norms.py, issue 59): a per-layer probe's growth
# with depth compared between two arms, as Kim et al. 2025 compare Peri-LN's hidden states with
# Pre-LN's (their Figure 1: the variance per layer during training, not at initialisation).

WHEN = ("init", "end")


@dataclasses.dataclass(frozen=True)
class ProbeGap(Claim):
  """``arm`` against ``reference``: per seed, log of ``probe``'s last entry over its entry
  ``first`` (1: after the first block, 0 being the embedding) ``when`` (``end``: at the end of
  training, each arm at the seed's best rate tried, a diverged model left out; ``init``: at
  initialisation, the seed's first record), ``arm - reference`` paired by seed; reproduced when
  decisively ``predict`` (lower or higher) of 0, not reproduced when decisively the other way or
  equivalent to 0 within ``none_within`` (TOST, log units: a gap too small to matter);
  inconclusive otherwise, or (``end``) when an arm does not learn."""
  arm: str = ""
  reference: str = ""
  probe: str = "residual_norm"
  first: int = 1
  when: str = "end"
  predict: str = "lower"
  none_within: float = NAN

  def __post_init__(self):
    if self.when not in WHEN or self.predict not in ("lower", "higher"):
      raise ValueError(f"ProbeGap {self.claim!r}: when={self.when!r}, predict={self.predict!r}; "
                       f"expected when in {WHEN} and predict 'lower' or 'higher'")

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def quantity_text(self) -> str:
    at = "at the end of training, at each seed's best rate" if self.when == "end" else "at initialisation"
    return f"{self.arm} - {self.reference}: log({self.probe} last / entry {self.first}) {at}"

  def rule(self) -> str:
    return (f"paired by seed, {self.quantity_text()}; reproduced when it lies decisively "
            f"{'below' if self.predict == 'lower' else 'above'} 0 (its test at the family's Holm "
            f"level), not reproduced when decisively on the other side"
            + (f" or equivalent to 0 within ±log {math.exp(self.none_within):g} (TOST)"
               if math.isfinite(self.none_within) else "")
            + "; inconclusive otherwise" + (", or when an arm does not learn" if self.when == "end" else "") + ".")

  def ratios(self, data: Data, arm: str) -> dict[int, float]:
    """Per seed, the log ratio (``end``: at the seed's best rate tried, not diverged)."""
    rows = [(run, rec) for a, _, run, rec in data.rows if a == arm]
    best = curves.optima([run for run, _ in rows]) if self.when == "end" else {}
    out: dict[int, float] = {}
    for run, rec in rows:
      if self.when == "end" and (run.seed not in best or run.lr != best[run.seed].grid_lr or run.diverged):
        continue
      v = probe_ratio(rec, self.when, self.probe, self.first)
      if math.isfinite(v) and v > 0:
        out.setdefault(run.seed, math.log(v))
    return out

  def test(self, data: Data) -> claims.Test:
    a, b = self.ratios(data, self.arm), self.ratios(data, self.reference)
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"{self.probe} {self.when} profiles of two seeds of {self.arm} and {self.reference}",
          self.rule()))
    e = dataclasses.replace(stats.one_sample([a[s] - b[s] for s in seeds], self.none_within), kind="paired")
    side, other = ("below", "above") if self.predict == "lower" else ("above", "below")
    p_for, p_against = p_beyond(e, 0.0, side), p_beyond(e, 0.0, other)
    if math.isfinite(self.none_within):
      p_against = min(p_against, e.p_same)
    lines = [f"{self.probe} last / entry {self.first} ({self.when}, geometric mean): {self.arm} "
             f"{ratio_text(a)}, {self.reference} {ratio_text(b)}; the ratio of the two "
             f"{ratio_text({s: a[s] - b[s] for s in seeds})}."]
    named = {x: data.runs(x) for x in (self.arm, self.reference)}
    checks = [learn_guard(named)] if self.when == "end" else []
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), p_for,
                       p_against, checks, tuple(seeds))

  def section(self, data: Data, out: str) -> Section:
    """A figure: the probe per layer at initialisation and at the end, both arms."""
    panels = ((self.probe, "init"), (self.probe, "end"))
    return Section([], [plot_profiles(data, (self.arm, self.reference), panels, out,
                                      f"{self.probe}_{self.arm}_{self.reference}.png")])

"""Claim kinds over several arms and per-layer profiles (first for the confirmatory norm x MLP study).

``Contrast``: a signed sum of arms' per-seed quantity (a difference, a difference of
differences), "none" within a margin an outcome; ``AllEquivalent``: several arms each within
a margin of one reference; ``NotRun``: a claim the plan sized and its budget cut;
``Profile``: a probe at initialisation (a per-layer profile, last layer over first), flat
within a factor or growing beyond one; and the report section ``Rates`` of ``RateAt`` (the rate
the optima give at another value of an axis).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping

import numpy as np

from research import claims
from research import curves
from research import power
from research import stats
from research.kind_base import at_text, Claim, Data, named, NAN, p_beyond, p_outside, QUANTITIES, Section
from research.kind_ladder import located_optima


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

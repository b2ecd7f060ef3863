"""``Contrast`` (a signed sum of arms' per-seed quantity, decided by ``decide``), ``Alike`` (arms the same, or no worse) and ``NotRun`` (a claim its budget cut)."""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Mapping

from andrea_jax import errors
from research import claims
from research import curves
from research import power
from research import stats
from research.kind_base import (
    _missing, at_text, Claim, Data, highest, LEARNS, LOG_RATIO, log_text, LOSS, lowest, NAN, p_beyond, p_within,
    QUANTITIES, Section, ToTarget)
from research.kind_choice import plot_profiles, plot_to_target


def ratio_text(logs: Mapping[int, float]) -> str:
  """A geometric mean of per-seed ratios with its interval, from their logs."""
  e = stats.one_sample(list(logs.values()))
  if not math.isfinite(e.diff):
    return "none"
  ci = f" [95 % CI {math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}]" if e.defined else ""
  return f"{math.exp(e.diff):.2f}{ci} ({e.n} seeds)"


def per_rate_text(named: dict[str, list[curves.Run]], terms: tuple[tuple[str, int], ...]) -> str:
  """Per rate every named arm has, the mean and interval of the ``terms``' signed sum of the final losses:
  ``1e-03: +0.012 nats [...]; ...`` (losses: ``LOSS``)."""
  rates = sorted(set.intersection(*(set(curves.by_rate(rs)) for rs in named.values())))
  return "; ".join(f"{lr:.2g}: " + stats.one_sample(list(signed(
      terms, {k: {r.seed: r.clipped for r in rs if r.lr == lr} for k, rs in named.items()}).values())).text(LOSS)
      for lr in rates)


def signed(terms: tuple[tuple[str, int], ...], per: Mapping[str, Mapping[int, float]]) -> dict[int, float]:
  """Per seed every term has, ``sum(sign * per[arm][seed])``."""
  seeds = sorted(set.intersection(*(set(per[a]) for a, _ in terms)))
  return {s: sum(sign * per[a][s] for a, sign in terms) for s in seeds}


@dataclasses.dataclass(frozen=True)
class Probe:
  """Per seed, log(a per-layer probe's last entry / entry ``first`` / ``over``) (entry 0: the embedding),
  ``when`` ``init`` (a seed's first record), ``end`` (at the seed's best rate tried, diverged left out) or
  ``change`` (the end's minus the same model's at initialisation: the growth training added, a log ratio)."""
  name: str = "residual_norm"
  when: str = "end"
  first: int = 1
  over: float = 1.0

  def __post_init__(self):
    if self.when not in ("init", "end", "change"):
      raise errors.ConfigError(f"Probe {self.name!r}: when={self.when!r} is not one of ['change', 'end', 'init']")

  def text(self) -> str:
    at = {"end": "at the end of training, at each seed's best rate", "init": "at initialisation",
          "change": "at the end of training, at each seed's best rate, minus the same model's at initialisation "
                    "(a log ratio)"}[self.when]
    return f"log({self.name} last / entry {self.first}{f' / {self.over:g}' if self.over != 1 else ''}) {at}"

  def per_seed(self, data: Data, arm: str, at=()) -> dict[int, float]:
    if self.when == "change":  # the same models (each seed's best rate) read at both ends
      return self.changes(data, arm, at)
    rows = list(zip(data.runs(arm, at), data.records(arm, at)))
    best = curves.optima([run for run, _ in rows]) if self.when == "end" else {}
    out: dict[int, float] = {}
    for run, rec in rows:
      if self.when == "end" and (run.seed not in best or run.lr != best[run.seed].grid_lr or run.diverged):
        continue
      v = self.ratio(rec, self.when)
      if math.isfinite(v) and v > 0:
        out.setdefault(run.seed, math.log(v / self.over))
    return out

  def ratio(self, rec, when: str) -> float:
    """The record's probe at ``when``: its last entry over entry ``first`` (nan where missing)."""
    p = (rec.get(when) or {}).get(self.name) or []
    return p[-1] / p[self.first] if len(p) > self.first and p[self.first] and p[-1] is not None else NAN

  def changes(self, data: Data, arm: str, at=()) -> dict[int, float]:
    """Per seed, log(ratio at the end / ratio at init) of the model at the seed's best rate tried."""
    rows = list(zip(data.runs(arm, at), data.records(arm, at)))
    best = curves.optima([run for run, _ in rows])
    out: dict[int, float] = {}
    for run, rec in rows:
      if run.seed in best and run.lr == best[run.seed].grid_lr and not run.diverged:
        end, init = self.ratio(rec, "end"), self.ratio(rec, "init")
        if all(math.isfinite(v) and v > 0 for v in (end, init)):
          out.setdefault(run.seed, math.log(end / init))
    return out


# What ``decide`` decides: ``higher``/``lower`` than a bound, the ``same`` within a margin, or ``below`` one.
PREDICTIONS = ("higher", "lower", "same", "below")


def decide(parts: list[stats.Effect], predict: str, margin: float = NAN, bound: float = 0.0,
           against: float = NAN, holm: str = "", flat: tuple[stats.Effect, ...] = ()) -> tuple[float, float]:
  """``(p for, p against)`` of ``parts[0]``. ``same``: TOST within ``bound +- margin`` for, decisively
  outside against. ``higher``/``lower``: decisively beyond ``bound`` for; decisively the other side, or within
  ``margin`` (TOST), against. ``holm`` (Holm over the parts, a part decisively within ``margin`` never
  for): ``every``, each part must point ``predict`` (against: the first's); ``first``, the first decides for,
  any part decisively the other way against. ``flat``: effects that must lie within ``+-bound`` too
  (decisively outside: against). A finite ``against``: also decisively past it."""
  e = parts[0]
  if predict == "same":  # within bound +- margin (bound 0: the effect's own TOST p)
    p_for = p_within(e, bound, margin) if bound else e.p_same
    return p_for, p_beyond(e, bound + margin, "above") if e.diff >= bound else p_beyond(e, bound - margin, "below")
  if predict == "below":  # one-sided, no worse than +margin
    return (p_beyond(e, margin, "below") / 2 if e.diff < margin else 1.0,
            p_beyond(e, margin, "above") / 2 if e.diff >= margin else 1.0)
  side, other = ("below", "above") if predict == "lower" else ("above", "below")
  if holm:  # per part, Holm-adjusted: for if it points ``predict`` and is not decisively negligible
    ps, same = stats.holm([d.p for d in parts]), stats.holm([d.p_same for d in parts])
    toward = [d.diff < 0 if predict == "lower" else d.diff > 0 for d in parts]
    fors = [p if not math.isfinite(p) or t and not s < stats.ALPHA else 1.0 for p, s, t in zip(ps, same, toward)]
    away = [p if d.diff != 0 and not t else NAN for d, p, t in zip(parts, ps, toward)]
    if holm == "first":
      p_against = lowest([same[0] if math.isfinite(margin) else NAN, *away])
      p_for = fors[0] if not p_against < stats.ALPHA else 1.0
    else:
      p_for = highest(fors)
      p_against = lowest([same[0], away[0], 1.0]) if math.isfinite(ps[0]) else same[0]
  else:
    p_for, p_against = p_beyond(e, bound, side), p_beyond(e, bound, other)
    if math.isfinite(margin):
      p_against = min(p_against, e.p_same)
  if flat:
    p_for = highest([p_for, *(p_beyond(f, b, s) for f in flat for b, s in ((bound, "below"), (-bound, "above")))])
    p_against = lowest([p_against, *(p_beyond(f, b, s) for f in flat for b, s in ((bound, "above"), (-bound, "below")))])
  if math.isfinite(against):
    p_against = lowest([p_against, p_beyond(e, against, other)])
  return p_for, p_against


def pair(arm: str, reference: str) -> tuple[tuple[str, int], ...]:
  """The terms of ``arm - reference``."""
  return ((arm, 1), (reference, -1))


@dataclasses.dataclass(frozen=True)
class Contrast(Claim):
  """Per seed, ``sum(sign * quantity(arm))`` over ``terms`` at ``at`` (``pair(a, b)``: a - b; four terms: a
  difference of differences); the quantity a ``QUANTITIES`` name, a ``Probe`` or a ``ToTarget`` (a seed that
  did not reach the target holds: censored, cannot conclude). Decided by ``decide``:
  ``predict`` ``higher``/``lower`` of ``bound`` (``also``: further term sets, Holm over all as
  ``holm="every"`` or ``holm="first"`` says, see ``decide``; ``flat``: arms whose quantity must lie within ``+-bound``), ``same`` within ``bound +- margin``, or
  ``below`` ``+margin`` (one-sided). ``over``: judged at the largest value of that axis the terms' arms share
  (``holm``: the largest any has, which they must share, the smaller values the further parts). ``welch``: Welch's test for arms
  sharing under two seeds. Guards: ``learners`` (None: every term) must learn; ``edge``: no optimum at
  the grid's edge. ``shared_rates``: over the rates all terms share. ``report``/``beside``: arms shown
  or drawn beside it, not judged."""
  terms: tuple[tuple[str, int], ...] = ()
  predict: str = "higher"
  quantity: str | Probe | ToTarget = "best_loss"
  at: tuple = ()
  margin: float = NAN
  bound: float = 0.0
  against: float = NAN
  holm: str = ""
  over: str = ""
  flat: tuple[str, ...] = ()
  also: tuple[tuple[tuple[str, int], ...], ...] = ()
  welch: bool = False
  shared_rates: bool = False
  learners: tuple[str, ...] | None = None
  edge: bool = True
  learns: str = "interval"
  report: tuple[str, ...] = ()
  beside: tuple[str, ...] = ()
  CHOICES = {"predict": PREDICTIONS, "quantity": tuple(QUANTITIES), "holm": ("every", "first"), "learns": tuple(LEARNS)}

  def needs(self) -> tuple[str, ...]:
    target = (self.quantity.reference,) if isinstance(self.quantity, ToTarget) and self.quantity.reference else ()
    return tuple(dict.fromkeys((*(a for t in (self.terms, *self.also) for a, _ in t), *self.flat, *target)))

  def quantity_text(self, at=None) -> str:
    what = self.quantity.text() if isinstance(self.quantity, (Probe, ToTarget)) else QUANTITIES[self.quantity][0]
    over = "" if not self.over or at is not None else (
        f" at the largest {self.over} any has (all must have it)" if self.holm else f" at the largest {self.over} they share")
    return (f"{self.expr(self.terms)}: {what}{at_text(self.at if at is None else at)}{over}"
            + (", over the rates they share" if self.shared_rates else ""))

  def unit(self) -> str:
    if isinstance(self.quantity, ToTarget):
      return self.quantity.unit()
    return LOG_RATIO if isinstance(self.quantity, Probe) else QUANTITIES[self.quantity].unit

  def rule(self) -> str:
    if self.predict == "same":
      want = (f"reproduced when two one-sided tests put it within {log_text(self.bound) + ' ' if self.bound else ''}"
              f"±{log_text(self.margin)}, not reproduced when it lies decisively outside")
    elif self.predict == "below":
      want = (f"reproduced when it lies below +{log_text(self.margin)} (one-sided), not reproduced when "
              f"decisively above")
    else:
      none = f"within ±{log_text(self.margin)} (TOST)" if math.isfinite(self.margin) else ""
      band = f"{' and '.join(self.flat)}'s within ±{log_text(self.bound)}"
      first = self.holm == "first"
      others = ", ".join(self.expr(t) for t in self.also) or f"the smaller values of {self.over}"
      want = (f"reproduced when it lies decisively {'below' if self.predict == 'lower' else 'above'} "
              f"{log_text(self.bound)}" + "".join(f" and {self.expr(t)} too" for t in self.also if not first)
              + (f" and not {none}" if self.holm and none else "") + (f" and {band}" if self.flat else "")
              + (f" (Holm over it and {others})" if first else
                 " (Holm over the parts)" if self.also else "") + ", not reproduced when decisively on "
              "the other side" + (" or any of those decisively the other way" if first else "")
              + (f" or {' and '.join(self.flat)}'s wholly outside ±{log_text(self.bound)}" if self.flat else "")
              + (f" or equivalent to 0 {none}" if none else "")
              + (f" or decisively beyond {self.against:+g} on that side" if math.isfinite(self.against) else ""))
    learners = self.needs() if self.learners is None else self.learners
    return (f"per seed, {self.quantity_text()}" + (" (Welch when fewer than two seeds are shared)" if self.welch else "")
            + f"; {want}; inconclusive otherwise"
            + (", or when a seed did not reach the target (censored)" if isinstance(self.quantity, ToTarget) else "")
            + (f", or when {', '.join(learners)} does not learn" if learners else "")
            + (", or when a learning arm has a seed's optimum at the grid's edge" if self.edge else ""))

  @staticmethod
  def expr(terms) -> str:
    """``a - b``; a difference of differences (signs + - - +) as ``(a - b) - (c - d)``."""
    if [s for _, s in terms] == [1, -1, -1, 1]:
      (a, _), (b, _), (c, _), (d, _) = terms
      return f"({a} - {b}) - ({c} - {d})"
    return " ".join(f"{'+' if s > 0 else '-'} {a}" for a, s in terms).removeprefix("+ ")

  def values(self, data: Data, named: dict[str, list[curves.Run]], at) -> dict[str, dict[int, float]]:
    if isinstance(self.quantity, (Probe, ToTarget)):
      return {a: self.quantity.per_seed(data, a, at) for a in named}
    if self.quantity == "sensitivity" and not self.shared_rates:
      rates = curves.base_rates(*named.values())
      return {a: curves.sensitivity(rs, rates) for a, rs in named.items()}
    return {a: QUANTITIES[self.quantity][1](rs) for a, rs in named.items()}

  def effect_of(self, terms, per: dict, margin: float) -> stats.Effect:
    values = signed(terms, per)
    if self.welch and len(values) < 2 and len(terms) == 2:
      return stats.welch(list(per[terms[0][0]].values()), list(per[terms[1][0]].values()), margin)
    e = stats.one_sample(list(values.values()), margin)
    return dataclasses.replace(e, kind="paired") if len(terms) > 1 else e

  def measure(self, data: Data, at) -> tuple[dict[str, list[curves.Run]], dict[str, dict[int, float]]]:
    """Each arm's runs at ``at`` (``shared_rates``: at the rates every arm was trained at) and per-seed quantity."""
    named = {a: data.runs(a, at) for a in self.needs()}
    if self.shared_rates:
      rates = set.intersection(*(set(curves.by_rate(rs)) for rs in named.values()))
      named = {k: [r for r in rs if r.lr in rates] for k, rs in named.items()}
    return named, self.values(data, named, at)

  def test(self, data: Data) -> claims.Test:
    values = [data.values(a, self.over) for a in self.needs()] if self.over else [[]]
    shared = sorted(set.intersection(*map(set, values)), reverse=True)
    if self.over and (not shared or self.holm and shared[0] != max(v for vs in values for v in vs)):
      return _missing(self, f"{', '.join(self.needs())} at the largest {self.over}")
    at, *below = [(*self.at, (self.over, v)) for v in shared[:None if self.holm else 1]] or [self.at]
    named, per = self.measure(data, at)
    seeds = tuple(signed(self.terms, per))
    if not all(per.values()) or (len(seeds) < 2 and not self.welch):
      return _missing(self, f"two seeds shared by {', '.join(named)}{at_text(at)}")
    e = self.effect_of(self.terms, per, self.margin)
    parts = ([e] + [self.effect_of(t, per, NAN) for t in self.also]
             + [self.effect_of(self.terms, self.measure(data, b)[1], self.margin) for b in below])
    flat = tuple(stats.one_sample(list(per[a].values())) for a in self.flat)
    p_for, p_against = decide(parts, self.predict, self.margin, self.bound, self.against, self.holm, flat)
    lost = [a for a in (self.needs() if self.learners is None else self.learners) if not LEARNS[self.learns](named[a])]
    checks = [(bool(lost), f"Does not learn: {', '.join(lost)}." if lost else "")]
    if isinstance(self.quantity, ToTarget):  # the grid's edge of what reached the target, per point
      edges = [e for a in named for e in self.quantity.edges(data, a, at)] if self.edge else []
      checks.append((bool(edges), "At the grid's edge: " + "; ".join(edges) + "."))
    elif self.edge:
      checks.append(claims.edge_guard(named))
    if isinstance(self.quantity, ToTarget):  # a seed that never reached it has no value to drop
      missed = {a: sorted(s for s, v in per[a].items() if v == math.inf) for a in named}
      checks.append((any(missed.values()), "Cannot conclude: " + "; ".join(
          f"{a} seed{'s' * (len(s) > 1)} {', '.join(map(str, s))}" for a, s in missed.items() if s)
          + f" did not reach {self.quantity.goal()} (censored: no {self.quantity.by} to the target)."))
      lines = self.quantity.target_lines(data, at) + [f"{a}: {self.quantity.describe(per[a])}." for a in named]
    elif isinstance(self.quantity, Probe):
      shown = {a: per[a] for a in named} | {a: self.quantity.per_seed(data, a, at) for a in self.report}
      lines = [f"{self.quantity.text()} (geometric mean): " + "; ".join(
          f"{a} {ratio_text(v)}" + (" (reported, not judged)" if a in self.report else "") for a, v in shown.items()) + "."]
    else:
      lines = [f"{a}: {curves.describe(rs)}; {self.quantity} {stats.one_sample(list(per[a].values())).text(self.unit())}."
               for a, rs in named.items()]
      shared = per_rate_text(named, self.terms)
      lines += [f"At each shared rate (reported, not judged): {shared}."] if shared else []
    lines += [f"{self.expr(t)}: {p.text(self.unit())}." for t, p in zip(self.also, parts[1:])]
    if below:
      lines += [f"Per {self.over}, {self.expr(self.terms)} (Holm): " + "; ".join(
          f"{dict(a)[self.over]} {p.text(self.unit())} ({o})" for a, p, o in reversed(list(zip([at, *below], parts,
                                                                                      stats.outcomes(parts))))) + "."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(at),
                       p_for, p_against, checks, seeds)

  @staticmethod
  def figures(contrasts: list["Contrast"], data: Data, out: str) -> list[str]:
    """Per probe the contrasts read, each arm's mean per-layer profile at init (and at the end if read there);
    per target loss they read, every arm's validation loss against tokens and against seconds."""
    groups: dict[tuple[str, str], list[str]] = {}
    for c in contrasts:
      if isinstance(c.quantity, Probe):
        groups.setdefault((c.quantity.name, c.quantity.when), []).extend((*c.needs(), *c.report, *c.beside))
    plots = [plot_profiles(data, tuple(dict.fromkeys(arms)), ((probe, "init"),) + (((probe, "end"),) if when != "init" else ()),
                           out, f"{probe}_{when}.png") for (probe, when), arms in groups.items()]
    plots += [plot_to_target(data, loss, out) for loss in dict.fromkeys(
        c.quantity.level(data, c.at) for c in contrasts if isinstance(c.quantity, ToTarget)) if math.isfinite(loss)]
    return [p for p in plots if p]


@dataclasses.dataclass(frozen=True)
class TargetTable:
  """A report item the report opens with: per arm of ``arms``, its tokens (or seconds) to ``quantity``'s
  target (the geometric mean over the seeds that reached it, with its t interval), the seeds that reached
  it, where each seed reached it first, and its efficiency against ``quantity.reference``: per seed the
  reference's tokens over the arm's, their geometric mean with the t interval of the log ratio (the
  estimate a ``Contrast`` on ``pair(reference, arm)`` with ``quantity`` judges); then ``published``,
  the papers' own figures, in words. results.json: ``to_target``."""
  quantity: ToTarget
  arms: tuple[str, ...] = ()
  published: tuple[str, ...] = ()

  def rows(self, data: Data) -> list[dict]:
    logged = dataclasses.replace(self.quantity, log=True)
    ref = self.quantity.reference
    base = logged.per_seed(data, ref) if ref else {}
    out = []
    for arm in [a for a in self.arms if data.runs(a)]:
      found = self.quantity.fewest(data, arm)
      logs = logged.per_seed(data, arm)
      e = stats.one_sample([v for v in logs.values() if math.isfinite(v)])
      where = collections.Counter(
          (f"{run.arms[0]}, " if run.arms[0] != arm else "") + f"rate {run.lr:g}" + at_text(point)
          for x, point, run in found.values() if math.isfinite(x))
      ratio = signed(pair(ref, arm), {ref: base, arm: logs}) if ref and arm != ref else {}
      out.append({"arm": arm, "seeds": len(found), "reached": sum(map(math.isfinite, logs.values())),
                  self.quantity.by: math.exp(e.diff) if math.isfinite(e.diff) else None,
                  "interval": [math.exp(e.lo), math.exp(e.hi)] if e.defined else None,
                  "where": dict(where), "efficiency": ratio_text(ratio) if ratio else None,
                  "log_efficiency": ratio})
    return out

  def section(self, data: Data, out: str) -> Section:
    rows = self.rows(data)
    if not rows:
      return Section([])
    ref, by = self.quantity.reference, self.quantity.by
    f = lambda x: f"{x:,.0f}" if by == "tokens" else f"{x:.1f}"
    cell = lambda r: "none reached it" if r[by] is None else f(r[by]) + (
        f" [{f(r['interval'][0])}, {f(r['interval'][1])}]" if r["interval"] else "")
    lines = [f"**{by.capitalize()} to {self.quantity.goal()}.** " + " ".join(self.quantity.target_lines(data)
                                                                              or [f"Target: {self.quantity.goal()}."]), "",
             f"| arm | {by} to the target, geometric mean [95 % CI] | seeds that reached it | where each seed "
             f"reached it first | efficiency" + (f": {ref}'s {by} over the arm's, x [95 % CI]" if ref else "") + " |",
             "|---|---|---|---|---|",
             *[f"| {r['arm']} | {cell(r)} | {r['reached']} of {r['seeds']} | "
               + "; ".join(f"{w} ({n} seed{'s' * (n > 1)})" for w, n in r["where"].items())
               + f" | {'1 (the reference)' if r['arm'] == ref else r['efficiency'] or '—'} |" for r in rows], ""]
    if self.published:
      lines += ["Published, at their own scale and data (beside ours, not comparable in level): "
                + "; ".join(self.published), ""]
    return Section([], results={"to_target": {"target": self.quantity.level(data), "rows": rows}}, opens=lines)


@dataclasses.dataclass(frozen=True)
class Alike(Claim):
  """Arms alike in the best loss, each part a ``Contrast`` ``a - b``: ``predict="same"`` within
  ``+-margin`` (TOST) or ``below`` ``+margin`` (``relative``: a fraction of ``reference``'s mean; planned
  at ``margin * planned_reference``). ``pairs="reference"``: each arm against ``reference`` (``over``: at
  each value of that axis), intersection-union (p the largest), against with Bonferroni;
  ``pairs="every"``: every pair with runs (Welch under two shared seeds), Holm. The other fields as
  ``Contrast``'s. Its effect: the largest difference (``below``: the widest gap)."""
  arms: tuple[str, ...] = ()
  reference: str = ""
  pairs: str = "reference"
  predict: str = "same"
  over: str = ""
  margin: float = NAN
  relative: bool = False
  planned_reference: float = 1.0
  shared_rates: bool = False
  learners: tuple[str, ...] | None = ()
  edge: bool = True
  learns: str = "interval"
  # Power per part (None: the study's); all k parts must pass, so each is planned at power ** (1 / k).
  power: float | None = None
  CHOICES = {"pairs": ("reference", "every"), "predict": ("same", "below"), "learns": tuple(LEARNS)}

  def needs(self) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*self.arms, self.reference) if self.pairs == "reference" else self.arms))

  def quantity_text(self) -> str:
    which = (f"each of {', '.join(self.arms)} - {self.reference}" if self.pairs == "reference"
             else f"every pair of {', '.join(self.arms)}")
    return (f"{which}: {QUANTITIES['best_loss'].what}" + (f" at each {self.over}" if self.over else "")
            + (", over the rates each pair shares" if self.shared_rates else ""))

  def unit(self) -> str:
    return QUANTITIES["best_loss"].unit

  def rule(self) -> str:
    within = f"{self.margin:.0%} of {self.reference}'s mean" if self.relative else f"±{self.margin:g}"
    test = "TOST each" if self.predict == "same" else "one-sided each"
    want = f"within {within}" if self.predict == "same" else f"below +{self.margin:g}"
    how = ("an intersection-union test: all must pass), not reproduced when one lies decisively beyond "
           f"it (Bonferroni over the {'values' if self.over else len(self.arms)})" if self.pairs == "reference"
           else "Holm over the pairs), not reproduced when some pair lies decisively outside")
    return (f"paired by seed, {self.quantity_text()}; reproduced when every one is {want} ({test}; {how}; "
            f"inconclusive otherwise" + (", or when an arm does not learn" if self.learners != () else "")
            + (", or when a seed's optimum is at the grid's edge" if self.edge else ""))

  def plan(self) -> power.ClaimPlan:
    p = super().plan()
    return dataclasses.replace(p, margin=self.margin * (self.planned_reference if self.relative else 1.0)) \
        if self.predict == "same" else p

  def test(self, data: Data) -> claims.Test:
    present = [a for a in self.arms if data.runs(a)]
    values = sorted(set(data.values(self.arms[0], self.over)) & set(data.values(self.reference, self.over))) \
        if self.over else [None]
    pairs = ([(a, self.reference, v) for a in self.arms for v in values] if self.pairs == "reference"
             else [(a, b, None) for i, a in enumerate(present) for b in present[i + 1:]])
    if not pairs:
      return _missing(self, f"two of {', '.join(self.arms)}"
                      + (f" at a value of {self.over}" if self.over else ""))
    ref = self.reference if self.pairs == "reference" or self.reference in present else present[0]
    mean = stats.one_sample(list(curves.best_losses(data.runs(ref)).values())).diff
    margin = self.margin * (mean if self.relative else 1.0)
    parts = [Contrast(self.claim, None, terms=pair(a, b), predict=self.predict,
                      at=((self.over, v),) if self.over else (), margin=margin, welch=self.pairs == "every",
                      shared_rates=self.shared_rates, learners=self.learners, edge=self.edge, learns=self.learns
                      ).test(data) for a, b, v in pairs]
    if any(t.missing is not None for t in parts):
      return next(dataclasses.replace(t, key=self.key, rule=self.rule()) for t in parts if t.missing is not None)
    ps, against = [t.p_for for t in parts], [t.p_against for t in parts]
    if self.pairs == "reference":
      p_for = highest(ps)
      p_against = min(1.0, len(parts) * lowest(against)) if math.isfinite(lowest(against)) else NAN
    else:
      p_for, p_against = highest(stats.holm(ps)), lowest(against)
    lines = [f"Margin {margin:.3f}."] + [f"{a} - {b}{at_text({self.over: v}) if self.over else ''}: {t.effect.text(self.unit())}."
                                         for (a, b, v), t in zip(pairs, parts)]
    size = (lambda e: e.diff) if self.predict == "below" else (lambda e: abs(e.diff))
    largest = max((t.effect for t in parts), key=lambda e: size(e) if math.isfinite(e.diff) else -math.inf)
    return claims.Test(self.key, self.claim, self.rule(), lines, largest, "Largest difference", p_for,
                       p_against, [g for t in parts for g in t.guards], tuple(sorted({s for t in parts for s in t.seeds})))


@dataclasses.dataclass(frozen=True)
class NotRun(Claim):
  """A claim the plan sized (``arms`` it needs, ``quantity`` tested) whose arms the budget cut: never
  judged, declared not powered; its plan row states what it would have cost."""
  arms: tuple[str, ...] = ()
  quantity: str = ""

  def needs(self) -> tuple[str, ...]:
    return ()

  def quantity_text(self) -> str:
    return self.quantity

  def unit(self) -> str:
    return ""  # never judged: no estimate to print

  def plan(self) -> power.ClaimPlan:
    return dataclasses.replace(super().plan(), arms=self.arms)

  def rule(self) -> str:
    return (f"per seed, {self.quantity}; the plan cut its arms ({', '.join(self.arms)}: their "
            f"cost), so the claim is not powered")

  def test(self, data: Data) -> claims.Test:
    return claims.Test(self.key, self.claim, self.rule(), ["Its arms were cut by the plan before the run."])

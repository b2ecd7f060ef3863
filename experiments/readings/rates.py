"""Where the learning rate's optimum lies along a ladder (proxies, mutransfer).

The report section `Rates` of `RateAt` (the rate each arm's optima give at a target), and post-hoc
readings: the flat-basin optimum (`Basins`), a rate carried along an axis (`Extrapolated`), a line's
held-out check as numbers (`LineCheck`), rates closer than the grid allows (`NearDuplicates`) and a
sensitivity gap from each lower end of the grid (`SensitivityFrom`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from research import curves
from research import kinds
from research import optimum
from research import stats
from experiments.readings.gaps import effect_text, sign_text
from research.posthoc import Reading


def basin_of(data: kinds.Data, arm: str, point) -> optimum.Basin:
  return optimum.basin(optimum.table(data.runs(arm, point)))


def basin_text(b: optimum.Basin) -> str:
  """One sentence: the optimum at the precision the data allow (``Basin.short``), then the fit and
  the rates not decisively worse than the best."""
  span = (f"the {len(b.fit_rates)} rates within {b.band:.3f} nats of the best mean "
          f"({b.fit_rates[0]:.3g}..{b.fit_rates[-1]:.3g})")
  if b.optimum is None:
    fit = f"a parabola over {span} has no minimum among them"
  else:
    ci = ("its resamples do not bound it" if b.interval is None else
          "{:.3g} .. {:.3g} over resampled seeds".format(*b.interval))
    fit = f"a parabola over {span} puts it at {b.optimum:.3g} ({ci})"
  lo, hi = b.indistinct
  return (f"{b.short()}; {fit}; rates not decisively worse than the best "
          f"(paired one-sided t, {b.seeds} seeds): {lo:.3g}..{hi:.3g}")


def flat_range(losses: optimum.Table, nats: float) -> tuple[float, float]:
  """The contiguous run of rates around the best mean whose mean lies within ``nats`` of it."""
  rates = sorted(losses)
  means = [float(np.mean([v for v in losses[r].values() if math.isfinite(v)])) for r in rates]
  b = int(np.argmin(means))
  lo = hi = b
  while lo > 0 and means[lo - 1] <= means[b] + nats:
    lo -= 1
  while hi + 1 < len(rates) and means[hi + 1] <= means[b] + nats:
    hi += 1
  return rates[lo], rates[hi]


@dataclasses.dataclass(frozen=True)
class RateAt:
  """The rate ``arm``'s optima give at ``target`` of ``axis``, a t interval over seeds of each seed's
  line of log(optimum) on log2(axis) at the target (``method`` "line"; ``holdout``: also check it on
  the largest value) or of its mean log optimum ("mean": an optimum that does not move)."""
  arm: str
  axis: str
  target: float
  method: str = "line"
  learns: str = "interval"
  min_points: int = 3
  holdout: bool = False
  label: str = ""
  # ``config`` at the rate, with the arm's overrides in ``carry`` (e.g. muP's); no command without it.
  config: str = ""
  carry: tuple[str, ...] = ()

  def command(self, data: kinds.Data, lr: float) -> str:
    rec = next(iter(data.records(self.arm)), {"overrides": {}})
    return " ".join([f"python -m experiments.run --config={self.config}"]
                    + [f"--config.{k}={rec['overrides'][k]:g}" if isinstance(rec["overrides"].get(k), float)
                       else f"--config.{k}={rec['overrides'].get(k)}" for k in self.carry]
                    + [f"--config.train.learning_rate={lr:.2g}"])

  def per_seed(self, points: dict, target: float) -> dict[int, float]:
    if self.method == "mean":
      return {s: sum(by.values()) / len(by) for s, by in points.items() if by}
    line = lambda by: np.polyfit([math.log2(v) for v in by], list(by.values()), 1)
    return {s: float(np.polyval(line(by), math.log2(target))) for s, by in points.items()
            if len(by) >= self.min_points}

  def held_out(self, points: dict, widest) -> stats.Effect:
    """Per seed, log(predicted / fitted optimum at ``widest``, the line fitted without it): biased if it excludes 0."""
    held = self.per_seed({s: {v: x for v, x in by.items() if v != widest} for s, by in points.items()}, widest)
    return stats.one_sample([held[s] - by[widest] for s, by in points.items() if s in held and widest in by])

  def result(self, data: kinds.Data) -> dict:
    points, missing = kinds.axis_optima(data, self.arm, self.axis, "fitted", self.learns)
    predicted = self.per_seed(points, self.target)
    e = stats.one_sample(list(predicted.values()))
    used = [v for s, by in points.items() if s in predicted for v in by]
    out = {"arm": self.arm, "label": self.label, "method": self.method, "target": self.target,
           "lr": math.exp(e.diff) if math.isfinite(e.diff) else None,
           "interval": [math.exp(e.lo), math.exp(e.hi)] if e.defined else None,
           "seeds": e.n, "widest": max(used, default=None), "missing": missing, "check": None}
    if self.holdout and used:
      widest = max(used)
      c = self.held_out(points, widest)
      if math.isfinite(c.diff):
        out["check"] = (f"fitted without {widest}, the lines predict its optimum x{math.exp(c.diff):.2f} "
                        f"of the fitted one" + (f" [{math.exp(c.lo):.2f}, {math.exp(c.hi):.2f}]" if c.defined else ""))
    return out

  def text(self, data: kinds.Data) -> str:
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

  def section(self, data: kinds.Data, out: str) -> kinds.Section:
    del out
    lines = [r.text(data) for r in self.rates] + (["", self.note] if self.note else [])
    return kinds.Section([f"## {self.title}", "", *lines, ""], [], {self.key: [r.result(data) for r in self.rates]})


@dataclasses.dataclass(frozen=True)
class Basins:
  """The optimum of each of ``arms`` at each grid point by ``research.optimum``, beside the
  rates whose mean loss lies within ``flat`` nats of the best."""
  arms: tuple[str, ...]
  flat: float = 0.01
  claims: tuple[str, ...] = ()
  title: str = "The optimum where the basin is flat"

  def read(self, study, data: kinds.Data) -> Reading:
    del study
    rows, found, short = [], {}, []
    for arm in self.arms:
      for point in data.points(arm):
        b = basin_of(data, arm, point)
        where = arm + kinds.at_text(point)
        lo, hi = flat_range(optimum.table(data.runs(arm, point)), self.flat)
        found[where] = {**dataclasses.asdict(b), "resolved": b.resolved, "text": basin_text(b), "flat": [lo, hi]}
        fit = (f"{b.optimum:.3g}" if b.optimum is not None else "no minimum") + (
            " [{:.3g}, {:.3g}]".format(*b.interval) if b.interval else "")
        rows.append(f"| {where} | {b.best:.3g} ({b.best_loss:.3f}) | {lo:.3g}..{hi:.3g} | "
                    f"{b.indistinct[0]:.3g}..{b.indistinct[1]:.3g} | {fit} ({len(b.fit_rates)} rates, "
                    f"{b.fit_rates[0]:.3g}..{b.fit_rates[-1]:.3g}) | {b.short()} |")
        short.append(f"{where}: {b.short()}")
    lines = [f"Per arm and point: the best grid rate (its mean loss); the rates whose mean loss lies "
             f"within {self.flat:g} nats of it; the rates not decisively worse than it (paired over "
             f"seeds, one-sided t at {optimum.ALPHA:g}); the parabola in log(rate) over the run of rates "
             f"within max({optimum.BAND:g} nats, 2 standard errors) of the best, with its 95 % "
             f"interval over {optimum.BOOTSTRAP} resampled seeds; and the optimum stated at the "
             f"precision the data allow (`research/optimum.py`: the grid's resolution when every "
             f"seed's best rate is the same grid point, the parabola only interpolates three grid "
             f"points, or it locates nothing).", "",
             f"| arm | best rate (loss) | within {self.flat:g} nats | not decisively worse | "
             f"parabola (rates) | optimum, at the data's precision |", "|---|---|---|---|---|---|",
             *rows]
    pointer = "; ".join(short) + "."
    return Reading(self.title, lines, {c: pointer for c in self.claims}, found)


@dataclasses.dataclass(frozen=True)
class Extrapolated:
  """The rate of ``arm`` at ``target`` of ``axis``: the flat-basin optimum at the widest
  value, carried to the target by the per-seed slope of log(fitted optimum) against log2
  of the axis (the frozen rules' optima and slope); its range adds the bounds of both 95 %
  intervals (conservative: the anchor's and the slope's errors, not the seeds' spread
  alone). ``section``: the report section it qualifies (its title)."""
  arm: str
  axis: str
  target: float
  label: str = ""
  learns: str = "every_seed"
  section: str = ""
  title: str = "The transferred rate with its extrapolation error"

  def read(self, study, data: kinds.Data) -> Reading:
    del study
    widest = max(data.values(self.arm, self.axis))
    b = basin_of(data, self.arm, {self.axis: widest})
    points, _ = kinds.axis_optima(data, self.arm, self.axis, "fitted", self.learns)
    s = stats.one_sample(list(kinds.seed_slopes(points, 3).values()))
    d = math.log2(self.target / widest)
    anchor = (b.optimum, *(b.interval or (b.optimum, b.optimum))) if b.resolved else (b.best, *b.indistinct)
    lr = anchor[0] * math.exp(s.diff * d)
    lo, hi = anchor[1] * math.exp(min(s.lo * d, s.hi * d)), anchor[2] * math.exp(max(s.lo * d, s.hi * d))
    name = self.axis.split(".")[-1]
    how = ("the flat-basin fit" if b.resolved else "the best grid rate and those not decisively worse")
    text = (f"{self.label or self.arm} at {name} {self.target:g}: {lr:.2g}, range {lo:.2g}..{hi:.2g}: the "
            f"optimum at {name} {widest} by {how}, {anchor[0]:.3g} [{anchor[1]:.3g}, {anchor[2]:.3g}], "
            f"carried {d:.2f} doublings by the slope of log(optimum) per doubling, "
            f"{s.diff:+.3f} [{s.lo:+.3f}, {s.hi:+.3f}] ({s.n} seeds), the two intervals' bounds added. "
            f"The frozen section's interval is the seeds' spread alone, with neither error in it.")
    return Reading(self.title, [text], {self.section: text} if self.section else {},
                   {"lr": lr, "range": [lo, hi], "anchor": list(anchor), "widest": widest,
                    "slope": dataclasses.asdict(s), "doublings": d})


@dataclasses.dataclass(frozen=True)
class LineCheck:
  """The held-out check of ``rate`` (``RateAt.held_out``) as numbers: the lines fitted
  without the widest value predict its optimum, as a ratio to the fitted one; an interval
  excluding 1 says the line's extrapolation is biased."""
  rate: RateAt
  section: str = ""
  title: str = "The extrapolated line's held-out check"

  def read(self, study, data: kinds.Data) -> Reading:
    del study
    r = self.rate
    points, _ = kinds.axis_optima(data, r.arm, r.axis, "fitted", r.learns)
    widest = max(v for by in points.values() for v in by)
    e = r.held_out(points, widest)
    ratio = [math.exp(x) for x in (e.diff, e.lo, e.hi)]
    way = "below" if e.hi < 0 else "above" if e.lo > 0 else ""
    text = (f"{r.label or r.arm}: fitted without {widest}, each seed's line predicts its optimum "
            f"x{ratio[0]:.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}] of the fitted one: "
            + (f"decisively {way} 1, so the line's extrapolation is biased over one step of the "
               f"ladder, and its rate further out (x{r.target / widest:.1f} beyond {widest}) carries "
               f"that bias and more." if way else "1 lies inside, so no bias is shown."))
    return Reading(self.title, [text], {self.section: text} if self.section else {},
                   {"ratio": ratio, "widest": widest})


@dataclasses.dataclass(frozen=True)
class NearDuplicates:
  """Rates of ``arm`` at each grid point closer than ``optimum.MIN_RATIO``, with the rounds
  that trained them."""
  arm: str
  title: str = "Near-duplicate rates in the grid"

  def read(self, study, data: kinds.Data) -> Reading:
    del study
    found = {}
    for point in data.points(self.arm):
      rounds = {r.lr: r.round for r in data.runs(self.arm, point)}
      pairs = optimum.near_duplicates(rounds)
      if pairs:
        found[kinds.at_text(point)[2:] or "—"] = [(a, b, rounds[a], rounds[b]) for a, b in pairs]
    if not found:
      return Reading(self.title, [f"{self.arm}'s rates are at least x{optimum.MIN_RATIO:g} apart."])
    lines = [f"{self.arm}'s rates closer than x{optimum.MIN_RATIO:g} (`optimum.near_duplicates`: one "
             f"grid point trained twice), with the round that trained each:", "",
             *[f"- {where}: " + "; ".join(f"{a:g} (round {ra}) and {b:g} (round {rb}), x{b / a:.3f}"
                                         for a, b, ra, rb in pairs) + "." for where, pairs in found.items()],
             "", "Round 0 is the grid fixed before the run; rounds 1 and 2 are the rates the sweep added "
             "around each seed's optimum (`curves.refine_rates`), which does not look for rates already "
             "near. The readings above count each pair as one grid point (`optimum.grid_points`)."]
    return Reading(self.title, lines, {}, found)


@dataclasses.dataclass(frozen=True)
class SensitivityFrom:
  """``arm - reference`` of Wortsman et al.'s sensitivity (``curves.sensitivity``) over the
  rates they share from each lower end of the grid up, and over the rates near the optima
  (from the lower of the two arms' best grid rates up): whether a verdict hinges on the
  grid's lowest rates."""
  arm: str
  reference: str
  claims: tuple[str, ...] = ()
  title: str = "Sensitivity over the rates near the optima"

  def read(self, study, data: kinds.Data) -> Reading:
    del study
    a, b = data.runs(self.arm), data.runs(self.reference)
    shared = sorted({r.lr for r in a} & {r.lr for r in b})
    gap = lambda rates: stats.paired(curves.sensitivity(a, rates), curves.sensitivity(b, rates))
    found = {f"{shared[i]:g}..{shared[-1]:g}": gap(shared[i:]) for i in range(len(shared) - 2)}
    near = min(basin_of(data, n, ()).best for n in (self.arm, self.reference))
    frozen, close = found[f"{shared[0]:g}..{shared[-1]:g}"], found[f"{near:g}..{shared[-1]:g}"]
    text = (f"Over all {len(shared)} shared rates (the frozen rule) {self.arm} - {self.reference} is "
            f"{effect_text(frozen, kinds.LOSS)}: {sign_text(frozen, 'less sensitive', 'more sensitive')}; over the "
            f"rates near the optima, from the lower best grid rate up ({near:g}..{shared[-1]:g}), it is "
            f"{effect_text(close, kinds.LOSS)}: {sign_text(close, 'less sensitive', 'more sensitive')}. The verdict "
            f"hinges on the grid's lower end, rates below both arms' optima.")
    lines = [f"{self.arm} - {self.reference} of the sensitivity (per seed: the mean over the rates of "
             f"min(final, initial) minus the best over them), paired by seed, over the shared rates "
             f"from each lower end up:", "", "| rates | difference | sign |", "|---|---|---|",
             *[f"| {k} ({len([r for r in shared if r >= float(k.split('..')[0])])}) | {effect_text(e, kinds.LOSS)} | "
               f"{sign_text(e, f'{self.arm} less sensitive', f'{self.arm} more sensitive')} |"
               for k, e in found.items()], "", text]
    return Reading(self.title, lines, dict.fromkeys(self.claims, text),
                   {k: dataclasses.asdict(e) for k, e in found.items()} | {"near": near})

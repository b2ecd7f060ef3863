"""The post-hoc readings of where the learning rate's optimum lies (``research/posthoc.py`` says what a reading is; ``posthoc.Basins`` and the rest reach these).

``Basins``, ``Extrapolated``, ``LineCheck``, ``NearDuplicates`` and ``SensitivityFrom`` (listed in
``research/posthoc.py``), and ``Recipes``: the recipe study's headline reading, each seed's
optimum bracketed by ``optimum.seed_optimum`` where the frozen per-seed fit left it unlocated,
each recipe's rate at its target with its interval and command, and its held-out check.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research import curves
from research import guards
from research import kinds
from research import optimum
from research import stats
from research.posthoc import effect_text, Reading, sign_text


def basin_of(data: kinds.Data, arm: str, point) -> optimum.Basin:
  return optimum.basin(optimum.table(data.runs(arm, point)))


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
        found[where] = {**b.results(), "flat": [lo, hi]}
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
  """The held-out check of ``rate`` (``kinds.RateAt.held_out``) as numbers: the lines fitted
  without the widest value predict its optimum, as a ratio to the fitted one; an interval
  excluding 1 says the line's extrapolation is biased."""
  rate: kinds.RateAt
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
            f"{effect_text(frozen)}: {sign_text(frozen, 'less sensitive', 'more sensitive')}; over the "
            f"rates near the optima, from the lower best grid rate up ({near:g}..{shared[-1]:g}), it is "
            f"{effect_text(close)}: {sign_text(close, 'less sensitive', 'more sensitive')}. The verdict "
            f"hinges on the grid's lower end, rates below both arms' optima.")
    lines = [f"{self.arm} - {self.reference} of the sensitivity (per seed: the mean over the rates of "
             f"min(final, initial) minus the best over them), paired by seed, over the shared rates "
             f"from each lower end up:", "", "| rates | difference | sign |", "|---|---|---|",
             *[f"| {k} ({len([r for r in shared if r >= float(k.split('..')[0])])}) | {effect_text(e)} | "
               f"{sign_text(e, f'{self.arm} less sensitive', f'{self.arm} more sensitive')} |"
               for k, e in found.items()], "", text]
    return Reading(self.title, lines, dict.fromkeys(self.claims, text),
                   {k: dataclasses.asdict(e) for k, e in found.items()} | {"near": near})




def recipe_prediction(recipe: kinds.Recipe, data: kinds.Data, at: Mapping[str, Any] | None = None
                      ) -> tuple[kinds.Prediction | None, list[str]]:
  """``recipe``'s rate at ``at`` by the frozen combination (``kinds.Recipe.predict``), each
  seed's optimum by the ``bracketed`` fit; and what was not located."""
  missing: list[str] = []
  return recipe.predict(data, at, "bracketed", missing), missing


def _panel_line(label: str, runs, log_optima: list[float]) -> dict:
  """One line of a ``Recipes`` panel: the mean final loss per rate over ``runs``' seeds, and
  the geometric mean of the seeds' optima (None: none located)."""
  return {"label": label, "curve": {lr: c["mean"] for lr, c in curves.rate_curve(runs).items()},
          "optimum": math.exp(float(np.mean(log_optima))) if log_optima else None}


@dataclasses.dataclass(frozen=True)
class Recipes:
  """The recipes re-read with each seed's optimum by ``optimum.seed_optimum`` (where the
  frozen per-seed fit, ``kinds.axis_optima``'s ``basin`` fit, leaves seeds unlocated whose best rate lies
  inside the grid): per recipe, its legs, its rate at the target with the interval and the
  command, and its held-out check (``held``: the arm of the held-out rung per recipe name):
  each seed's optimum there against the prediction there, the mean log ratio with its 95 %
  t interval, inside the predicted interval or not."""
  held: Mapping[str, str] = dataclasses.field(default_factory=dict)
  title: str = "The recipes with each seed's optimum bracketed"
  # The command to run instead, at the literature's rate, with its source, and why the
  # study's own estimate is not the one to run: the report opens with them, the estimates beside.
  literature: str = ""
  literature_source: str = ""
  why: str = ""

  def read(self, study, data: kinds.Data) -> Reading:
    frozen_missing = sum(len(kinds.axis_optima(data, a, x, "basin")[1]) for a, x in self.axes(study))
    mine_missing = sum(len(kinds.axis_optima(data, a, x, "bracketed")[1]) for a, x in self.axes(study))
    lines = [f"The frozen per-seed fit (`kinds.axis_optima`'s `basin` fit) extends a run of fewer than three "
             f"grid points toward the lower neighbouring loss only; on a sharp basin at this grid's "
             f"x2 spacing the best rate then sits at the run's edge, the parabola's minimum falls "
             f"outside it, and the seed is reported as having no minimum inside the grid although "
             f"its best rate is inside it. Over the legs' arms it left {frozen_missing} seed-points "
             f"unlocated; the fit that always brackets the best rate (`optimum.seed_optimum`) leaves "
             f"{mine_missing} (a best rate at the grid's edge, or an arm that does not learn). The "
             f"combination is the frozen one (`kinds.Recipe`); only each seed's optimum differs. "
             f"The estimator was chosen after the run had shown the defect, so these rates are "
             f"exploratory."]
    results, pointers = {"slopes": {}}, {}
    lines += ["", "Each axis' slope of log(optimum) per doubling with each seed's optimum bracketed "
              "(per seed, the least-squares line over the axis' values; over seeds, the mean with "
              "its 95 % t interval):", "", "| claim's arm | axis | slope per doubling [95 % t] | "
              "factor per doubling | local slopes | seeds | not located |", "|---|---|---|---|---|---|---|"]
    for claim in study.claims:
      if not isinstance(claim, kinds.Slope) or claim.of != "basin":
        continue
      points, missing = kinds.axis_optima(data, claim.arm, claim.axis, "bracketed")
      slopes = kinds.seed_slopes(points, claim.min_points)
      e = stats.one_sample(list(slopes.values()))
      local = ", ".join(f"{x:+.2f}" for x in kinds.local_slopes(points))
      lines.append(f"| {claim.arm} | {claim.axis} | {e.diff:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] | "
                   f"x{math.exp(e.diff):.2f} | {local} | {len(slopes)} | {len(missing)} |")
      results["slopes"][claim.arm] = {"axis": claim.axis, "slope": dataclasses.asdict(e), "local": local,
                                      "not_located": missing}
      pointers[claim.claim] = (f"with each seed's optimum bracketed, {claim.arm}'s slope is "
                               f"{e.diff:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] per doubling of "
                               f"{claim.axis.split('.')[-1]} ({len(slopes)} seeds).")
    for recipe in study.reports:
      if not isinstance(recipe, kinds.Recipe):
        continue
      p, missing = recipe_prediction(recipe, data)
      lines += ["", f"**{recipe.title}**", ""]
      if p is None:
        lines.append("Not predicted: " + "; ".join(missing) + ".")
        results[recipe.name] = None
        continue
      lines += p.table()
      lo, hi = p.interval
      moves = ", ".join(f"{arm} x{math.exp(e.diff * d):.2g}" for _, arm, e, _, d, _ in p.rows[1:])
      lines += ["", f"{recipe.name} at the target: **{p.text()}** (x{p.rate / lo:.1f} below, "
                f"x{hi / p.rate:.1f} above). The legs move the base's rate by: {moves}.", "",
                f"    {recipe.command(p)}", "", *([recipe.note, ""] if recipe.note else [])]
      if missing:
        lines.append("Not located: " + "; ".join(missing) + ".")
      check = self.check(recipe, data)
      if check:
        lines += ["", check[0]]
      results[recipe.name] = {"rate": p.rate, "low": lo, "high": hi, "command": recipe.command(p),
                              "held_out": check[1] if check else None}
      pointers[recipe.title] = f"{recipe.name}: {p.text()} with each seed's optimum bracketed."
    return Reading(self.title, lines, pointers, results, headline=self.headline(results))

  def headline(self, results: dict) -> list[str]:
    if not self.literature:
      return []
    estimates = "; ".join(f"{name} {r['rate']:.3g} [{r['low']:.3g}, {r['high']:.3g}]"
                          for name, r in results.items() if name != "slopes" and r)
    return [f"**Answer (exploratory):** run the literature's rate, `{self.literature}` "
            f"({self.literature_source}).", "",
            f"This study's estimates beside it, not to be run: {estimates}.", "",
            f"Why: {self.why}"]

  def panels(self, study, data: kinds.Data) -> list[dict]:
    """What ``plot`` draws, a panel per leg (arm and axis) and per held-out rung: per grid
    point, the mean final loss over seeds against the rate, and the rate at the geometric
    mean of the seeds' optima (``kinds.axis_optima``'s ``bracketed`` fit); for a held-out rung also the rate its
    recipe predicted there, with the interval."""
    out = []
    for arm, axis in self.axes(study):
      points, _ = kinds.axis_optima(data, arm, axis, "bracketed")
      lines = []
      for v in data.values(arm, axis):
        lines.append(_panel_line(f"{axis.split('.')[-1]} {v:g}", data.runs(arm, {axis: v}),
                                 [by[v] for by in points.values() if v in by]))
      out.append({"title": f"{arm}: {axis.split('.')[-1]}", "lines": lines, "predicted": None})
    for recipe in study.reports:
      arm = self.held.get(getattr(recipe, "name", None))
      rung = data.points(arm) if arm else []
      if not isinstance(recipe, kinds.Recipe) or len(rung) != 1:
        continue
      at = dict(rung[0])
      axis = next(iter(at))
      points, _ = kinds.axis_optima(data, arm, axis, "bracketed")
      p, _ = recipe_prediction(recipe, data, at)
      where = ", ".join(f"{k.split('.')[-1]} {v:g}" for k, v in at.items())
      line = _panel_line("measured", data.runs(arm, at), [v for by in points.values() for v in by.values()])
      out.append({"title": f"{arm} (held out)\n{where}", "lines": [line],
                  "predicted": None if p is None else (p.rate, *p.interval)})
    return out

  def plot(self, study, data: kinds.Data, out: str) -> str | None:
    """The loss against the rate, a panel per leg and held-out rung (``panels``): a line per
    grid point with its seeds' optimum dotted; on a held-out rung the predicted rate dashed
    and its interval shaded."""
    panels = self.panels(study, data)
    if not panels:
      return None
    from matplotlib.ticker import NullFormatter  # pylint: disable=import-outside-toplevel
    from research import page as reporting  # pylint: disable=import-outside-toplevel
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig = reporting.figure(figsize=(4 * cols, 3.4 * rows))
    for i, panel in enumerate(panels):
      ax = fig.add_subplot(rows, cols, i + 1)
      for j, line in enumerate(panel["lines"]):
        rates = sorted(line["curve"])
        ax.plot(rates, [line["curve"][r] for r in rates], "o-", ms=3, color=f"C{j}", label=line["label"])
        if line["optimum"]:
          ax.axvline(line["optimum"], color=f"C{j}", ls=":", lw=1)
      if panel["predicted"]:
        rate, lo, hi = panel["predicted"]
        ax.axvspan(lo, hi, color="0.85", zorder=0, label="predicted interval")
        ax.axvline(rate, color="k", ls="--", lw=1, label="predicted")
      ax.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss (mean)")
      ax.set_title(panel["title"], fontsize=9)
      ax.xaxis.set_minor_formatter(NullFormatter())
      ax.legend(fontsize=6)
    return reporting.save(fig, out, "recipe_legs.png")

  @staticmethod
  def axes(study) -> list[tuple[str, str]]:
    return list(dict.fromkeys((leg.arm, leg.axis) for r in study.reports if isinstance(r, kinds.Recipe)
                              for leg in r.legs))

  def check(self, recipe: kinds.Recipe, data: kinds.Data) -> tuple[str, dict] | None:
    arm = self.held.get(recipe.name)
    rung = data.points(arm) if arm else []
    if len(rung) != 1:
      return None
    at = dict(rung[0])
    p, _ = recipe_prediction(recipe, data, at)
    axis = next(iter(at))
    points, missing = kinds.axis_optima(data, arm, axis, "bracketed")
    diffs = [list(by.values())[0] - p.log_rate for by in points.values()] if p else []
    if p is None or len(diffs) < 2:
      return (f"Held-out rung ({arm}): not checked ({'; '.join(missing) or 'no prediction'}).", {})
    e = stats.one_sample(diffs)
    lo, hi = p.interval
    seen = math.exp(p.log_rate + e.diff)
    inside = lo <= seen <= hi
    ci = (math.exp(p.log_rate + e.lo), math.exp(p.log_rate + e.hi))
    text = (f"Held-out rung, {arm} at {kinds.words(at)}: predicted {p.text()}; its seeds' optimum "
            f"(geometric mean of {len(diffs)}) {seen:.3g}, x{math.exp(e.diff):.2f} "
            f"[{math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}] the prediction: "
            + guards.placement(seen, ci, lo, hi, math.exp(p.log_rate)))
    return text, {"arm": arm, "predicted": p.rate, "interval": [lo, hi], "observed": seen,
                  "ratio": [math.exp(x) for x in (e.diff, e.lo, e.hi)], "inside": inside}

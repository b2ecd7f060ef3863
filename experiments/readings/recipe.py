"""The recipe studies' report items: a recipe's rate at its target with its interval and command
(`RecipeSection`), and the recipe study's headline reading (`Recipes`): each seed's optimum
bracketed by `optimum.seed_optimum` where the frozen per-seed fit left it unlocated, each recipe's
rate at its target with its interval and command, and its held-out check."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research import curves
from research import kinds
from research import stats
from research.posthoc import Reading


def command(config: str, carry: Mapping[str, Any], rate: float) -> str:
  flags = "".join(f" --config.{k}={v}" for k, v in carry.items())
  return f"python -m experiments.run --config={config}{flags} --config.train.learning_rate={rate:.3g}"


def table(p: kinds.Prediction) -> list[str]:
  """A prediction's rows as a markdown table: the base's rate, then each leg's slope, bend and error."""
  base = p.rows[0]
  return ([f"| source | measured on | slope per doubling ({kinds.LOG_RATE}) [95 % t] | bend | doublings carried | "
           "error (x) |", "|---|---|---|---|---|---|",
           f"| base rate | {base[1]} | {base[2]} | | | x{math.exp(max(base[3], base[4])):.2f} |"]
          + [f"| {axis} | {arm} | {e.diff:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] | {bend:.3f} | {doublings:+.2f} | "
             f"x{math.exp(err):.2f} |" for axis, arm, e, bend, doublings, err in p.rows[1:]])


@dataclasses.dataclass(frozen=True)
class RecipeSection:
  """A report section: ``recipe``'s rate at its target (``kinds.Recipe.predict``), its table and command."""
  recipe: kinds.Recipe

  def section(self, data: kinds.Data, out: str) -> kinds.Section:
    del out
    r, p = self.recipe, self.recipe.predict(data)
    lines = [f"## {r.title}", ""]
    if p is None:
      lines += ["Not predicted: the base has no runs, or a leg has fewer than two seeds with "
                "located optima (the claims above say which).", ""]
      return kinds.Section(lines, results={r.name: None})
    run = command(r.config, r.carry, p.rate)
    lines += [*table(p), "", f"**{r.name}: {p.text()}** (the interval adds the base's and each leg's "
              f"error in quadrature; a leg's error is its slope's 95 % t half-width plus its bend, "
              f"times the doublings carried).", "", f"    {run}", ""]
    lines += [r.note, ""] if r.note else []
    lo, hi = p.interval
    return kinds.Section(lines, results={r.name: {"rate": p.rate, "low": lo, "high": hi, "command": run}})


def recipe_prediction(recipe: kinds.Recipe, data: kinds.Data, at: Mapping[str, Any] | None = None
                      ) -> tuple[kinds.Prediction | None, list[str]]:
  """``recipe``'s rate at ``at`` by the frozen combination (``kinds.Recipe.predict``), each
  seed's optimum by the ``bracketed`` fit; and what was not located."""
  missing: list[str] = []
  return recipe.predict(data, at, "bracketed", missing), missing


def placement(value: float, ci: tuple[float, float], lo: float, hi: float, centre: float) -> str:
  """Where an estimate ``value`` [``ci``] lies against a prediction ``centre`` [``lo``, ``hi``]."""
  if ci[1] < lo or ci[0] > hi:
    return "**outside the predicted interval.**"
  if not (lo <= ci[0] and ci[1] <= hi):
    return "its interval crosses an edge of the predicted interval."
  if ci[0] <= centre <= ci[1]:
    return "inside the predicted interval, and its interval covers the prediction."
  return ("inside the predicted interval, but its interval excludes the prediction: the check "
          "shows the prediction off, not confirmed.")


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
                               f"{e.diff:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] {kinds.per_doubling(kinds.LOG_RATE)} of "
                               f"{claim.axis.split('.')[-1]} ({len(slopes)} seeds).")
    for recipe in self.recipes(study):
      p, missing = recipe_prediction(recipe, data)
      lines += ["", f"**{recipe.title}**", ""]
      if p is None:
        lines.append("Not predicted: " + "; ".join(missing) + ".")
        results[recipe.name] = None
        continue
      lines += table(p)
      lo, hi = p.interval
      moves = ", ".join(f"{arm} x{math.exp(e.diff * d):.2g}" for _, arm, e, _, d, _ in p.rows[1:])
      lines += ["", f"{recipe.name} at the target: **{p.text()}** (x{p.rate / lo:.1f} below, "
                f"x{hi / p.rate:.1f} above). The legs move the base's rate by: {moves}.", "",
                f"    {command(recipe.config, recipe.carry, p.rate)}", "", *([recipe.note, ""] if recipe.note else [])]
      if missing:
        lines.append("Not located: " + "; ".join(missing) + ".")
      check = self.check(recipe, data)
      if check:
        lines += ["", check[0]]
      results[recipe.name] = {"rate": p.rate, "low": lo, "high": hi,
                              "command": command(recipe.config, recipe.carry, p.rate),
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
    for recipe in self.recipes(study):
      arm = self.held.get(recipe.name)
      rung = data.points(arm) if arm else []
      if len(rung) != 1:
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
  def recipes(study) -> list[kinds.Recipe]:
    return [r.recipe for r in study.reports if isinstance(r, RecipeSection)]

  def axes(self, study) -> list[tuple[str, str]]:
    return list(dict.fromkeys((leg.arm, leg.axis) for r in self.recipes(study) for leg in r.legs))

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
            + placement(seen, ci, lo, hi, math.exp(p.log_rate)))
    return text, {"arm": arm, "predicted": p.rate, "interval": [lo, hi], "observed": seen,
                  "ratio": [math.exp(x) for x in (e.diff, e.lo, e.hi)], "inside": inside}

"""A choice among arms (``Choice``, a finding; its grid: experiments/readings/mup_base.py) and the report items that tabulate and draw arms: ``RateTable``, ``BestCurves``, per-layer profiles, every page's optima table and loss-vs-rate plot."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from research import claims
from research import curves
from research import page as reporting
from research import stats
from research.kind_base import at_text, Claim, Data, LOSS, named, NAN, Section, ToTarget, words
from research.kind_zloss import CHOSEN


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
  """Among ``arms`` (set by overrides ``by``) whose every seed learns with a bracketed optimum, the lowest
  mean best loss, or one within ``tie`` nats nearer ``default`` (factor-2 steps); it carries its mean log
  optimum with a 95 % t interval. Effect: chosen minus default, paired (optimistic). results.json:
  ``choice`` (``by`` values, ``learning_rate``, ``learning_rate_interval``; null if none) and ``settings``."""
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

  def unit(self) -> str:
    return LOSS

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
    grids = {k: sorted({s.values[k] for s in table}) for k in chosen.values}
    if any(len(g) > 1 and chosen.values[k] in (g[0], g[-1]) for k, g in grids.items()):
      lines.append("The choice is at the edge of the grid: the best arm may lie beyond it.")
    default = [s for s in table if self.distance(s) == 0]
    against = None
    if default and default[0] is not chosen:
      against = stats.paired(curves.best_losses(runs), curves.best_losses(data.runs(default[0].arm)))
      lines.append(f"Against the default, paired by seed: {against.text(LOSS)} (optimistic: chosen "
                   f"on these seeds).")
    return chosen, interval, lines, against, table

  def test(self, data: Data) -> claims.Test:
    chosen, _, lines, against, _ = self.choose(data)
    return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.Verdict(
        self.claim, CHOSEN if chosen else claims.INCONCLUSIVE, lines, self.rule(), against,
        "chosen minus default best loss"))

  def section(self, data: Data, out: str) -> Section:
    """What carries the choice (results.json's ``choice``; its grid: experiments/readings/mup_base.py)."""
    chosen, interval, _, _, table = self.choose(data)
    if chosen:
      values = ", ".join(f"`{k}={v:g}`" for k, v in zip(self.by, chosen.values.values()))
      head = f"{self.carried} carries {values} and the rate {chosen.lr:.3g} (results.json's `choice`)."
    else:
      head = f"No arm was eligible: {self.carried} has no choice (results.json's `choice` is null)."
    result = None if chosen is None else {**chosen.values, "learning_rate": chosen.lr,
                                          "learning_rate_interval": interval}
    return Section([head, ""], [], {"choice": result, "settings": table})


def arm_points(data: Data) -> list[tuple[str, tuple, list[curves.Run]]]:
  """``(arm, point, its runs there)`` per arm and grid point, in the data's order."""
  return [(arm, point, data.runs(arm, point)) for arm in data.arms() for point in data.points(arm)]


@dataclasses.dataclass(frozen=True)
class RateTable:
  """A report item: per arm and point, the loss against the rate (results.json's ``arms``), and a figure
  per ``comparisons`` entry ``(key, title, arms, beside)`` where one of ``arms`` has two rates."""
  comparisons: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = ()

  def table(self, data: Data) -> dict[str, dict]:
    return {arm + at_text(point): {"rates": {f"{lr:g}": c for lr, c in curves.rate_curve(rs).items()},
                                   **curves.summary(rs), "cells": len(rs), "diverged": sum(r.diverged for r in rs)}
            for arm, point, rs in sorted(arm_points(data), key=lambda x: x[0])}

  def section(self, data: Data, out: str) -> Section:
    return Section([], [self.plot(data, *c, out) for c in self.comparisons], {"arms": self.table(data)})

  def plot(self, data: Data, key: str, title: str, arms: tuple[str, ...], beside: tuple[str, ...],
           out: str) -> str | None:
    """Final loss (mean ± std over seeds) against the rate per arm, with the init loss and the unigram."""
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
    ax.set(xscale="log", xlabel="peak learning rate", ylabel=f"final validation loss ({LOSS})",
           title=f"{title}\n(mean ± std over seeds; ✕ = a seed diverged, counted at the init loss)")
    ax.legend(fontsize=7)
    return reporting.save(fig, out, f"lr_{key}.png")


def mean_profile(data: Data, arm: str, probe: str, when: str) -> np.ndarray | None:
  """The mean of ``arm``'s per-layer ``probe`` (``init``: one per seed; ``end``: each completed model)."""
  seen = {}
  for run, rec in zip(data.runs(arm), data.records(arm)):
    prof = (rec.get(when) or {}).get(probe)
    if prof and all(v is not None for v in prof) and np.all(np.isfinite(prof)) and (when == "init" or not run.diverged):
      seen.setdefault(run.seed if when == "init" else rec["name"], prof)
  return np.mean(list(seen.values()), axis=0) if seen else None


def plot_profiles(data: Data, arms: tuple[str, ...], panels: tuple[tuple[str, str], ...], out: str,
                  name: str) -> str | None:
  """Per-layer probes, a panel per ``(probe, when)``, a line per arm (mean over its models)."""
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


def plot_to_target(data: Data, loss: float, out: str) -> str | None:
  """Every arm's validation loss against tokens and against seconds (``ToTarget``'s), the target
  ``loss`` dashed: per arm, point and seed the model that reached it in the fewest tokens (none
  reached: the lowest final loss), each model drawn once (an arm's other names skipped)."""
  fig = reporting.figure(figsize=(11, 4.2))
  axes = fig.subplots(1, 2, sharey=True)
  tokens, drawn = ToTarget(loss), set()
  reach = lambda run, rec: math.inf if (x := tokens.reach(run, rec)) is None else x
  for i, arm in enumerate(data.arms()):
    for point in data.points(arm):
      rows = list(zip(data.runs(arm, point), data.records(arm, point)))
      for seed in sorted({run.seed for run, _ in rows}):
        mine = [(reach(run, rec), run.clipped, id(rec), rec) for run, rec in rows
                if run.seed == seed and id(rec) not in drawn]
        if not mine:
          continue
        *_, key, rec = min(mine, key=lambda m: m[:2])
        drawn.add(key)
        label = arm if not any(line.get_label() == arm for line in axes[0].get_lines()) else None
        for ax, by in zip(axes, ToTarget.CURVES):
          points = ToTarget(loss, by).points(rec)
          if points:
            ax.plot(*zip(*points), color=f"C{i % 10}", lw=1, alpha=0.8, label=label)
  if not axes[0].get_lines():
    return None
  for ax, by in zip(axes, ToTarget.CURVES):
    ax.axhline(loss, color="k", ls="--", lw=0.8)
    ax.set(xlabel="training tokens per model" if by == "tokens" else "seconds per model (the program's clock over its group)",
           title=f"validation loss against {by} (target {loss:g}, dashed)")
  axes[0].set_ylabel(f"validation loss ({LOSS} / token)")
  axes[0].legend(fontsize=7)
  return reporting.save(fig, out, f"to_target_{loss:g}.png")


@dataclasses.dataclass(frozen=True)
class BestCurves:
  """A report item: train and validation loss of ``arms`` at each seed's best rate, a line per seed."""
  arms: tuple[str, ...] = ()

  def section(self, data: Data, out: str) -> Section:
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
    axes[0].set_ylabel(f"{LOSS} / token")
    if axes[1].get_legend_handles_labels()[0]:
      axes[1].legend(fontsize=7)
    return Section([], [reporting.save(fig, out, "loss_curves.png")])


def optimum_lines(data: Data) -> tuple[list[dict], list[str]]:
  """Every arm's optimum per grid point, as results.json rows and a markdown table."""
  rows = []
  lines = ["## Optima", "", "Per arm and grid point, over seeds: the fitted optimal peak rate "
           "(geometric mean, 95 % t interval), the best loss there, the seeds whose optimum is "
           "bracketed by the grid, the sensitivity, whether the arm learns and its models that "
           "diverged.", "", "| arm | point | optimal rate | best loss | bracketed | sensitivity | learns | diverged |",
           "|---|---|---|---|---|---|---|---|"]
  f = reporting.interval_text
  for arm, point, runs in arm_points(data):
    s = curves.summary(runs)
    rows.append({"arm": arm, "point": dict(point), **s, "rates": curves.rate_curve(runs)})
    lines.append(f"| {arm} | {at_text(point)[2:] or '—'} | "
                 f"{f(s['optimum_lr'], s['optimum_lr_interval'], '.3g')} | "
                 f"{f(s['optimum_loss'], s['optimum_loss_interval'], '.3f')} | "
                 f"{s['bracketed_seeds']}/{s['seeds']} | "
                 f"{f(s['sensitivity'], s['sensitivity_interval'], '.3f')} | "
                 f"{'yes' if s['learns'] else 'no'} | {sum(r.diverged for r in runs)}/{len(runs)} |")
  if rows and all(len(r["rates"]) == 1 for r in rows):
    lines += ["", "**Every arm was trained at a single learning rate**, so no optimum is bracketed: the "
              "claims on optima are inconclusive by rule."]
  return rows, lines + [""]


def plot_curves(data: Data, out: str) -> str | None:
  """The mean final loss against the peak rate, a line per arm and grid point."""
  if not data.rows:
    return None
  fig = reporting.figure(figsize=(6, 4))
  ax = fig.add_subplot(1, 1, 1)
  for i, (arm, point, runs) in enumerate(arm_points(data)):
    curve = curves.rate_curve(runs)
    ax.plot(list(curve), [v["mean"] for v in curve.values()], "o-", color=f"C{i % 10}",
            label=arm + at_text(point))
  ax.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss (mean over seeds)")
  ax.legend(fontsize=7)
  return reporting.save(fig, out, "loss_vs_rate.png")

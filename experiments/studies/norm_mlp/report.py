"""The norm x MLP study's report page: its table per arm and its figures, in the frame of ``research/report.py``.

``python -m experiments.report --sweep_dir=results/norm_mlp-cpu --out=docs/studies/norm_mlp-cpu`` sends a sweep named
``norm_mlp`` here (and a sweep that names no study of its own, e.g. ``micro`` or the first
300-step study's ``results.json``). The verdicts are ``rules.py``'s; the table is each arm's
learning-rate curve with ``curves.summary``; the figures are the learning-rate curves per
comparison, the per-layer profiles at init, the residual stream and the loss curves at each
arm's best rate.
"""

from __future__ import annotations

import numpy as np

from research import cells as cells_lib
from research import curves
from research import report as reporting
from research import stats
from experiments.studies.norm_mlp import rules

# Comparisons plotted as learning-rate curves: title and the arms' name prefixes.
COMPARISONS = {
    "norm": ("Norm placement x warmup", ("norm:",)),
    "mlp_width": ("MLP ratio at fixed d_model (and SwiGLU)", ("mlp_width:", "swiglu")),
    "mlp_matched": ("MLP ratio, parameter-matched", ("mlp_matched:",)),
    "depth": ("Deeper models", ("depth:", "norm:pre/long", "norm:post/long")),
}



def arm_table(runs: list[curves.Run]) -> dict[str, dict]:
  """Per arm: the learning-rate curve and ``curves.summary`` (the fitted optimum with its
  interval, the per-seed sensitivity over the base grid, whether it learns)."""
  out = {}
  for arm, rs in sorted(curves.by_arm(runs).items()):
    curve = curves.rate_curve(rs)
    out[arm] = {"rates": {f"{lr:g}": c for lr, c in curve.items()}, **curves.summary(rs),
                "cells": len(rs), "diverged": sum(r.diverged for r in rs)}
  return out


def single_rate_note(table: dict) -> list[str]:
  if not table or any(len(a["rates"]) > 1 for a in table.values()):
    return []
  return ["**Every arm was trained at a single learning rate**, so no optimum is bracketed: "
          "the verdicts on those claims are inconclusive by rule. The study over a rate grid is "
          "`python -m experiments.sweep --sweep=norm_mlp --scale=cpu`.", ""]


def _pm(mean: float, std: float) -> str:
  return f"{mean:.3f}" + ("" if np.isnan(std) else f" ± {std:.3f}")



def table_lines(table: dict) -> list[str]:
  rates = sorted({float(lr) for a in table.values() for lr in a["rates"]})
  lines = ["| arm | fitted optimum [95 % CI] | loss there [95 % CI] | bracketed | learns | "
           "LR sensitivity [95 % CI] | diverged | " + " | ".join(f"{lr:.3g}" for lr in rates) + " |",
           "|---" * (7 + len(rates)) + "|"]
  for arm, a in table.items():
    cells = []
    for lr in rates:
      c = a["rates"].get(f"{lr:g}")
      cells.append("" if c is None else _pm(c["mean"], c["std"]) + (f" ({c['diverged']}✕)" if c["diverged"] else ""))
    lines.append(f"| {arm} | {reporting.interval_text(a['optimum_lr'], a['optimum_lr_interval'], '.2g')} | "
                 f"{reporting.interval_text(a['optimum_loss'], a['optimum_loss_interval'], '.3f')} | "
                 f"{a['bracketed_seeds']}/{a['seeds']} | {'yes' if a['learns'] else 'no'} | "
                 f"{reporting.interval_text(a['sensitivity'], a['sensitivity_interval'], '.3f')} | "
                 f"{a['diverged']}/{a['cells']} | " + " | ".join(cells) + " |")
  return lines


def plot_lr_curves(runs: list[curves.Run], out: str, unigram: float = float("nan")) -> list[str]:
  """One plot per comparison: final loss (mean ± std over seeds) vs learning rate, per arm,
  with the loss at init and the unigram baseline (a model that learnt only token frequencies)."""
  arms, names = curves.by_arm(runs), []
  for key, (title, prefixes) in COMPARISONS.items():
    chosen = sorted(a for a in arms if a.startswith(prefixes))
    if key == "depth" and not any(a.startswith("depth:") for a in chosen):
      continue
    if not chosen or not any(len(curves.by_rate(arms[a])) > 1 for a in chosen):
      continue
    fig = reporting.figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, arm in enumerate(chosen):
      curve = curves.rate_curve(arms[arm])
      lrs = list(curve)
      mean = np.array([curve[lr]["mean"] for lr in lrs])
      std = np.nan_to_num(np.array([curve[lr]["std"] for lr in lrs]))
      ax.errorbar(lrs, mean, yerr=std, marker="o", ms=4, capsize=3, color=f"C{i}", label=arm)
      div = [lr for lr in lrs if curve[lr]["diverged"]]
      ax.plot(div, [curve[lr]["mean"] for lr in div], "x", color=f"C{i}", ms=10, mew=2)
    initial = np.nanmedian([r.initial for r in runs])
    ax.axhline(initial, color="gray", ls=":", lw=1, label=f"loss at init ({initial:.2f})")
    if np.isfinite(unigram):
      ax.axhline(unigram, color="gray", ls="--", lw=1, label=f"unigram baseline ({unigram:.2f})")
    ax.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss (nats)",
           title=f"{title}\n(mean ± std over seeds; ✕ = a seed diverged, counted at the init loss)")
    ax.legend(fontsize=7)
    names.append(reporting.save(fig, out, f"lr_{key}.png"))
  return names


def profiles(cells: list[dict], norm: str, init: str, key: str, when: str = "init"):
  """Mean over seeds of a per-layer profile of the norm/init arms (one per seed)."""
  seen = {}
  for c in cells:
    o = c.get("overrides", {})
    prof = (c.get(when) or {}).get(key)
    if (o.get("model.norm", "pre") == norm and o.get("model.init", "gpt2") == init and prof
        and any(a.startswith(("norm:", "init:")) for a in c["arms"]) and np.all(np.isfinite(prof))):
      seen.setdefault(c["seed"] if when == "init" else c["name"], prof)
  return np.mean(list(seen.values()), axis=0) if seen else None


def plot_profiles(cells: list[dict], out: str) -> str | None:
  """Per-layer gradient norms at init, pre vs post, under both initialisations."""
  fig = reporting.figure(figsize=(13, 4))
  axes = fig.subplots(1, 3)
  drawn = False
  for i, (norm, init) in enumerate((n, s) for s in ("gpt2", "xavier") for n in ("pre", "post")):
    style = dict(color=f"C{i % 2}", ls="-" if init == "gpt2" else "--", marker="o", ms=4,
                 label=f"{norm}-LN, {init} init")
    for ax, key in ((axes[0], "grad_attn"), (axes[1], "grad_mlp")):
      prof = profiles(cells, norm, init, key)
      if prof is not None:
        ax.plot(range(1, len(prof) + 1), prof, **style)
        drawn = True
    prof = profiles(cells, norm, init, "residual_norm")
    if prof is not None:
      axes[2].plot(range(len(prof)), prof, **style)
  for ax, title in zip(axes, ("gradient norm at init: attention", "gradient norm at init: MLP",
                              "residual-stream norm at init")):
    ax.set(title=title, xlabel="layer" if "gradient" in title else "after block (0 = embedding)",
           yscale="log")
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=7)
  return reporting.save(fig, out, "init_profiles.png") if drawn else None


def plot_residual(cells: list[dict], out: str) -> str | None:
  """The residual stream's norm per layer at init and at the end of training (gpt2 init)."""
  fig = reporting.figure(figsize=(11, 4))
  axes = fig.subplots(1, 2, sharey=True)
  drawn = False
  for ax, when in zip(axes, ("init", "end")):
    for i, norm in enumerate(("pre", "post")):
      done = [c for c in cells if c["status"] == "completed"]
      prof = profiles(done, norm, "gpt2", "residual_norm", when)
      if prof is not None:
        ax.plot(range(len(prof)), prof, "o-", color=f"C{i}", label=f"{norm}-LN")
        drawn = True
    ax.set(title=f"residual-stream norm {'at init' if when == 'init' else 'at the end of training'}"
           f" (mean over cells)", xlabel="after block (0 = embedding)", yscale="log")
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  return reporting.save(fig, out, "residual.png") if drawn else None


def plot_best_curves(cells: list[dict], runs: list[curves.Run], out: str) -> str | None:
  """Training and validation loss of every norm arm at its own best rate, one line per seed."""
  arms = curves.by_arm(runs)
  chosen = sorted(a for a in arms if a.startswith("norm:")) or sorted(arms)[:6]
  if not chosen:
    return None
  fig = reporting.figure(figsize=(12, 4.5))
  axes = fig.subplots(1, 2, sharey=True)
  for i, arm in enumerate(chosen):
    opts = curves.optima(arms[arm])  # each seed at its best rate tried
    mine = [c for c in cells if arm in c["arms"] and c["seed"] in opts
            and c["learning_rate"] == opts[c["seed"]].grid_lr]
    best = np.exp(np.mean([np.log(o.grid_lr) for o in opts.values()])) if opts else float("nan")
    for j, c in enumerate(sorted(mine, key=lambda c: c["seed"])):
      for ax, key in ((axes[0], "train_curve"), (axes[1], "val_curve")):
        pts = [(s, l) for s, l in c[key] if l is not None and np.isfinite(l)]
        if pts:
          ax.plot(*zip(*pts), color=f"C{i}", lw=1, alpha=0.8,
                  label=f"{arm} @ ~{best:.2g}" if j == 0 else None)
  for ax, title in zip(axes, ("train loss", "validation loss")):
    ax.set(title=f"{title} at each arm's best rate", xlabel="step")
  axes[0].set_ylabel("nats / token")
  if axes[1].get_legend_handles_labels()[0]:
    axes[1].legend(fontsize=7)
  return reporting.save(fig, out, "loss_curves.png")


def page(index: dict, cells: list[dict], out: str) -> reporting.Page:
  """The study's verdicts, its table per arm and its figures (drawn into ``out``)."""
  del index  # the frame shows the sweep's own fields
  runs = [cells_lib.to_run(c) for c in cells]
  table, judged = arm_table(runs), rules.judge(runs)
  known = [c["unigram_val_loss"] for c in cells if c.get("unigram_val_loss") is not None]
  unigram = float(np.median(known)) if known else float("nan")
  plots = [*plot_lr_curves(runs, out, unigram), plot_profiles(cells, out), plot_residual(cells, out),
           plot_best_curves(cells, runs, out)]
  method = (
      f"Each claim is judged by a rule in `experiments/studies/norm_mlp/rules.py` on the "
      f"per-arm numbers of `research/curves.py` with the statistics of "
      f"`research/stats.py` (tested on synthetic results in `tests/test_report.py` and "
      f"`tests/test_stats.py`). Each seed's optimum is the vertex of a parabola in "
      f"log(rate) through its best rate tried and the two beside it; arms that share seeds "
      f"are compared by per-seed differences, others by Welch's test; intervals are 95 % "
      f"t intervals for the degrees of freedom; a claim's several tests are Holm-corrected "
      f"(family-wise error {stats.ALPHA}); an equivalence is two one-sided tests against a "
      f"margin from the claim's literature. What the seeds cannot decide is inconclusive. "
      f"A diverged model counts with the loss at initialisation.")
  sections = [
      "## Learning-rate curves per arm", "",
      "Final validation loss (mean ± std over seeds, a diverged seed counted at the loss "
      "at init) at each peak learning rate; ✕ = diverged seeds. Fitted optimum: the "
      "geometric mean over seeds of each seed's fitted optimal rate, and the mean of the "
      "fitted losses there, with 95 % t intervals over seeds; bracketed: seeds whose best "
      "rate tried is not the smallest or largest; learns: best loss decisively "
      f"{curves.LEARNS_BY} nats below the unigram baseline. LR sensitivity (Wortsman et al. 2023), "
      "per seed over the arm's base grid (the sweep's first-round rates): the mean of "
      "min(final, initial loss) minus the best, then the mean over seeds with its interval "
      "(the same definition the sensitivity verdict uses); it depends on the grid, so it "
      "compares arms on the same base grid only.", "",
      *table_lines(table), ""]
  return reporting.Page(verdicts=judged, method=method, sections=sections, plots=plots,
                        results={"arms": table, "verdicts": judged}, notes=single_rate_note(table))

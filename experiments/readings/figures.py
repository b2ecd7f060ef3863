"""The width-ladder studies' figures (proxies, mutransfer): Wortsman et al. 2023's loss against the rate, sensitivity and attention logits, Yang et al. 2022's optimum against width, drawn from a study's ``kinds.Data``.

A report item, not a rule: a study asks for them with ``AxisFigures`` (``Study.reports``). Each returns the PNG's name in
``out`` (None: nothing to draw).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from experiments.readings.rates import RateAt
from research import curves
from research import kinds
from research import page as reporting
from research import stats


def _colour(values: list, v):
  from matplotlib import colormaps  # pylint: disable=import-outside-toplevel
  return colormaps["viridis"](0.85 * values.index(v) / max(len(values) - 1, 1))


def _values(data: kinds.Data, axis: str) -> list:
  return sorted({dict(p)[axis] for _, p, _, _ in data.rows if axis in dict(p)})


def rate_curves(data: kinds.Data, axis: str, out: str) -> str | None:
  """The final loss against the rate, one line per value of ``axis``, a panel per arm (✕: a
  rate where a seed diverged; dotted: the loss at init; dashed: the unigram baseline)."""
  arms, values = data.arms(), _values(data, axis)
  if not arms:
    return None
  fig = reporting.figure(figsize=(3.4 * len(arms), 3.6))
  axes = np.atleast_1d(fig.subplots(1, len(arms), sharey=True))
  runs = [r for _, _, r, _ in data.rows]
  unigram = curves.unigram(runs)
  for ax, arm in zip(axes, arms):
    for v in values:
      curve = curves.rate_curve(data.runs(arm, {axis: v}))
      if not curve:
        continue
      lrs, colour = list(curve), _colour(values, v)
      ax.errorbar(lrs, [curve[lr]["mean"] for lr in lrs], yerr=np.nan_to_num([curve[lr]["std"] for lr in lrs]),
                  marker="o", ms=3, capsize=2, color=colour, label=f"{axis.split('.')[-1]} {v}")
      div = [lr for lr in lrs if curve[lr]["diverged"]]
      ax.plot(div, [curve[lr]["mean"] for lr in div], "x", color=colour, ms=8, mew=2)
    ax.axhline(np.nanmedian([r.initial for r in runs]), color="gray", ls=":", lw=1)
    if math.isfinite(unigram):
      ax.axhline(unigram, color="gray", ls="--", lw=1)
    ax.set(xscale="log", title=arm, xlabel="peak learning rate")
  axes[0].set_ylabel(f"final validation loss ({kinds.LOSS})\n(dotted: at init; dashed: unigram)")
  axes[-1].legend(fontsize=7, title="✕ diverged", title_fontsize=7)
  return reporting.save(fig, out, "lr_curves.png")


def non_embedding_params(rec) -> int:
  """A cell's parameter count less its token and position embeddings (tied head)."""
  o, n = rec.get("overrides", {}), rec.get("n_params") or 0
  return int(n - (o.get("model.vocab_size", 0) + o.get("model.block_size", 0)) * o.get("model.d_model", 0)) if n else 0


def sensitivity(data: kinds.Data, axis: str, out: str) -> str | None:
  """Wortsman et al.: each arm's learning-rate sensitivity (mean over seeds, 95 % t interval)
  against its non-embedding parameters (the axis' value where the records have no count)."""
  fig = reporting.figure(figsize=(6, 4))
  ax, drawn = fig.subplots(), False
  for i, arm in enumerate(data.arms()):
    pts = []
    for v in data.values(arm, axis):
      s = stats.one_sample(list(curves.sensitivity(data.runs(arm, {axis: v})).values()))
      x = max([non_embedding_params(r) for r in data.records(arm, {axis: v})] or [0]) or v
      if math.isfinite(s.diff):
        pts.append((x, s.diff, *((s.lo, s.hi) if s.defined else (s.diff, s.diff))))
    if pts:
      x, y, lo, hi = map(np.array, zip(*pts))
      ax.errorbar(x, y, yerr=[y - lo, hi - y], marker="o", ms=4, capsize=3, color=f"C{i}", label=arm)
      drawn = True
  if not drawn:
    return None
  ax.set(xscale="log", xlabel="non-embedding parameters", ylabel=f"LR sensitivity ({kinds.LOSS})",
         title="learning-rate sensitivity (95 % t interval over seeds)")
  ax.legend(fontsize=8)
  return reporting.save(fig, out, "sensitivity.png")


def attention_logits(data: kinds.Data, axis: str, arms: tuple[str, ...], out: str) -> str | None:
  """The largest attention logit at the end against the rate, a panel per ``axis`` value, a line per arm
  (completed models only: a diverged model's last probe predates its divergence)."""
  values = _values(data, axis)
  by: dict = {}
  for arm, point, run, rec in data.rows:
    logits = (rec.get("end") or {}).get("attn_logit_max")
    if arm in arms and logits and rec.get("status") == "completed":
      key = (arm, dict(point).get(axis))
      by.setdefault(key, {}).setdefault(run.lr, []).append(max(logits))
  if not by:
    return None
  fig = reporting.figure(figsize=(3.2 * len(values), 3.4))
  axes = np.atleast_1d(fig.subplots(1, len(values), sharey=True))
  for ax, v in zip(axes, values):
    for arm, style in zip(arms, ("o-", "s--", "^:", "d-.")):
      if (arm, v) in by:
        lrs = sorted(by[(arm, v)])
        ax.plot(lrs, [max(by[(arm, v)][lr]) for lr in lrs], style, ms=4, label=arm)
    ax.set(xscale="log", yscale="log", title=f"{axis.split('.')[-1]} {v}", xlabel="peak learning rate")
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=7)
  axes[0].set_ylabel("largest attention logit at the end")
  return reporting.save(fig, out, "attn_logits.png")


def optima(data: kinds.Data, rates: tuple[RateAt, ...], out: str) -> str | None:
  """Yang et al.: each ``RateAt`` arm's per-seed optima against the axis, the seeds' mean line out to the
  target, and the rate there with its interval (★)."""
  if not rates:
    return None
  fig = reporting.figure(figsize=(6, 4))
  ax, drawn = fig.subplots(), False
  for i, r in enumerate(rates):
    points, _ = kinds.axis_optima(data, r.arm, r.axis, "fitted", r.learns)
    for j, v in enumerate(data.values(r.arm, r.axis)):
      opts = [math.exp(by[v]) for by in points.values() if v in by]
      ax.plot([v] * len(opts), opts, "o", color=f"C{i}", ms=3, alpha=0.6,
              label=f"{r.arm}: each seed's optimum" if j == 0 else None)
      drawn = drawn or bool(opts)
    used = [v for by in points.values() for v in by]
    if used:
      xs = np.geomspace(min(used), r.target, 20)
      ys = [math.exp(np.mean(list(r.per_seed(points, x).values()) or [math.nan])) for x in xs]
      ax.plot(xs, ys, "-", color=f"C{i}", label=f"{r.arm} (seeds' mean)")
    res = r.result(data)
    if res["lr"] is not None:
      lo, hi = res["interval"] or (res["lr"], res["lr"])
      ax.errorbar([r.target], [res["lr"]], yerr=[[res["lr"] - lo], [hi - res["lr"]]], fmt="*",
                  ms=10, capsize=4, color=f"C{i}")
  ax.axvline(rates[0].target, color="gray", ls=":", lw=1)
  ax.set(xscale="log", yscale="log", xlabel=rates[0].axis, ylabel="fitted optimal peak rate",
         title=f"optimal rate against {rates[0].axis} (★: at {rates[0].target:g}, 95 % interval)")
  ticks = _values(data, rates[0].axis) + [rates[0].target]
  ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
  ax.set_xticks([], minor=True)
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=8)
  return reporting.save(fig, out, "optimum_vs_width.png") if drawn else None


@dataclasses.dataclass(frozen=True)
class AxisFigures:
  """A report section of the figures above along ``axis`` (``logit_arms``' attention logits, ``rates``' optima)."""
  axis: str
  logit_arms: tuple[str, ...] = ()
  rates: tuple[RateAt, ...] = ()

  def section(self, data: kinds.Data, out: str) -> kinds.Section:
    return kinds.Section([], [rate_curves(data, self.axis, out), sensitivity(data, self.axis, out),
                              attention_logits(data, self.axis, self.logit_arms, out),
                              optima(data, self.rates, out)])

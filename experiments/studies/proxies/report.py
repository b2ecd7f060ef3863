"""The proxies study's report page: the predicted rates, its table per arm and width and its figures, in the frame of ``research/report.py``.

  python -m experiments.report --sweep_dir=runs/sweeps/proxies-cpu --pack=results/proxies-cpu --out=docs/studies/proxies-cpu

``experiments.report`` sends a sweep named ``proxies`` here; the loading and the packing of the
per-cell files are ``research/cells.py``'s, the frame (title, commands, the rules line,
the measured time, results.json) and the figure helpers ``research/report.py``'s. The
page: the verdicts of ``rules.py``, the predicted rates for andrea120m (printed as well), a
table per arm and width, the figures.
"""

from __future__ import annotations

import math

import numpy as np

from research import cells as cells_lib
from research import curves
from research import report as reporting
from research import identity as rules_identity
from research import stats
from experiments.studies.proxies import rules as PV

NAN = float("nan")


# ----------------------------------------------------------------------------- rows


def non_embedding_params(c: dict) -> int:
  """The cell's parameter count less its token and position embeddings (tied head)."""
  o = c.get("overrides", {})
  n, d = c.get("n_params") or 0, o.get("model.d_model", 0)
  return int(n - (o.get("model.vocab_size", 0) + o.get("model.block_size", 0)) * d) if n else 0


def to_row(c: dict) -> PV.Row:
  """A cell record (``cells.cell_record``) as the proxy rules see it."""
  arm = next((a for a in c["arms"] if a in PV.ARMS), c["arms"][0])
  end = c.get("end") or {}
  done = c["status"] == "completed"  # a diverged model's last probe is from before it diverged
  logits = end.get("attn_logit_max") if done else None
  log_z = end.get("log_z") if done else None
  return PV.Row(cells_lib.to_run(c), arm, int(c["overrides"]["model.d_model"]),
                max(logits) if logits else NAN, NAN if log_z is None else float(log_z),
                non_embedding_params(c))


def by_arm_width(rows: list[PV.Row]) -> dict[tuple[str, int], list[PV.Row]]:
  out: dict[tuple[str, int], list[PV.Row]] = {}
  order = {a: i for i, a in enumerate(PV.ARMS)}
  for r in sorted(rows, key=lambda r: (order.get(r.arm, len(order)), r.arm, r.width)):
    out.setdefault((r.arm, r.width), []).append(r)
  return out


# ----------------------------------------------------------------------------- the table


def table(rows: list[PV.Row]) -> list[dict]:
  """Per arm and width: ``curves.summary`` (fitted optimum and best loss with intervals,
  sensitivity over the base grid with its interval), divergences and the logit sizes."""
  out = []
  for (arm, width), rs in by_arm_width(rows).items():
    runs = [r.run for r in rs]
    finite = lambda xs: [x for x in xs if math.isfinite(x)]
    logit, log_z = finite([r.attn_logit_max for r in rs]), finite([r.log_z for r in rs])
    out.append({"arm": arm, "width": width, "non_embedding_params": max(r.n_params for r in rs),
                **curves.summary(runs), "cells": len(rs), "diverged": sum(r.run.diverged for r in rs),
                "rates": {f"{lr:g}": c for lr, c in curves.rate_curve(runs).items()},
                "attn_logit_max": max(logit) if logit else None,
                "log_z_median": float(np.median(log_z)) if log_z else None})
  return out


def table_lines(tab: list[dict]) -> list[str]:
  lines = ["| arm | d_model | non-embedding params | best loss [95 % CI] | fitted optimum [95 % CI] | "
           "bracketed | LR sensitivity [95 % CI] | diverged | learns | largest attention logit |",
           "|---" * 10 + "|"]
  for t in tab:
    logit = "—" if t["attn_logit_max"] is None else f"{t['attn_logit_max']:.1f}"
    lines.append(f"| {t['arm']} | {t['width']} | {t['non_embedding_params']:,} | "
                 f"{reporting.interval_text(t['optimum_loss'], t['optimum_loss_interval'], '.3f')} | "
                 f"{reporting.interval_text(t['optimum_lr'], t['optimum_lr_interval'], '.2g')} | "
                 f"{t['bracketed_seeds']}/{t['seeds']} | "
                 f"{reporting.interval_text(t['sensitivity'], t['sensitivity_interval'], '.3f')} | "
                 f"{t['diverged']}/{t['cells']} | {'yes' if t['learns'] else 'no'} | {logit} |")
  return lines


# ----------------------------------------------------------------------------- the prediction


def predictions(rows: list[PV.Row]) -> list[PV.Prediction]:
  return [PV.predict(rows, arm) for arm in (PV.REFERENCE, PV.MUP)]


def prediction_lines(preds: list[PV.Prediction], base_width: int | None) -> list[str]:
  mup = f" (`model.parametrization=mup`, `model.base_width={base_width}`)" if base_width else ""
  lines = [f"The peak learning rate the ladder predicts for andrea120m's width "
           f"(d_model {PV.TARGET_WIDTH}): {PV.PREDICTION_METHOD}", ""]
  for p in preds:
    label = "standard parametrisation" if p.arm == PV.REFERENCE else f"muP{mup}"
    lines.append(f"- {label}, arm `{p.arm}`: {p.text()}")
  lines += ["", "Caveats: the ladder's depth, context, batch, steps, vocabulary and warmup are "
            "not andrea120m's (12 layers, context 1024, 64 x 1024 tokens per step, thousands of "
            "steps, vocabulary 8449); the optimal rate depends on each of them, so the "
            "prediction carries the width rule only. Beyond the ladder's widest width it is "
            "an extrapolation of a straight line in log-log, which the ladder cannot check."]
  return lines


# ----------------------------------------------------------------------------- plots


def _widths(rows: list[PV.Row]) -> list[int]:
  return sorted({r.width for r in rows})


def _colour(widths: list[int], w: int):
  from matplotlib import colormaps  # pylint: disable=import-outside-toplevel
  i = widths.index(w)
  return colormaps["viridis"](0.85 * i / max(len(widths) - 1, 1))


def plot_lr_curves(rows: list[PV.Row], out: str) -> str | None:
  """Wortsman et al.'s figure 1: final loss against the rate, one line per width, a panel per arm."""
  groups, widths = by_arm_width(rows), _widths(rows)
  arms = list(dict.fromkeys(a for a, _ in groups))
  if not arms:
    return None
  fig = reporting.figure(figsize=(3.4 * len(arms), 3.6))
  axes = np.atleast_1d(fig.subplots(1, len(arms), sharey=True))
  initial = np.nanmedian([r.run.initial for r in rows])
  unigram = curves.unigram([r.run for r in rows])
  for ax, arm in zip(axes, arms):
    for w in widths:
      curve = curves.rate_curve([r.run for r in groups.get((arm, w), [])])
      if not curve:
        continue
      lrs = list(curve)
      ax.errorbar(lrs, [curve[lr]["mean"] for lr in lrs],
                  yerr=np.nan_to_num([curve[lr]["std"] for lr in lrs]), marker="o", ms=3,
                  capsize=2, color=_colour(widths, w), label=f"d{w}")
      div = [lr for lr in lrs if curve[lr]["diverged"]]
      ax.plot(div, [curve[lr]["mean"] for lr in div], "x", color=_colour(widths, w), ms=8, mew=2)
    ax.axhline(initial, color="gray", ls=":", lw=1)
    if math.isfinite(unigram):
      ax.axhline(unigram, color="gray", ls="--", lw=1)
    ax.set(xscale="log", title=arm, xlabel="peak learning rate")
  axes[0].set_ylabel("final validation loss (nats)\n(dotted: at init; dashed: unigram)")
  axes[-1].legend(fontsize=7, title="✕ diverged", title_fontsize=7)
  return reporting.save(fig, out, "lr_curves.png")


def plot_sensitivity(tab: list[dict], out: str) -> str | None:
  """Wortsman et al.: learning-rate sensitivity against non-embedding parameters, per arm."""
  fig = reporting.figure(figsize=(6, 4))
  ax = fig.subplots()
  drawn = False
  for i, arm in enumerate(dict.fromkeys(t["arm"] for t in tab)):
    pts = [t for t in tab if t["arm"] == arm and t["sensitivity"] is not None]
    if not pts:
      continue
    x = [t["non_embedding_params"] or t["width"] for t in pts]
    y = [t["sensitivity"] for t in pts]
    ci = [t["sensitivity_interval"] or [s, s] for t, s in zip(pts, y)]
    yerr = np.abs(np.array([[s - c[0], c[1] - s] for s, c in zip(y, ci)]).T)
    ax.errorbar(x, y, yerr=yerr, marker="o", ms=4, capsize=3, color=f"C{i}", label=arm)
    drawn = True
  ax.set(xscale="log", xlabel="non-embedding parameters", ylabel="LR sensitivity (nats)",
         title="learning-rate sensitivity (95 % t interval over seeds)")
  if drawn:
    ax.legend(fontsize=8)
  return reporting.save(fig, out, "sensitivity.png") if drawn else None


def plot_attn_logits(rows: list[PV.Row], out: str) -> str | None:
  """The largest attention logit at the end (max over layers) against the rate, pre vs pre+qk."""
  widths = _widths(rows)
  chosen = [r for r in rows if r.arm in (PV.REFERENCE, PV.QK) and math.isfinite(r.attn_logit_max)]
  if not chosen:
    return None
  fig = reporting.figure(figsize=(3.2 * len(widths), 3.4))
  axes = np.atleast_1d(fig.subplots(1, len(widths), sharey=True))
  for ax, w in zip(axes, widths):
    for arm, style in ((PV.REFERENCE, "o-"), (PV.QK, "s--")):
      by_lr: dict[float, list[float]] = {}
      for r in chosen:
        if r.arm == arm and r.width == w:
          by_lr.setdefault(r.run.lr, []).append(r.attn_logit_max)
      if by_lr:
        lrs = sorted(by_lr)
        ax.plot(lrs, [max(by_lr[lr]) for lr in lrs], style, ms=4, label=arm)
    ax.set(xscale="log", yscale="log", title=f"d{w}", xlabel="peak learning rate")
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=7)
  axes[0].set_ylabel("largest attention logit at the end")
  return reporting.save(fig, out, "attn_logits.png")


def plot_optima(rows: list[PV.Row], preds: list[PV.Prediction], out: str) -> str | None:
  """Yang et al.: each seed's fitted optimal rate against width, sp and muP, the mean of the
  seeds' lines extended to andrea120m's width, and the prediction there with its interval."""
  fig = reporting.figure(figsize=(6, 4))
  ax = fig.subplots()
  drawn = False
  for i, p in enumerate(preds):
    fits, _ = PV.optimum_fits(rows, p.arm)
    for j, (w, rs) in enumerate(PV.ladder(rows, p.arm).items()):
      opts = [o.lr for o in curves.optima(rs).values() if o.bracketed]
      ax.plot([w] * len(opts), opts, "o", color=f"C{i}", ms=3, alpha=0.6,
              label=f"{p.arm}: each seed's optimum" if j == 0 else None)
      drawn = drawn or bool(opts)
    if fits:
      xs = np.geomspace(min(min(f.widths) for f in fits.values()), PV.TARGET_WIDTH, 20)
      ax.plot(xs, [math.exp(np.mean([f.log_rate(x) for f in fits.values()])) for x in xs],
              "-", color=f"C{i}", label=f"{p.arm} (seeds' mean line)")
    if p.lr is not None:
      lo, hi = p.interval or (p.lr, p.lr)
      ax.errorbar([PV.TARGET_WIDTH], [p.lr], yerr=[[p.lr - lo], [hi - p.lr]], fmt="*", ms=10,
                  capsize=4, color=f"C{i}")
  ax.axvline(PV.TARGET_WIDTH, color="gray", ls=":", lw=1)
  ax.set(xscale="log", yscale="log", xlabel="d_model", ylabel="fitted optimal peak rate",
         title=f"optimal rate vs width (dots: seeds; ★: d{PV.TARGET_WIDTH}, 95 % interval)")
  ticks = _widths(rows) + [PV.TARGET_WIDTH]
  ax.set_xticks(ticks, [str(t) for t in ticks])
  ax.set_xticks([], minor=True)
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=8)
  return reporting.save(fig, out, "optimum_vs_width.png") if drawn else None


# ----------------------------------------------------------------------------- the report


def _base_width(cells: list[dict]) -> int | None:
  return next((c["overrides"].get("model.base_width") for c in cells
               if c["overrides"].get("model.parametrization") == "mup"), None)


def page(index: dict, cells: list[dict], out: str) -> reporting.Page:
  """The study's verdicts, predictions, table per arm and width, and figures (drawn into ``out``)."""
  rows = [to_row(c) for c in cells]
  tab, judged, preds = table(rows), PV.judge(rows), predictions(rows)
  plots = [plot_lr_curves(rows, out), plot_sensitivity(tab, out), plot_attn_logits(rows, out),
           plot_optima(rows, preds, out)]
  predicted = prediction_lines(preds, _base_width(cells))
  method = ("Each claim is judged by a rule in `experiments/studies/proxies/rules.py` (tested on "
            "synthetic results in `tests/test_proxies_rules.py`) with the per-arm numbers of "
            "`research/curves.py` and the statistics of `research/stats.py`: a diverged "
            "model counts at the loss at initialisation; a seed's optimum is the vertex of a "
            "parabola in log(rate) through its best rate and the two beside it; arms are "
            "compared by per-seed differences (shared seeds); intervals are 95 % t intervals; "
            f"a claim's several tests are Holm-corrected (family-wise error {stats.ALPHA}). "
            "What the seeds cannot decide is inconclusive.")
  sections = ["## Predicted learning rates for andrea120m", "", *predicted, "",
              "## Per arm and width", "",
              "Best loss and fitted optimum: the mean over seeds of each seed's fitted loss and "
              "(geometric) of its fitted rate, with 95 % t intervals; bracketed: seeds whose best "
              "rate is not at the grid's edge; LR sensitivity (Wortsman et al. 2023): per seed, "
              "the mean over the grid of min(final, initial loss) minus the best, then the mean "
              "over seeds with its interval; learns: best loss decisively "
              f"{curves.LEARNS_BY} nats below the unigram baseline; largest attention logit: at the "
              "last probe, the max over layers and over the width's completed models.", "",
              *table_lines(tab), ""]
  return reporting.Page(
      verdicts=judged, method=method, sections=sections, plots=plots,
      results={"rules_now": rules_identity.rules_version("proxies"), "table": tab,
               "verdicts": judged, "predictions": preds},
      index_keys=("name", "scale", "base_config", "description", "rules"),
      printed=[p for p in predicted if p.startswith("- ")])

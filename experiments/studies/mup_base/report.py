"""The muP base stage's report page: the base grid (each multiplier pair's score, optimum and eligibility), the choice and its rate, and where the ladder reads them.

``python -m experiments.report --sweep_dir=results/mup_base-cpu --out=docs/studies/mup_base-cpu`` sends a sweep named
``mup_base`` here. The choice is ``rules.choose``'s (fixed before the run); results.json's
``choice`` is what the width ladder's grid reads.
"""

from __future__ import annotations

import math

import numpy as np

from research import cells as cells_lib
from research import curves
from research import report as reporting
from experiments.studies.mup_base import rules


def grid_lines(choice: rules.Choice) -> list[str]:
  out = ["## The base grid", "",
         "Per multiplier pair: the mean over seeds of the fitted best loss (the score), the "
         "optimum rate (exp of the mean log optimum), and whether the rule could choose it.", "",
         "| readout | attention | score (nats) | optimum rate | seeds | eligible |",
         "|---|---|---|---|---|---|"]
  for s in choice.settings:
    mark = "**chosen**" if s.arm == choice.arm else ("yes" if s.eligible else f"no: {s.reason}")
    out.append(f"| {s.readout:g} | {s.attention:g} | {s.score:.3f} | {s.lr:.3g} | {s.seeds} | {mark} |")
  return out + [""]


def curve_lines(runs: list[curves.Run]) -> list[str]:
  out = ["## Learning-rate curves", "", "Final validation loss, mean ± std over seeds, per rate.", ""]
  arms = curves.by_arm(runs)
  rates = sorted({r.lr for r in runs})
  out += ["| pair | " + " | ".join(f"{lr:g}" for lr in rates) + " |",
          "|---|" + "---|" * len(rates)]
  for arm in sorted(arms, key=rules.parse):
    curve = curves.rate_curve(arms[arm])
    cell = lambda lr: (f"{curve[lr]['mean']:.3f} ± {curve[lr]['std']:.3f}" if lr in curve else "—")
    out.append(f"| {arm} | " + " | ".join(cell(lr) for lr in rates) + " |")
  return out + [""]


def plot_scores(choice: rules.Choice, out: str) -> str | None:
  table = [s for s in choice.settings if math.isfinite(s.score)]
  if not table:
    return None
  readouts = sorted({s.readout for s in table})
  attentions = sorted({s.attention for s in table})
  z = np.full((len(attentions), len(readouts)), np.nan)
  for s in table:
    z[attentions.index(s.attention), readouts.index(s.readout)] = s.score
  fig = reporting.figure(figsize=(6, 3.5))
  ax = fig.add_subplot()
  im = ax.imshow(z, cmap="viridis_r", aspect="auto")
  ax.set(xticks=range(len(readouts)), xticklabels=[f"{r:g}" for r in readouts],
         yticks=range(len(attentions)), yticklabels=[f"{a:g}" for a in attentions],
         xlabel="readout multiplier", ylabel="attention multiplier",
         title="Mean best loss at the base width (lower is better)")
  for i, a in enumerate(attentions):
    for j, r in enumerate(readouts):
      if math.isfinite(z[i, j]):
        chosen = rules.arm_name(r, a) == choice.arm
        ax.text(j, i, f"{z[i, j]:.2f}" + ("*" if chosen else ""), ha="center", va="center",
                color="white", fontsize=8)
  fig.colorbar(im, ax=ax, label="nats")
  return reporting.save(fig, out, "base_grid.png")


def page(index: dict, cells: list[dict], out: str) -> reporting.Page:
  del index
  runs = [cells_lib.to_run(c) for c in cells]
  choice = rules.choose(runs)
  method = (f"The choice rule (`experiments/studies/mup_base/rules.py`, committed before the "
            f"run, tested in `tests/test_mup_base.py`): {rules.CHOICE_RULE}. A diverged model "
            f"counts with the loss at initialisation.")
  carried = ([f"The width ladder carries `model.readout_multiplier={choice.readout:g}`, "
              f"`model.attention_multiplier={choice.attention:g}` and the base rate "
              f"{choice.lr:.3g} (results.json's `choice`)."] if choice.arm else
             ["No pair was eligible: the ladder has no tuned base (results.json's `choice` is null)."])
  sections = [*carried, "", *grid_lines(choice), *curve_lines(runs)]
  result = ({"readout_multiplier": choice.readout, "attention_multiplier": choice.attention,
             "learning_rate": choice.lr, "learning_rate_interval": choice.lr_interval}
            if choice.arm else None)
  return reporting.Page(verdicts=rules.judge(runs), method=method, sections=sections,
                        plots=[plot_scores(choice, out)],
                        results={"choice": result, "settings": choice.settings})

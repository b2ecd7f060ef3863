"""The muP base stage's report item: the choice's grid (`ChoiceGrid`), a table and a heat map of every arm's score."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from research import kinds
from research import page as reporting


@dataclasses.dataclass(frozen=True)
class ChoiceGrid:
  """A report item: per arm of ``choice`` its score, optimum rate and eligibility, as a table and, over
  two ``by`` axes, a heat map of the score."""
  choice: kinds.Choice

  def section(self, data: kinds.Data, out: str) -> kinds.Section:
    chosen, _, _, _, table = self.choice.choose(data)
    keys = [k.split(".")[-1] for k in self.choice.by]
    lines = ["## The choice's grid", "", "Per arm: the mean over seeds of the fitted best loss (the "
             "score), the optimum rate (exp of the mean log optimum), and whether the rule could "
             "choose it.", "",
             "| " + " | ".join(keys) + f" | score ({kinds.LOSS}) | optimum rate | seeds | eligible |",
             "|---" * (len(keys) + 4) + "|"]
    for s in table:
      mark = "**chosen**" if s is chosen else ("yes" if s.eligible else f"no: {s.reason}")
      lines.append("| " + " | ".join(f"{v:g}" for v in s.values.values())
                   + f" | {s.score:.3f} | {s.lr:.3g} | {s.seeds} | {mark} |")
    return kinds.Section(lines + [""], [self.plot(table, chosen, out)])

  def plot(self, table: list, chosen, out: str) -> str | None:
    table = [s for s in table if math.isfinite(s.score)]
    if len(self.choice.by) != 2 or not table:
      return None
    kx, ky = (k.split(".")[-1] for k in self.choice.by)
    xs, ys = sorted({s.values[kx] for s in table}), sorted({s.values[ky] for s in table})
    z = np.full((len(ys), len(xs)), np.nan)
    for s in table:
      z[ys.index(s.values[ky]), xs.index(s.values[kx])] = s.score
    fig = reporting.figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    im = ax.imshow(z, cmap="viridis_r", aspect="auto")
    ax.set(xticks=range(len(xs)), xticklabels=[f"{x:g}" for x in xs], yticks=range(len(ys)),
           yticklabels=[f"{y:g}" for y in ys], xlabel=kx.replace("_", " "), ylabel=ky.replace("_", " "),
           title="Mean best loss (lower is better)")
    for s in table:
      mark = "*" if s is chosen else ""
      ax.text(xs.index(s.values[kx]), ys.index(s.values[ky]), f"{s.score:.2f}{mark}", ha="center",
              va="center", color="white", fontsize=8)
    fig.colorbar(im, ax=ax, label=kinds.LOSS)
    return reporting.save(fig, out, "choice_grid.png")

"""The recipe check's own report item (not a rule): its width leg's slope beside the confirmed muTransfer ladder's (``Widths``), and what differs between the two designs."""

from __future__ import annotations

import dataclasses

from research import kinds
from research import stats


# The confirmed muTransfer ladder's sp width slope (docs/studies/mutransfer-cpu: "pre", 9 seeds).
LADDER_SLOPE = (-0.664, -0.722, -0.606)
LADDER_DIFFERENCES = (
    "heads: here heads = d_model / 64 (1, 2, 4 heads of 64), there 2 heads whose size grows with "
    "the width (16 to 128), so there the attention logits' scale grows with the width at "
    "initialisation and here it does not",
    "multipliers: GPT-2's (1, 1) here, the muP base stage's tuned readout and attention "
    "multipliers there",
    "widths 64-256 here, 32-256 there; warmup 4 % of the run here, a tenth there",
    "the fit: each seed's bracketed optimum here, the three-point parabola there")


@dataclasses.dataclass(frozen=True)
class Widths:
  """A report item: the width leg's slope beside the confirmed ladder's, and the designs' differences."""
  arm: str
  axis: str

  def section(self, data: kinds.Data, out: str) -> kinds.Section:
    points, _ = kinds.axis_optima(data, self.arm, self.axis, "bracketed")
    e = stats.one_sample(list(kinds.seed_slopes(points, 2).values()))
    lo, hi = LADDER_SLOPE[1:]
    where = ("no slope located" if not e.defined else
             "the intervals overlap" if e.lo <= hi and e.hi >= lo else
             "shallower than the ladder's, intervals apart" if e.lo > hi else
             "steeper than the ladder's, intervals apart")
    lines = ["## The width slope against the confirmed ladder's", "",
             f"Here ({self.arm}, sp, heads of 64): " + (f"{e.diff:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] per "
             f"doubling ({e.n} seeds)" if e.defined else "no slope located") + f"; the confirmed muTransfer ladder's sp slope: {LADDER_SLOPE[0]:+.3f} "
             f"[{lo:+.3f}, {hi:+.3f}] (results/mutransfer-cpu, 9 seeds): {where}. What differs "
             "between the two designs (any may move the slope; this study varies none of them):", "",
             *[f"- {d}" for d in LADDER_DIFFERENCES], ""]
    return kinds.Section(lines, results={"width_slope": dataclasses.asdict(e), "ladder": LADDER_SLOPE,
                                         "where": where})

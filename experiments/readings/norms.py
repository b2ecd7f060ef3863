"""The norm-menu table (issue 69): per arm and depth, what a researcher picks a norm by.

``MenuTable`` is a report item (``Study.reports``) that the report opens with: for each arm at
each value of the depth axis, the best loss with its 95 % interval over seeds (the fitted
optimum, ``curves.summary``), the rates at which every seed learns (``curves.learning_rates``),
the decades of rate within ``curves.RANGE_MARGIN`` nats of each seed's own best
(``curves.rate_range``), the residual stream's growth that training added (``kinds.Probe``
with ``when="change"``: a log ratio, not nats) and, beside ours, the figure the arm's own
paper reports (``papers``: text, with its model size and data, so no one reads it as ours).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from research import curves
from research import stats
from research.kind_base import Data, Section
from research.kind_contrast import Probe
from research.page import interval_text


def _mean_interval(values) -> tuple[float | None, list[float] | None]:
  e = stats.one_sample(list(values))
  return (e.diff if math.isfinite(e.diff) else None), ([e.lo, e.hi] if e.defined else None)


@dataclasses.dataclass(frozen=True)
class MenuTable:
  """The table the norm-menu report opens with (module docstring); ``axis`` its depth axis,
  ``labels`` each arm's name in the table, ``papers`` each arm's published figure."""
  axis: str = "model.n_layer"
  labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
  papers: Mapping[str, str] = dataclasses.field(default_factory=dict)
  growth: Probe = Probe("residual_norm", "change", 1)

  def arms(self, data: Data) -> list[str]:
    """The arms in ``labels``' order, then any other."""
    seen = data.arms()
    return [a for a in self.labels if a in seen] + [a for a in seen if a not in self.labels]

  def rows(self, data: Data) -> list[dict]:
    out = []
    for arm in self.arms(data):
      for point in sorted(data.points(arm), key=lambda p: [dict(p).get(self.axis) or 0] + [
          v if isinstance(v, (int, float)) else 0 for _, v in p]):
        at = dict(point)
        runs = data.runs(arm, at)
        if not runs:
          continue
        s = curves.summary(runs)
        growth = self.growth.per_seed(data, arm, at)
        span = curves.rate_range(runs)
        out.append({"arm": arm, "depth": at.get(self.axis), "point": {k: v for k, v in at.items() if k != self.axis},
                    "seeds": s["seeds"], "saturation": self.saturation(data, arm, at),
                    "best_loss": s["optimum_loss"], "best_loss_interval": s["optimum_loss_interval"],
                    "learns_at": curves.learning_rates(runs), "rates": curves.base_rates(runs),
                    "rate_range": _mean_interval(span.values())[0],
                    "rate_range_interval": _mean_interval(span.values())[1],
                    "growth": _mean_interval(growth.values())[0],
                    "growth_interval": _mean_interval(growth.values())[1]})
    return out

  @staticmethod
  def saturation(data: Data, arm: str, at: dict) -> dict | None:
    """DyT's saturated share (``diagnostics.dyt_saturation``) at init and at the end, each the mean
    over seeds of the blocks' mean and of the final norm's, at each seed's best rate (None: no DyT)."""
    runs, recs = data.runs(arm, at), data.records(arm, at)
    best = curves.optima(runs)
    per = {"init": [], "end": [], "init_final": [], "end_final": []}
    for run, rec in zip(runs, recs):
      if run.seed not in best or run.lr != best[run.seed].grid_lr or run.diverged:
        continue
      for when in ("init", "end"):
        v = (rec.get(when) or {}).get("dyt_saturation")
        if v:
          per[when].append(float(sum(v[:-1]) / max(len(v) - 1, 1)))
          if v[-1] is not None and math.isfinite(v[-1]):
            per[when + "_final"].append(float(v[-1]))
    if not per["end"]:
      return None
    return {k: (sum(v) / len(v) if v else None) for k, v in per.items()}

  def label(self, row: dict, common: dict) -> str:
    """The arm's name, with the point's other axes where they differ from most rows' (a DyT at d128)."""
    extra = "".join(f", {k.split('.')[-1]} {v}" for k, v in row["point"].items() if common.get(k) != v)
    return f"{self.labels.get(row['arm'], row['arm'])}{extra}"

  def lines(self, rows: list[dict], unigram: float) -> list[str]:
    values = {}
    for r in rows:
      for k, v in r["point"].items():
        values.setdefault(k, []).append(v)
    common = {k: max(set(vs), key=vs.count) for k, vs in values.items()}
    learns = lambda r: (", ".join(f"{lr:g}" for lr in r["learns_at"]) + f" ({len(r['learns_at'])} of "
                        f"{len(r['rates'])})") if r["learns_at"] else f"none of {len(r['rates'])}"
    head = ["| arm | layers | best loss, nats [95 % CI] | learns at (every seed) | decades of rate within "
            f"{curves.RANGE_MARGIN:g} nats of its best | growth of the stream during training, log ratio "
            "[95 % CI] | the paper's own figure |", "|---|---|---|---|---|---|---|"]
    body = [f"| {self.label(r, common)} | {r['depth']} | "
            f"{interval_text(r['best_loss'], r['best_loss_interval'], '.3f')} | {learns(r)} | "
            f"{interval_text(r['rate_range'], r['rate_range_interval'], '.2f')} | "
            f"{interval_text(r['growth'], r['growth_interval'], '+.2f')} | {self.papers.get(r['arm'], '—')} |"
            for r in rows]
    note = (f"Best loss: the fitted optimum over the rates, mean over seeds (unigram {unigram:.3f} nats). "
            f"Learns: ends at least {curves.LEARNS_BY:g} nats below the unigram at that rate in every seed. "
            "Growth: log(last block's residual norm / first block's) at the end of training, at each "
            "seed's best rate, minus the same model's at initialisation. The papers' figures are "
            "theirs, at their scale and data, not comparable in level with ours: they say which way "
            "the paper found the arm to differ.")
    pct = lambda v: "—" if v is None else f"{100 * v:.0f} %"
    dyt = [f"| {self.label(r, common)} | {r['depth']} | {interval_text(r['best_loss'], r['best_loss_interval'], '.3f')} | "
           f"{pct(r['saturation']['init'])} / {pct(r['saturation']['end'])} | "
           f"{pct(r['saturation']['init_final'])} / {pct(r['saturation']['end_final'])} |"
           for r in rows if r["saturation"]]
    if dyt:
      dyt = ["DyT's saturation: the share of each DyT's inputs with |alpha x| > 2, where tanh passes little "
             "but the sign (diagnostics.dyt_saturation), at each seed's best rate, mean over seeds.", "",
             "| arm | layers | best loss, nats [95 % CI] | blocks' DyT saturated, init / end | final DyT "
             "saturated, init / end |", "|---|---|---|---|---|", *dyt, ""]
    return [*head, *body, "", note, "", *dyt]

  def section(self, data: Data, out: str) -> Section:
    rows = self.rows(data)
    every = [run for _, _, run, _ in data.rows]
    lines = self.lines(rows, curves.unigram(every))
    return Section([], results={"menu": rows}, opens=lines)

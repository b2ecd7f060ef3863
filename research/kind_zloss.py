"""The z-loss studies' kinds: where a probe (the output's log Z) sits against ``log V`` at the end of training.

``Model`` and the report item ``ExcessTable``; ``Finding`` is in ``kind_drift``, ``Runaway`` in ``kind_runaway``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research import page as reporting
from research.kind_base import at_text, Data, in_order, NAN, Section

CANNOT_JUDGE = "Cannot be judged"  # the claim's premise did not hold: not a failure to reproduce
FOUND, NOT_FOUND, CHOSEN = "Found", "Not found", "Chosen"


@dataclasses.dataclass(frozen=True)
class Model:
  """One model as the probe kinds see it."""
  seed: int
  lr: float
  completed: bool
  start: float  # the probe at step 0
  end: float  # the probe at the last probe (nan: the model did not complete)
  vocab: int
  final: float  # the final validation loss (nan: the model did not complete)

  @property
  def excess(self) -> float:
    """The probe at the end minus ``log V``, a uniform softmax's log Z."""
    return self.end - math.log(self.vocab)

  @property
  def read(self) -> bool:
    return self.completed and math.isfinite(self.end)


def models(data: Data, arm: str, at: Mapping[str, Any] | tuple = (), probe: str = "log_z") -> list[Model]:
  """``arm``'s models at ``at``, by rate and seed."""
  value = lambda d: NAN if (d or {}).get(probe) is None else float(d[probe])
  out = []
  for rec in data.records(arm, at):
    done = rec["status"] == "completed"
    out.append(Model(int(rec["seed"]), float(rec["learning_rate"]), done, value(rec.get("init")),
                     value(rec.get("end")) if done else NAN, int(rec["overrides"]["model.vocab_size"]),
                     float(rec["final_val_loss"]) if done else NAN))
  return sorted(out, key=lambda m: (m.lr, m.seed))


def by_rate(items: list) -> dict[float, list]:
  """``Model``s or ``Track``s by their rate."""
  out: dict[float, list] = {}
  for m in items:
    out.setdefault(m.lr, []).append(m)
  return out


def state(ms: list[Model], bound: float) -> str:
  """``grows`` (every seed completed |excess| >= ``bound``), ``stays`` (every seed completed
  below it) or ``mixed`` (seeds disagree, or a model did not complete)."""
  if not ms or not all(m.completed and math.isfinite(m.excess) for m in ms):
    return "mixed"
  big = [abs(m.excess) >= bound for m in ms]
  return "grows" if all(big) else "stays" if not any(big) else "mixed"


def median_of(xs) -> float:
  finite = [x for x in xs if math.isfinite(x)]
  return float(np.median(finite)) if finite else NAN


def median_excess(ms: list[Model]) -> float:
  return median_of(m.excess for m in ms)


@dataclasses.dataclass(frozen=True)
class ExcessTable:
  """A report item: per arm, point and rate, medians over seeds of the probe, its excess over ``log V``
  and ``state``, and the final loss; and the median excess against the rate, a panel per point."""
  bound: float = 2.0
  probe: str = "log_z"
  note: str = ""  # a line under the heading

  def section(self, data: Data, out: str) -> Section:
    lines = [f"## {self.probe} per arm and rate", "", *([self.note, ""] if self.note else []),
             f"Per arm, grid point and rate, over the seeds: {self.probe} at step 0 and at the end "
             f"(medians), the excess (at the end minus log V, a uniform softmax's: median, and each "
             f"seed's), its state at {self.bound:g} nats (grows, stays or mixed) and the final "
             f"validation loss (median; — where a model diverged).", "",
             "| arm | point | rate | start | end | excess over log V (per seed) | state | final loss |",
             "|---" * 8 + "|"]
    curves_: dict[tuple, list[tuple[float, float]]] = {}
    for point in in_order({p for arm in data.arms() for p in data.points(arm)}):
      for arm in [a for a in data.arms() if point in data.points(a)]:
        for lr, ms in by_rate(models(data, arm, point, self.probe)).items():
          seeds = ", ".join("—" if not math.isfinite(m.excess) else f"{m.excess:+.2f}" for m in ms)
          loss = median_of(m.final for m in ms)
          lines.append(f"| {arm} | {at_text(point)[2:] or '—'} | {lr:g} | "
                       f"{median_of(m.start for m in ms):.2f} | {median_of(m.end for m in ms):.2f} | "
                       f"{median_excess(ms):+.2f} ({seeds}) | {state(ms, self.bound)} | "
                       f"{'—' if math.isnan(loss) else format(loss, '.3f')} |")
          curves_.setdefault(point, []).append((arm, lr, median_excess(ms)))
    return Section(lines + [""], [self.plot(curves_, out)])

  def plot(self, by_point: dict, out: str) -> str | None:
    if not by_point:
      return None
    fig = reporting.figure(figsize=(5 * len(by_point), 3.8))
    for i, point in enumerate(in_order(by_point)):
      ax = fig.add_subplot(1, len(by_point), i + 1)
      for j, arm in enumerate(dict.fromkeys(a for a, _, _ in by_point[point])):
        pts = [(lr, x) for a, lr, x in by_point[point] if a == arm]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "os^v"[j % 4] + "-", color=f"C{j}", label=arm)
      for bound in (-self.bound, self.bound):
        ax.axhline(bound, color="grey", lw=0.8, ls=":")
      ax.set(xscale="log", xlabel="peak learning rate", ylabel=f"{self.probe} at the end - log V (nats)",
             title=at_text(point)[2:])
      ax.legend(fontsize=7)
    return reporting.save(fig, out, f"{self.probe}_excess.png")

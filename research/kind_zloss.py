"""The z-loss studies' models: where the output's log Z sits against ``log V`` at the end of training.

``Model``, ``models`` and ``state``; ``Finding`` is in ``kind_drift``, ``Runaway`` in ``kind_runaway``, the report
items in ``experiments/readings/zloss.py``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research.kind_base import Data, NAN

CANNOT_JUDGE = "Cannot be judged"  # the claim's premise did not hold: not a failure to reproduce
FOUND, NOT_FOUND, CHOSEN = "Found", "Not found", "Chosen"


@dataclasses.dataclass(frozen=True)
class Model:
  """One model as the log Z kinds see it."""
  seed: int
  lr: float
  completed: bool
  start: float  # log Z at step 0
  end: float  # log Z at the last probe (nan: the model did not complete)
  vocab: int
  final: float  # the final validation loss (nan: the model did not complete)

  @property
  def excess(self) -> float:
    """Log Z at the end minus ``log V``, a uniform softmax's log Z."""
    return self.end - math.log(self.vocab)

  @property
  def read(self) -> bool:
    return self.completed and math.isfinite(self.end)


def models(data: Data, arm: str, at: Mapping[str, Any] | tuple = ()) -> list[Model]:
  """``arm``'s models at ``at`` with their log Z, by rate and seed."""
  value = lambda d: NAN if (d or {}).get("log_z") is None else float(d["log_z"])
  out = []
  for rec in data.records(arm, at):
    done = rec["status"] == "completed"
    out.append(Model(int(rec["seed"]), float(rec["learning_rate"]), done, value(rec.get("init")),
                     value(rec.get("end")) if done else NAN, int(rec["overrides"]["model.vocab_size"]),
                     float(rec["final_val_loss"]) if done else NAN))
  return sorted(out, key=lambda m: (m.lr, m.seed))


def state(ms: list[Model], bound: float) -> str:
  """``grows`` (every seed completed |excess| >= ``bound``), ``stays`` (every seed completed
  below it) or ``mixed`` (seeds disagree, or a model did not complete)."""
  if not ms or not all(m.read for m in ms):
    return "mixed"
  big = [abs(m.excess) >= bound for m in ms]
  return "grows" if all(big) else "stays" if not any(big) else "mixed"


def median_of(xs) -> float:
  finite = [x for x in xs if math.isfinite(x)]
  return float(np.median(finite)) if finite else NAN



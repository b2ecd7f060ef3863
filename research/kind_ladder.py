"""Optima along an axis: each seed's optimum at one grid point (``point_optima``) and per value of an
axis (``axis_optima``), and how the seeds' mean bends (``local_slopes``): what ``kind_recipe``'s
``Slope`` and ``Recipe`` read.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from research import curves
from research import optimum
from research.kind_base import at_text, Data

# Whether an arm learns: its best losses' t interval (``interval``) or every seed (``every_seed``) below the unigram.
LEARNS = {"interval": curves.learns, "every_seed": curves.learns_every_seed}


def point_optima(runs: list[curves.Run], arm: str, where: str, fit: str = "fitted",
                 learns: str = "interval") -> tuple[dict[int, float], list[str]]:
  """``{seed: log(optimum)}`` of ``arm``'s ``runs`` at one grid point by ``fit``, and what was not located
  (the arm does not learn; a seed's optimum outside the grid)."""
  if not LEARNS[learns](runs):
    return {}, [f"{where}: {arm} does not learn"]
  out, missing = {}, []
  if fit == "fitted":
    for seed, opt in curves.optima(runs).items():
      if opt.bracketed:
        out[seed] = math.log(opt.lr)
      else:
        missing.append(f"{where} seed {seed}: {arm}'s optimum at the grid's edge ({opt.lr:.2g})")
    return out, missing
  table = optimum.table(runs)
  for seed in sorted({r.seed for r in runs}):
    own = {lr: by[seed] for lr, by in table.items() if seed in by}
    if fit == "basin":
      b = optimum.basin({lr: {seed: x} for lr, x in own.items()}, resamples=0)
      opt, why = b.optimum, (f"{arm}'s basin has no minimum inside the grid (best grid rate {b.best:.3g})")
    else:
      opt, why = optimum.seed_optimum(own)
    if opt is None:
      missing.append(f"{where} seed {seed}: {why}")
    else:
      out[seed] = math.log(opt)
  return out, missing


def axis_optima(data: Data, arm: str, axis: str, fit: str = "fitted", learns: str = "interval"
                ) -> tuple[dict[int, dict[Any, float]], list[str]]:
  """``{seed: {value: log(optimum)}}`` of ``arm`` along ``axis`` (``point_optima`` at each value)."""
  points, missing = {}, []
  for v in data.values(arm, axis):
    found, out = point_optima(data.runs(arm, {axis: v}), arm, at_text({axis: v})[2:], fit, learns)
    missing += out
    for seed, x in found.items():
      points.setdefault(seed, {})[v] = x
  return dict(sorted(points.items())), missing


def local_slopes(points) -> list[float]:
  """Per doubling, the seeds' mean log optimum's slopes between neighbouring values (how the line bends)."""
  values = sorted({v for by in points.values() for v in by})
  means = [float(np.mean([by[v] for by in points.values() if v in by])) for v in values]
  return [(b - a) / math.log2(w / v) for (v, a), (w, b) in itertools.pairwise(zip(values, means))]

"""The per-arm curve maths every study uses: one arm's loss-vs-learning-rate curve, its optimum, sensitivity and whether it learns.

It sees only ``Run`` records, so it is tested on synthetic numbers and re-judges a committed study
without retraining; the statistics are ``research/stats.py``'s. Every model counts with
``min(final, initial)``, a diverged one at its initial loss (Wortsman et al. 2023). A seed's
optimum is the vertex of the parabola in log(rate) through its best grid point and neighbours
(at the grid's edge: not bracketed, ``refine_rates``); an arm's, the mean over seeds of the log
optimum. Sensitivity (Wortsman et al. 2023), one definition everywhere: per seed, the mean over
the base grid (the first-round rates) of the clipped loss minus its best there.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import numpy as np

from research import page
from research import stats

LEARNS_BY = 0.1  # nats below the unigram baseline (``learns``)
# Equivalence margins fixed before the runs: optimal rates within a factor 1.5 (half a 3x grid
# step); sensitivities within 0.05 nats (Wortsman et al. 2023 report differences of tenths of a nat).
RATE_FACTOR = 1.5
SENSITIVITY_MARGIN = 0.05  # nats


@dataclasses.dataclass(frozen=True)
class Run:
  """One trained model, as the curve maths and the claims see it."""
  arms: tuple[str, ...]
  lr: float
  seed: int
  final: float  # final validation loss; nan when diverged or missing
  initial: float  # the loss at initialisation (measured, or ln V)
  diverged: bool = False
  unigram: float = float("nan")  # the unigram baseline's validation loss
  round: int = 0  # 0: the sweep's base grid; 1, 2: rates added around the optimum

  @property
  def clipped(self) -> float:
    """``min(final, initial)``; a diverged or missing final loss counts as the initial loss."""
    if self.diverged or not math.isfinite(self.final):
      return self.initial
    return min(self.final, self.initial)


def by_rate(runs: list[Run]) -> dict[float, list[Run]]:
  rates = defaultdict(list)
  for run in runs:
    rates[run.lr].append(run)
  return dict(sorted(rates.items()))


def by_seed(runs: list[Run]) -> dict[int, list[Run]]:
  seeds = defaultdict(list)
  for run in runs:
    seeds[run.seed].append(run)
  return dict(sorted(seeds.items()))


def rate_curve(runs: list[Run]) -> dict[float, dict]:
  """Per rate: mean and std over seeds of the clipped final loss, seeds, divergences."""
  out = {}
  for lr, rs in by_rate(runs).items():
    x = np.array([r.clipped for r in rs])
    out[lr] = {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if len(x) > 1 else float("nan"),
               "seeds": len(rs), "diverged": sum(r.diverged for r in rs), "losses": x.tolist()}
  return out


# The widest bracket (ratio of a neighbour's rate to the best's) a parabola is fitted over.
MAX_FIT_STEP = 10.0


@dataclasses.dataclass(frozen=True)
class Optimum:
  """One seed's optimum: the fitted rate, the fitted loss there, whether it is bracketed."""
  lr: float
  loss: float
  bracketed: bool
  grid_lr: float  # the best rate tried


def fit_optimum(points: dict[float, float]) -> Optimum | None:
  """The vertex of the parabola in log(rate) through the best point and its neighbours."""
  pts = sorted((lr, l) for lr, l in points.items() if lr > 0 and math.isfinite(l))
  if not pts:
    return None
  i = min(range(len(pts)), key=lambda j: pts[j][1])
  lr, loss = pts[i]
  if i == 0 or i == len(pts) - 1:
    return Optimum(lr, loss, False, lr)
  x = np.log([p[0] for p in pts[i - 1:i + 2]])
  y = np.array([p[1] for p in pts[i - 1:i + 2]])
  a, b, c = np.polyfit(x, y, 2)
  # No curvature, or a neighbour over MAX_FIT_STEP away (no local fit): the grid point stands.
  if a <= 0 or x[2] - x[0] > 2 * math.log(MAX_FIT_STEP):
    return Optimum(lr, loss, True, lr)
  vertex = float(np.clip(-b / (2 * a), x[0], x[2]))
  return Optimum(float(np.exp(vertex)), float(min(loss, np.polyval((a, b, c), vertex))), True, lr)


def optima(runs: list[Run]) -> dict[int, Optimum]:
  """Each seed's optimum over the rates it was trained at."""
  out = {}
  for seed, rs in by_seed(runs).items():
    opt = fit_optimum({r.lr: r.clipped for r in rs})
    if opt is not None:
      out[seed] = opt
  return out


def best_losses(runs: list[Run]) -> dict[int, float]:
  return {s: o.loss for s, o in optima(runs).items()}


def log_optima(runs: list[Run]) -> dict[int, float]:
  return {s: math.log(o.lr) for s, o in optima(runs).items()}


def bracketed(runs: list[Run]) -> bool:
  """Whether every seed's optimum lies inside the rates tried."""
  opts = optima(runs)
  return bool(opts) and all(o.bracketed for o in opts.values())


def unigram(runs: list[Run]) -> float:
  known = [r.unigram for r in runs if math.isfinite(r.unigram)]
  return float(np.median(known)) if known else float("nan")


def learns(runs: list[Run]) -> bool:
  """Whether the arm's best losses lie decisively ``LEARNS_BY`` below the unigram baseline."""
  u = unigram(runs)
  e = stats.one_sample([l - u for l in best_losses(runs).values()])
  return e.defined and e.hi < -LEARNS_BY


def learns_every_seed(runs: list[Run]) -> bool:
  """Whether every seed's best loss lies ``LEARNS_BY`` below the unigram baseline: seeds that leave the
  plateau at different steps pass here and can fail ``learns`` (a 3-seed t interval is wide)."""
  u, best = unigram(runs), best_losses(runs)
  return bool(best) and math.isfinite(u) and all(l < u - LEARNS_BY for l in best.values())


def refine_rates(runs: list[Run], max_step: float = 2.0) -> list[float]:
  """Rates to add so each seed's optimum is bracketed at most ``max_step`` apart: the geometric midpoint
  toward a farther neighbour, one grid step beyond an edge optimum; none if the arm does not learn."""
  if not learns(runs):
    return []
  rates = sorted(by_rate(runs))
  new = set()
  for opt in optima(runs).values():
    i = rates.index(opt.grid_lr)
    if len(rates) == 1:
      new.update((rates[0] / 3, rates[0] * 3))
      continue
    if i == 0:  # one grid step further, the step the grid takes at that edge
      new.add(rates[0] ** 2 / rates[1])
    if i == len(rates) - 1:
      new.add(rates[-1] ** 2 / rates[-2])
    for j in (i - 1, i + 1):
      if 0 <= j < len(rates):
        lo, hi = sorted((rates[i], rates[j]))
        if hi / lo > max_step * 1.0001:
          new.add(math.sqrt(lo * hi))
  return sorted(float(f"{lr:.3g}") for lr in new if lr not in rates)


def base_rates(*arms: list[Run]) -> list[float]:
  """The first-round rates every seed of every given arm was trained at."""
  sets = [{r.lr for r in rs if r.round == 0 and r.seed == s}
          for rs in arms for s in by_seed(rs)]
  return sorted(set.intersection(*sets)) if sets else []


def sensitivity(runs: list[Run], rates: list[float] | None = None) -> dict[int, float]:
  """Wortsman et al. 2023, per seed: mean over ``rates`` (default: the arm's base grid) of
  min(final, initial) minus the best over them; seeds lacking a rate are left out."""
  rates = base_rates(runs) if rates is None else rates
  if len(rates) < 2:
    return {}
  out = {}
  for seed, rs in by_seed(runs).items():
    at = {r.lr: r.clipped for r in rs if r.lr in rates}
    if len(at) == len(rates):
      x = np.array(list(at.values()))
      out[seed] = float(x.mean() - x.min())
  return out


# The margin of ``rate_range``: the nats from an arm's own best that still count as "near the best";
# LEARNS_BY, the framework's one distance that says a loss moved (issue 69).
RANGE_MARGIN = LEARNS_BY


def within_best(points: dict[float, float], margin: float = RANGE_MARGIN) -> float:
  """Decades (log10) of the rate interval around the best point whose loss lies within ``margin`` of
  the best: the grid points next to it that do, extended to where the loss crosses best + ``margin``,
  interpolated linearly in log10(rate) toward the first point that does not (at the grid's edge: the
  edge). nan without a finite point."""
  pts = sorted((math.log10(lr), l) for lr, l in points.items() if lr > 0 and math.isfinite(l))
  if not pts:
    return float("nan")
  i = min(range(len(pts)), key=lambda j: pts[j][1])
  cut = pts[i][1] + margin

  def reach(step: int) -> float:
    j = i
    while 0 <= j + step < len(pts) and pts[j + step][1] <= cut:
      j += step
    if not 0 <= j + step < len(pts):
      return pts[j][0]
    (x0, y0), (x1, y1) = pts[j], pts[j + step]
    return x0 + (cut - y0) * (x1 - x0) / (y1 - y0)

  return reach(1) - reach(-1)


def rate_range(runs: list[Run], rates: list[float] | None = None, margin: float = RANGE_MARGIN) -> dict[int, float]:
  """Per seed, ``within_best`` of its clipped losses over ``rates`` (default: the arm's base grid):
  the decades of rate within ``margin`` nats of the seed's own best; seeds lacking a rate left out."""
  rates = base_rates(runs) if rates is None else rates
  out = {}
  for seed, rs in by_seed(runs).items():
    at = {r.lr: r.clipped for r in rs if r.lr in rates}
    if rates and len(at) == len(rates):
      out[seed] = within_best(at, margin)
  return out


def first_reach(points, target: float) -> float:
  """The first x at which the loss reaches ``target`` along ``points`` (``[[x, loss], ...]`` in
  training order: tokens or seconds against the validation loss), linear between neighbouring
  evaluations; ``math.inf`` where it never does (censored: not reached within the run)."""
  pts = [(float(x), float(l)) for x, l in points if l is not None and math.isfinite(l)]
  for i, (x, l) in enumerate(pts):
    if l <= target:
      if not i:
        return x
      (x0, l0) = pts[i - 1]  # l0 > target >= l
      return x0 + (l0 - target) * (x - x0) / (l0 - l)
  return math.inf


def learning_rates(runs: list[Run]) -> list[float]:
  """The rates at which the arm learns: every seed there ends at least ``LEARNS_BY`` below the unigram
  (``learns_every_seed`` at that rate)."""
  return [lr for lr, rs in by_rate(runs).items() if learns_every_seed(rs)]


def learning_counts(runs: list[Run]) -> dict[int, float]:
  """Per seed, the number of its base-grid rates at which it ends at least ``LEARNS_BY`` below the
  unigram (a diverged model counts at its initial loss: it does not learn there)."""
  u, rates = unigram(runs), base_rates(runs)
  return {seed: float(sum(r.clipped < u - LEARNS_BY for r in rs if r.lr in rates))
          for seed, rs in by_seed(runs).items()} if math.isfinite(u) else {}


def summary(runs: list[Run]) -> dict:
  """The arm's optimum (rate and loss with 95 % intervals), sensitivity and learning."""
  opts = optima(runs)
  lr = stats.one_sample([math.log(o.lr) for o in opts.values()])
  loss = stats.one_sample([o.loss for o in opts.values()])
  sens = stats.one_sample(list(sensitivity(runs).values()))
  return {"optimum_lr": math.exp(lr.diff) if math.isfinite(lr.diff) else None,
          "optimum_lr_interval": [math.exp(lr.lo), math.exp(lr.hi)] if lr.defined else None,
          "optimum_loss": loss.diff if math.isfinite(loss.diff) else None,
          "optimum_loss_interval": [loss.lo, loss.hi] if loss.defined else None,
          "bracketed_seeds": sum(o.bracketed for o in opts.values()), "seeds": len(opts),
          "sensitivity": sens.diff if math.isfinite(sens.diff) else None,
          "sensitivity_interval": [sens.lo, sens.hi] if sens.defined else None,
          "base_rates": base_rates(runs), "learns": learns(runs)}


def describe(runs: list[Run]) -> str:
  """``optimum 2.1e-3 [1.6e-3, 2.8e-3], loss 4.612 [4.60, 4.62] (3 seeds, 3 bracketed)``."""
  s, f = summary(runs), page.interval_text
  if not s["seeds"]:
    return "no runs"
  return (f"optimum {f(s['optimum_lr'], s['optimum_lr_interval'], '.2g')}, "
          f"loss {f(s['optimum_loss'], s['optimum_loss_interval'], '.3f')} "
          f"({s['seeds']} seed{'s' * (s['seeds'] != 1)}, {s['bracketed_seeds']} bracketed"
          f"{'' if s['learns'] else '; does not learn'})")

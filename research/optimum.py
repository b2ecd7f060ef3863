"""Where the best learning rate is when the loss basin is flat, and how closely the seeds can place it.

``curves.fit_optimum``'s three-point parabola interpolates its points, so over a flat basin its
interval says how alike the seeds' curves are, not where the optimum is. ``basin`` reads a
``{rate: {seed: loss}}`` grid (``table``) three ways:

- basin fit: a parabola in log(rate) through every seed's loss over the contiguous run of rates
  around the best whose means lie within ``max(BAND, 2 SE)`` of the best, extended toward the
  lower neighbouring mean to ``MIN_POINTS`` grid points; its vertex, with a seed-bootstrap
  percentile interval (unbounded when over ``ALPHA / 2`` of resamples locate no minimum);
- the rates not decisively worse than the best (paired one-sided t at ``ALPHA``);
- the grid's resolution, "between a and b": the statement when the fit interpolates three
  points, locates no minimum, is unbounded, or every seed's best is the same grid point.

``basin`` is in the recipe study's frozen rules (``research/identity.py``); ``seed_optimum`` and
the grid helpers (``log_rates``, ``check_rates``, ``grid_points``) serve the post-hoc readings, and
``experiments/readings/rates.py`` words a ``Basin`` in full (``basin_text``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Mapping

import numpy as np
from scipy import stats as sps

from andrea_jax import errors
from research import curves

BAND = 0.02  # nats: the narrowest loss band around the best mean
MIN_POINTS = 3  # distinct grid points the basin fit needs
MIN_RATIO = 1.15  # rates closer than this factor are one grid point
ALPHA = 0.05  # one-sided level of "decisively worse than the best"; the interval is 1 - ALPHA
BOOTSTRAP = 2000  # resamples of the seeds
SEED = 0  # the resampling generator's seed: the same interval on every run

Table = Mapping[float, Mapping[int, float]]  # rate -> seed -> loss


# ----------------------------------------------------------------------------- the grid


def log_rates(low: float, high: float, n: int) -> tuple[float, ...]:
  """``n`` rates from ``low`` to ``high`` evenly spaced in log, at 3 significant figures (``check_rates``)."""
  if not (0 < low < high) or n < 2:
    raise errors.ConfigError(f"log_rates({low:g}, {high:g}, {n}): give 0 < low < high and n >= 2")
  rates = tuple(float(f"{r:.3g}") for r in np.geomspace(low, high, n))
  return check_rates(rates)


def near_duplicates(rates: Iterable[float]) -> list[tuple[float, float]]:
  """The pairs of neighbouring rates closer than ``MIN_RATIO`` (ascending): those within one grid point."""
  return [(a, b) for point in grid_points(rates) for a, b in zip(point, point[1:])]


def check_rates(rates: Iterable[float]) -> tuple[float, ...]:
  """``rates`` sorted, or a ``ConfigError`` naming the first pair closer than ``MIN_RATIO`` (a near-duplicate)."""
  rates = tuple(sorted(rates))
  if any(r <= 0 or not math.isfinite(r) for r in rates):
    raise errors.ConfigError(f"rates {rates}: every rate must be positive and finite")
  close = near_duplicates(rates)
  if close:
    a, b = close[0]
    raise errors.ConfigError(f"rates {a:g} and {b:g} are x{b / a:.3f} apart, closer than x{MIN_RATIO:g}: "
                             f"one grid point trained twice; drop one, or space the grid with "
                             f"optimum.log_rates")
  return rates


def grid_points(rates: Iterable[float]) -> list[tuple[float, ...]]:
  """The rates merged into grid points: neighbours closer than ``MIN_RATIO`` are one point."""
  points: list[list[float]] = []
  for r in sorted({float(x) for x in rates}):
    if points and r / points[-1][-1] < MIN_RATIO:
      points[-1].append(r)
    else:
      points.append([r])
  return [tuple(p) for p in points]


# ----------------------------------------------------------------------------- the reading


def table(runs: list[curves.Run]) -> dict[float, dict[int, float]]:
  """``{rate: {seed: loss}}`` of runs, the loss that counts (``Run.clipped``)."""
  out: dict[float, dict[int, float]] = {}
  for run in runs:
    out.setdefault(run.lr, {})[run.seed] = run.clipped
  return dict(sorted(out.items()))


@dataclasses.dataclass(frozen=True)
class Basin:
  """One loss-vs-rate grid read for its optimum (the module docstring)."""
  best: float  # the rate with the lowest mean loss
  best_loss: float  # that mean
  band: float  # nats above the best mean that the fit took in
  fit_rates: tuple[float, ...]  # the rates in the band
  optimum: float | None  # the parabola's vertex (None: no minimum inside the band's rates)
  interval: tuple[float, float] | None  # its (1 - ALPHA) bootstrap interval (None: not bounded)
  indistinct: tuple[float, float]  # the lowest and highest rate not decisively worse than the best
  between: tuple[float | None, float | None]  # the grid points beside the best (None: the edge)
  seeds: int
  same_point: bool  # every seed's own best rate is the best grid point
  points: int  # the distinct grid points among ``fit_rates``

  @property
  def interpolates(self) -> bool:
    """Whether the parabola has no more grid points than parameters: it passes through them."""
    return self.points <= 3

  @property
  def resolved(self) -> bool:
    """Whether the fit places the optimum more finely than the grid does."""
    return (self.optimum is not None and self.interval is not None and not self.interpolates
            and not self.same_point)

  def grid_text(self) -> str:
    lo, hi = self.between
    if lo is None and hi is None:
      return f"at {self.best:.3g} (the only grid point)"
    if lo is None:
      return f"at or below {self.best:.3g} (the grid's lowest point; the next is {hi:.3g})"
    if hi is None:
      return f"at or above {self.best:.3g} (the grid's highest point; the one below is {lo:.3g})"
    return f"between {lo:.3g} and {hi:.3g} (best grid point {self.best:.3g})"

  def reason(self) -> str:
    """Why the optimum is stated at the grid's resolution ("" when the fit resolves it)."""
    return ("" if self.resolved else
            "every seed's best rate is the same grid point" if self.same_point else
            "the parabola only interpolates three grid points" if self.interpolates else
            "the parabola locates no minimum" if self.optimum is None else
            "the resamples do not bound the vertex")

  def short(self) -> str:
    """The optimum at the precision the data allow, in a clause."""
    if self.resolved:
      return "optimum {:.3g} [{:.3g}, {:.3g}] by the flat-basin fit".format(self.optimum, *self.interval)
    geometry = "" if self.optimum is None else (
        f"; the parabola's {self.optimum:.3g}" + (" [{:.3g}, {:.3g}]".format(*self.interval)
                                                   if self.interval else "") + " is its geometry")
    return f"optimum {self.grid_text()} at the grid's resolution ({self.reason()}){geometry}"


def _matrix(losses: Table) -> tuple[np.ndarray, np.ndarray, list[int]]:
  rates = np.array(sorted(losses), float)
  seeds = sorted({s for by in losses.values() for s in by})
  y = np.array([[losses[r].get(s, np.nan) for s in seeds] for r in rates], float)
  y[~np.isfinite(y)] = np.nan
  return rates, y, seeds


def _run(mean: list[float], se: list[float], point: list[int]) -> tuple[int, float, int, int]:
  """``(best, band, lo, hi)``: the best rate's index, the band and the run ``lo..hi`` around it (the module
  docstring; ``point``: each rate's grid point)."""
  finite = [i for i, m in enumerate(mean) if math.isfinite(m)]
  b = min(finite, key=lambda i: mean[i])
  band = max(BAND, 2 * se[b])
  inside = lambda i: 0 <= i < len(mean) and math.isfinite(mean[i]) and mean[i] <= mean[b] + band
  lo = hi = b
  while inside(lo - 1):
    lo -= 1
  while inside(hi + 1):
    hi += 1
  want = min(MIN_POINTS, len({point[i] for i in finite}))
  while point[hi] - point[lo] + 1 < want:
    below = mean[lo - 1] if lo > 0 and math.isfinite(mean[lo - 1]) else math.inf
    above = mean[hi + 1] if hi + 1 < len(mean) and math.isfinite(mean[hi + 1]) else math.inf
    if below == above == math.inf:
      break
    lo, hi = (lo - 1, hi) if below <= above else (lo, hi + 1)
    band = max(band, min(below, above) - mean[b])
  return b, band, lo, hi


def _fit(x: np.ndarray, y: np.ndarray, point: list[int]) -> tuple[tuple[int, float, int, int], float, float]:
  """One draw of the seeds (``y``: a loss per rate and drawn seed, nan where missing): its ``_run``, the best
  rate's mean loss and the log rate at the minimum of the least-squares parabola through every loss in the run
  (nan without a minimum inside it, or under three rates with a loss)."""
  ok = np.isfinite(y)
  n, y0 = ok.sum(axis=1), np.where(ok, y, 0.0)
  with np.errstate(invalid="ignore", divide="ignore"):  # a rate with no finite loss: its mean is nan
    mean = y0.sum(axis=1) / n
    se = np.where(n > 1, np.sqrt(((y0 - mean[:, None]) ** 2 * ok).sum(axis=1) / (n - 1) / n), 0.0)
  run = _run(mean.tolist(), se.tolist(), point)
  b, _, lo, hi = run
  if (n[lo:hi + 1] > 0).sum() < 3:
    return run, float(mean[b]), math.nan
  inside = ok[lo:hi + 1]
  c2, c1, _ = np.polyfit(np.broadcast_to(x[lo:hi + 1, None], inside.shape)[inside], y[lo:hi + 1][inside], 2)
  v = -c1 / (2 * c2) if c2 > 0 else math.nan
  return run, float(mean[b]), v if x[lo] <= v <= x[hi] else math.nan


def _indistinct(rates: np.ndarray, y: np.ndarray, b: int) -> tuple[float, float]:
  """The lowest and highest rate not decisively worse than the best (paired one-sided t at ALPHA; under
  two shared seeds: not told apart)."""
  kept = []
  for i in range(len(rates)):
    d = y[i] - y[b]
    d = d[np.isfinite(d)]
    worse = False
    if i != b and len(d) >= 2:
      se = d.std(ddof=1) / math.sqrt(len(d))
      worse = bool(d.mean() > 0 and (se == 0 or sps.t.sf(d.mean() / se, len(d) - 1) < ALPHA))
    if not worse:
      kept.append(float(rates[i]))
  return min(kept), max(kept)


def basin(losses: Table, resamples: int = BOOTSTRAP) -> Basin:
  """The reading of one loss-vs-rate grid (``{rate: {seed: loss}}``; the module docstring)."""
  rates, y, seeds = _matrix(losses)
  if not len(rates) or np.all(np.isnan(y)):
    raise errors.ConfigError("optimum.basin: no finite losses to read")
  points = grid_points(rates)
  point = [k for k, p in enumerate(points) for _ in p]
  (b, band, lo, hi), best_loss, vertex = _fit(np.log(rates), y, point)
  draws = np.random.default_rng(SEED).integers(0, len(seeds), (resamples if len(seeds) > 1 else 0, len(seeds)))
  v = np.array([_fit(np.log(rates), y[:, d], point)[2] for d in draws])
  defined = v[np.isfinite(v)]
  interval = None
  if len(v) and len(v) - len(defined) <= ALPHA / 2 * len(v):
    interval = tuple(float(math.exp(q)) for q in np.quantile(defined, [ALPHA / 2, 1 - ALPHA / 2]))
  seed_best = [rates[int(np.nanargmin(y[:, j]))] for j in range(len(seeds)) if np.isfinite(y[:, j]).any()]
  best = float(rates[b])
  same = all(max(r, best) / min(r, best) < MIN_RATIO for r in seed_best)
  i = point[b]  # the best's grid point, between its neighbours
  between = (max(points[i - 1]) if i > 0 else None, min(points[i + 1]) if i + 1 < len(points) else None)
  return Basin(best, best_loss, band, tuple(float(r) for r in rates[lo:hi + 1]),
               None if np.isnan(vertex) else float(math.exp(vertex)), interval, _indistinct(rates, y, b),
               between, len(seeds), same, point[hi] - point[lo] + 1)


# ----------------------------------------------------------------------------- one seed, centred


def seed_optimum(losses: Mapping[float, float]) -> tuple[float | None, str]:
  """One seed's optimum (``{rate: loss}``): the vertex of a parabola in log(rate) over the run of grid
  points within ``BAND`` of the best and always its two neighbours (else the three-point one);
  ``(None, why)`` when the best is at the grid's edge or nothing is finite. Unlike ``basin`` of one
  seed, the best never ends at the run's edge (on a sharp basin that locates nothing)."""
  points = grid_points([r for r, l in losses.items() if math.isfinite(l)])
  if not points:
    return None, "no finite loss"
  x = np.array([math.log(float(np.exp(np.mean(np.log(p))))) for p in points])
  y = np.array([float(np.mean([losses[r] for r in p])) for p in points])
  b = int(np.argmin(y))
  if b in (0, len(y) - 1):
    return None, f"best rate {math.exp(x[b]):.3g} is the grid's {'lowest' if b == 0 else 'highest'} point"
  lo, hi = b - 1, b + 1
  while lo > 0 and y[lo - 1] <= y[b] + BAND:
    lo -= 1
  while hi < len(y) - 1 and y[hi + 1] <= y[b] + BAND:
    hi += 1

  def vertex(i: int, j: int) -> float | None:
    c2, c1, _ = np.polyfit(x[i:j + 1], y[i:j + 1], 2)
    v = -c1 / (2 * c2) if c2 > 0 else math.nan
    return float(v) if x[i] <= v <= x[j] else None

  v = vertex(lo, hi)
  if v is None:
    v = vertex(b - 1, b + 1)
  return (math.exp(v), "") if v is not None else (None, f"no minimum around {math.exp(x[b]):.3g}")

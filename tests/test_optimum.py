"""The flat-basin optimum (research/optimum.py) on synthetic loss-vs-rate grids, and its grid helper."""

import math

import numpy as np
import pytest

from andrea_jax import errors
from experiments.readings.rates import basin_text
from research import optimum
from research import sweep as base


def grid_losses(rates, curve, seeds=8, noise=0.0, seed=0):
  """``{rate: {seed: curve(ln rate) + noise}}``, the noise independent per seed and rate."""
  rng = np.random.default_rng(seed)
  return {r: {s: curve(math.log(r)) + noise * rng.standard_normal() for s in range(seeds)} for r in rates}


OPT = 2.3e-3  # off the grid
SHARP = lambda x: 4.0 + 0.05 * (x - math.log(OPT)) ** 2
# Flat within a factor e either side of OPT (x7.4 in all), steep outside.
FLAT = lambda x: 4.0 + 0.3 * max(0.0, abs(x - math.log(OPT)) - 1.0) ** 2


def log_width(interval):
  return math.log(interval[1] / interval[0])


def test_a_known_parabola_is_recovered():
  # 25 rates over three decades, 8 seeds with noise 0.005 nats on each loss.
  b = optimum.basin(grid_losses(optimum.log_rates(1e-4, 1e-1, 25), SHARP, noise=0.005))
  assert b.resolved and b.points >= 4 and not b.same_point
  assert b.interval[0] < OPT < b.interval[1] and abs(math.log(b.optimum / OPT)) < 0.05
  assert log_width(b.interval) < 0.2
  assert basin_text(b).startswith("optimum {:.3g} [{:.3g}, {:.3g}] by the flat-basin fit".format(b.optimum, *b.interval))


def test_a_flat_basin_gives_a_wide_interval_and_a_wide_range():
  rates = optimum.log_rates(1e-4, 1e-1, 25)
  sharp = optimum.basin(grid_losses(rates, SHARP, noise=0.005))
  flat = optimum.basin(grid_losses(rates, FLAT, noise=0.005))
  # Unbounded (the resamples locate no minimum), or several times the sharp basin's width.
  assert flat.interval is None or log_width(flat.interval) > 3 * log_width(sharp.interval)
  # The rates not decisively worse than the best cover most of the flat bottom.
  assert flat.indistinct[0] <= OPT / 2 and flat.indistinct[1] >= OPT * 1.8
  assert log_width(flat.indistinct) > 2 * log_width(sharp.indistinct)


def test_every_seed_best_at_one_grid_point_is_stated_at_the_grid_resolution():
  # A parabola over five grid points, the optimum on a grid point and every seed's best there:
  # the fit could interpolate nothing, yet the data cannot place it more finely than the grid.
  rates = optimum.log_rates(1e-4, 1e-1, 13)
  b = optimum.basin(grid_losses(rates, lambda x: 4.0 + 0.01 * (x - math.log(rates[5])) ** 2, noise=5e-4))
  assert b.points >= 4 and b.optimum is not None and b.same_point and not b.resolved
  assert b.between == (rates[4], rates[6]) and b.best == rates[5]
  assert basin_text(b).startswith(f"optimum between {rates[4]:.3g} and {rates[6]:.3g} (best grid point "
                             f"{rates[5]:.3g}) at the grid's resolution (every seed's best rate is the same grid point)")


def test_three_points_interpolated_and_the_grid_edge():
  rates = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
  b = optimum.basin(grid_losses(rates, lambda x: 4.0 + 0.3 * (x - math.log(1e-3)) ** 2, noise=0.05, seed=3))
  assert b.points == 3 and b.interpolates and not b.resolved
  edge = optimum.basin(grid_losses(rates, lambda x: 4.0 - 0.1 * x, noise=0.01))
  assert edge.best == 1e-2 and edge.between == (3e-3, None) and "at or above 0.01" in basin_text(edge)


def test_rates_indistinguishable_from_the_best_are_paired_over_seeds():
  # 3e-3 is worse by 0.01 in every seed (decisive, paired), 1e-2 by 0.01 on average with a
  # spread of 0.05 (not decisive): only the second is indistinguishable from the best.
  losses = {1e-3: {s: 4.0 + 0.02 * s for s in range(6)},
            3e-3: {s: 4.01 + 0.02 * s for s in range(6)},
            1e-2: {s: 4.01 + 0.02 * s + 0.05 * (-1) ** s for s in range(6)}}
  assert optimum.basin(losses).indistinct == (1e-3, 1e-2)
  losses[1e-2] = {s: 4.2 + 0.02 * s for s in range(6)}
  assert optimum.basin(losses).indistinct == (1e-3, 1e-3)


def test_the_grid_helper_refuses_near_duplicates_and_merges_them_where_they_are():
  assert optimum.log_rates(1e-4, 1e-1, 7) == (1e-4, 0.000316, 0.001, 0.00316, 0.01, 0.0316, 0.1)
  with pytest.raises(errors.ConfigError, match=r"rates 0.0052 and 0.00548 are x1.054 apart, closer than x1.15"):
    optimum.check_rates((0.003, 0.0052, 0.00548, 0.01))
  with pytest.raises(errors.ConfigError, match="closer than x1.15"):
    optimum.log_rates(1e-3, 1e-2, 20)
  assert optimum.near_duplicates((0.003, 0.0052, 0.00548, 0.009, 0.01)) == [(0.0052, 0.00548), (0.009, 0.01)]
  assert optimum.grid_points((0.003, 0.0052, 0.00548, 0.009, 0.01)) == [(0.003,), (0.0052, 0.00548), (0.009, 0.01)]
  # A near-duplicate neighbour is the same grid point: the neighbours are the next points.
  b = optimum.basin(grid_losses((0.001, 0.003, 0.0052, 0.00548, 0.009, 0.01, 0.03),
                                lambda x: 4.0 + 0.5 * (x - math.log(0.00548)) ** 2, noise=1e-4))
  assert b.between == (0.003, 0.009)


def test_a_sweep_refuses_a_group_whose_grid_has_near_duplicates():
  cell = lambda lr, rnd=0: base.Cell(f"g-lr{lr:g}", {"train.learning_rate": lr}, ("x",), 0, "g", rnd)
  with pytest.raises(errors.ConfigError, match=r"group 'g': rates 0.0052 and 0.00548 are x1.054 apart"):
    base.groups([cell(0.003), cell(0.0052), cell(0.00548)])
  # A round added around the optima is the sweep's own (curves.refine_rates): not refused.
  assert len(base.groups([cell(0.003), cell(0.0052), cell(0.00548, 1)])["g"]) == 3

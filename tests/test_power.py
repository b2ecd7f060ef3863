"""The power planning tool: seeds a one-sample (paired) t test or TOST needs, against reference values and a simulation."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from research import power


@pytest.mark.parametrize("d,n", [(0.3, 90), (0.5, 34), (0.8, 15), (1.0, 10), (2.0, 5)])
def test_seeds_for_a_two_sided_paired_t_test_match_the_reference_tables(d, n):
  # G*Power / statsmodels TTestPower (two-sided, alpha 0.05, power 0.8): 90, 34, 15, 10, 5.
  assert power.seeds_needed(d, 1.0, 0.05, 0.8) == n
  assert power.power_directed(n, d, 1.0) >= 0.8 > power.power_directed(n - 1, d, 1.0)


def test_the_effect_is_in_units_of_the_per_seed_spread_and_a_stricter_level_needs_more():
  assert power.seeds_needed(0.1, 0.2) == power.seeds_needed(0.5, 1.0) == 34
  assert power.seeds_needed(0.5, 1.0, alpha=0.05 / 8) > 34
  assert power.seeds_needed(1e-4, 1.0) is None  # beyond MAX_SEEDS


def test_the_noncentral_t_power_against_the_large_sample_normal_formula():
  # With many seeds the t test is the z test: power = Phi(d sqrt(n) - z_{1-alpha/2}) (+ the far tail).
  n, d = 150, 0.3
  z = sps.norm.ppf(0.975)
  normal = sps.norm.cdf(d * math.sqrt(n) - z) + sps.norm.cdf(-d * math.sqrt(n) - z)
  assert power.power_directed(n, d, 1.0) == pytest.approx(normal, abs=0.01)


def test_tost_seeds_against_the_normal_approximation():
  # Chow, Shao & Wang: n = (z_{1-alpha} + z_{1-beta/2})^2 / (margin / sd)^2 at a true 0,
  # 34.3 here; the t test needs a little more.
  n = power.seeds_needed(0.0, 1.0, 0.05, 0.8, margin=0.5)
  approx = (sps.norm.ppf(0.95) + sps.norm.ppf(0.9)) ** 2 / 0.25
  assert approx < n <= approx + 3
  assert power.seeds_needed(0.6, 1.0, margin=0.5) is None  # truly outside the margin


def test_power_by_simulation():
  rng = np.random.default_rng(0)
  n, d, sims = 10, 1.0, 4000
  x = rng.normal(d, 1.0, size=(sims, n))
  t = x.mean(1) / (x.std(1, ddof=1) / math.sqrt(n))
  hit = np.mean(np.abs(t) > sps.t.ppf(0.975, n - 1))
  assert hit == pytest.approx(power.power_directed(n, d, 1.0), abs=0.025)
  # TOST at a true 0 within +-1 sd, n = 20.
  n, m = 20, 1.0
  x = rng.normal(0.0, 1.0, size=(sims, n))
  se = x.std(1, ddof=1) / math.sqrt(n)
  q = sps.t.ppf(0.95, n - 1)
  both = np.mean(((x.mean(1) + m) / se > q) & ((m - x.mean(1)) / se > q))
  assert both == pytest.approx(power.power_equivalent(n, 0.0, m, 1.0), abs=0.025)


def test_spread_of():
  assert power.Spread.of([1.0, 2.0, 3.0]).sd == pytest.approx(1.0)
  assert math.isnan(power.Spread.of([1.0, float("nan")]).sd)

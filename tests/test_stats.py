"""The statistics of the verdicts: t quantiles, pairing, Welch, Holm, equivalence."""

import math

import numpy as np
import pytest

from research import stats


def test_interval_uses_the_t_quantile_for_its_degrees_of_freedom():
  e = stats.one_sample([1.0, 2.0, 3.0])
  half = 4.302653 * 1.0 / math.sqrt(3)  # t(0.975, 2) = 4.30, not 2
  assert e.diff == pytest.approx(2.0) and e.df == 2
  assert (e.lo, e.hi) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-5)
  assert not stats.one_sample([1.0]).defined and stats.outcomes([stats.one_sample([1.0])])[0] == "unclear"


def test_pairing_by_seed_removes_what_the_seeds_share():
  # Each seed shifts both arms alike (its initialisation and batch order): paired, b is
  # decisively 0.05 higher; as independent samples the seed spread drowns it.
  shift = {0: -0.3, 1: 0.0, 2: 0.3}
  a = {s: 4.6 + d for s, d in shift.items()}
  b = {s: 4.65 + d + 0.002 * s for s, d in shift.items()}
  assert stats.compare(a, b).kind == "paired" and stats.outcomes([stats.compare(a, b)])[0] == "lower"
  w = stats.welch(list(a.values()), list(b.values()))
  assert w.kind == "welch" and stats.outcomes([w])[0] == "unclear"
  # No shared seeds: Welch.
  assert stats.compare({0: 1.0, 1: 1.1}, {2: 2.0, 3: 2.1}).kind == "welch"


def test_welch_degrees_of_freedom():
  a, b = [1.0, 2.0, 3.0, 4.0], [1.0, 1.5]
  va, vb = np.var(a, ddof=1) / 4, np.var(b, ddof=1) / 2
  df = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 1)
  assert stats.welch(a, b).df == pytest.approx(df)


def test_holm_step_down():
  assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
  adj = stats.holm([0.02, float("nan")])
  assert adj[0] == pytest.approx(0.02) and math.isnan(adj[1])
  # Decisive alone, not among several: the family-wise error is controlled.
  e = stats.one_sample([0.1, 0.3, -0.02, 0.25, 0.2])
  assert 0.02 < e.p < 0.05 and stats.outcomes([e])[0] == "higher"
  assert stats.outcomes([e, e, e]) == ["unclear"] * 3


def test_equivalence_is_two_one_sided_tests():
  tight = stats.one_sample([0.001, -0.002, 0.0015, 0.0], margin=0.02)
  assert stats.outcomes([tight])[0] == "same"
  wide = stats.one_sample([0.01, -0.03, 0.02, 0.0], margin=0.02)
  assert stats.outcomes([wide])[0] == "unclear"


def test_a_certain_but_negligible_difference_is_the_same():
  e = stats.one_sample([0.010, 0.011, 0.009, 0.010], margin=0.05)
  assert e.p < 0.001 and stats.outcomes([e])[0] == "same"
  assert stats.outcomes([stats.one_sample([0.010, 0.011, 0.009, 0.010])])[0] == "higher"  # no margin

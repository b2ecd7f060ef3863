"""Power planning before a run: how many seeds a paired or one-sample t test needs to decide a claim at a given effect, spread and level.

A claim compared by seed is a one-sample t test on the per-seed values (for a paired
comparison, the per-seed differences), as in ``experiments/stats.py``. Two kinds of test:

- ``directed``: a two-sided t test at level ``alpha`` of "the mean equals ``bound``" (the
  rule's claim is that it lies on one side; ``stats``' intervals exclude the bound exactly
  when this test rejects); the true mean lies ``effect`` away from the bound. Its power is
  exact from the noncentral t distribution: with ``n`` seeds, ``df = n - 1`` and
  ``delta = effect / sd * sqrt(n)``, ``P(|T| > t_{1 - alpha/2, df})`` for ``T ~ nct(df, delta)``.
- ``equivalent``: two one-sided tests (TOST) at level ``alpha`` each, that the mean lies
  within ``+-margin`` when it truly is ``effect``; power from the noncentral t of each side
  (``1 - P(T_lo < t) - P(T_hi < t)``, the usual lower bound; exact enough where it matters).

``seeds_needed`` is the smallest ``n`` (at least 2) whose power reaches the target. The level
is the one the claim is tested at after the study's multiplicity correction: under Holm over
a family of ``m`` tests the first-ranked test is held to ``alpha / m``, so planning every
claim at ``alpha / m`` guarantees its power whatever its rank. This module is planning only;
no verdict is computed here.
"""

from __future__ import annotations

import math

from scipy import stats as sps

MAX_SEEDS = 200


def power_directed(n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
  """Power of the two-sided one-sample t test at ``alpha`` with ``n`` seeds, true mean
  ``effect`` away from the tested value, per-seed standard deviation ``sd``."""
  if n < 2:
    return 0.0
  df = n - 1
  delta = abs(effect) / sd * math.sqrt(n)
  q = sps.t.ppf(1 - alpha / 2, df)
  p = float(sps.nct.sf(q, df, delta) + sps.nct.cdf(-q, df, delta))
  return p if math.isfinite(p) else float(delta > q)  # nct's tail loses precision far out


def power_equivalent(n: int, effect: float, margin: float, sd: float, alpha: float = 0.05) -> float:
  """Power of TOST at ``alpha`` (each side) that the mean lies within ``+-margin``, when it
  truly is ``effect`` (|effect| < margin), with ``n`` seeds of spread ``sd``."""
  if n < 2 or abs(effect) >= margin:
    return 0.0
  df = n - 1
  q = sps.t.ppf(1 - alpha, df)
  se = sd / math.sqrt(n)
  miss = 0.0
  for delta in ((margin + effect) / se, (margin - effect) / se):  # each side's miss
    m = float(sps.nct.cdf(q, df, delta))
    miss += m if math.isfinite(m) else float(delta < q)
  return max(0.0, 1.0 - miss)


def seeds_needed(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8,
                 margin: float | None = None) -> int | None:
  """The fewest seeds (>= 2) that reach ``power``: the directed test when ``margin`` is
  None, else TOST within ``margin``. None when no number up to ``MAX_SEEDS`` does."""
  if not (sd > 0 and math.isfinite(sd)):
    return 2 if (margin is None and effect) or (margin is not None and abs(effect) < margin) else None
  f = ((lambda n: power_directed(n, effect, sd, alpha)) if margin is None
       else (lambda n: power_equivalent(n, effect, margin, sd, alpha)))
  for n in range(2, MAX_SEEDS + 1):  # the exact iteration: the first n that reaches it
    if f(n) >= power:
      return n
  return None


def sd_of(values) -> float:
  """The per-seed standard deviation (ddof = 1) of finite values; nan for fewer than two."""
  x = [float(v) for v in values if v is not None and math.isfinite(v)]
  if len(x) < 2:
    return float("nan")
  m = sum(x) / len(x)
  return math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1))

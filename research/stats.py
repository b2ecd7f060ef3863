"""The statistics every verdict uses: t intervals, paired and Welch comparisons, Holm, equivalence.

A comparison is ``a - b``: paired by seed where the arms share seeds (same init and batch order),
else Welch's test. Intervals use the t quantile (3 seeds: 4.30 at 95 %, not 2); an equivalence is
two one-sided tests (TOST) against a margin from the claim's literature.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np
from scipy import stats as sps

ALPHA = 0.05  # family-wise error of each claim; intervals are (1 - ALPHA)
NAN = float("nan")


@dataclasses.dataclass(frozen=True)
class Effect:
  """A difference (or a mean) with its (1 - ALPHA) interval; ``p``: two-sided p for zero; ``p_same``: TOST
  p for within ``+-margin`` (nan without a margin)."""
  diff: float
  lo: float
  hi: float
  p: float
  df: float
  n: int
  kind: str  # "paired", "welch" or "one-sample"
  margin: float = NAN
  p_same: float = NAN

  @property
  def defined(self) -> bool:
    return math.isfinite(self.lo) and math.isfinite(self.hi)

  def text(self, unit: str, digits: int = 3) -> str:
    """``+0.875 nats [95 % CI ...]``; ``unit``: the quantity's (``kind_base.LOSS``, ``LOG_RATE``, ...)."""
    if not math.isfinite(self.diff):
      return "no data"
    f = lambda x: f"{x:+.{digits}f}"
    if not self.defined:
      return f"{f(self.diff)} {unit} (n = {self.n}: no interval)"
    return f"{f(self.diff)} {unit} [95 % CI {f(self.lo)}, {f(self.hi)}; {self.kind}, n = {self.n}]"


def _t_effect(diff: float, se: float, df: float, n: int, kind: str, margin: float) -> Effect:
  if not (n >= 2 and df > 0 and math.isfinite(se)):
    return Effect(diff, NAN, NAN, NAN, df, n, kind, margin)
  q = float(sps.t.ppf(1 - ALPHA / 2, df))
  if se == 0.0:  # identical differences: certain, but no spread to scale a test by
    p = 0.0 if diff != 0 else 1.0
    p_same = (0.0 if abs(diff) < margin else 1.0) if math.isfinite(margin) else NAN
    return Effect(diff, diff, diff, p, df, n, kind, margin, p_same)
  p = float(2 * sps.t.sf(abs(diff) / se, df))
  p_same = NAN
  if math.isfinite(margin):
    p_same = float(max(sps.t.sf((diff + margin) / se, df), sps.t.sf((margin - diff) / se, df)))
  return Effect(diff, diff - q * se, diff + q * se, p, df, n, kind, margin, p_same)


def one_sample(x: Sequence[float], margin: float = NAN) -> Effect:
  """The mean of ``x`` (non-finite values dropped) with its t interval."""
  x = np.asarray([v for v in x if v is not None and math.isfinite(v)], float)
  if not len(x):
    return Effect(NAN, NAN, NAN, NAN, 0, 0, "one-sample", margin)
  se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else NAN
  return _t_effect(float(x.mean()), se, len(x) - 1, len(x), "one-sample", margin)


def paired(a: Mapping[int, float], b: Mapping[int, float], margin: float = NAN) -> Effect:
  """``a - b`` over the seeds both have (finite values only)."""
  seeds = sorted(s for s in set(a) & set(b) if math.isfinite(a[s]) and math.isfinite(b[s]))
  e = one_sample([a[s] - b[s] for s in seeds], margin)
  return dataclasses.replace(e, kind="paired")


def welch(a: Sequence[float], b: Sequence[float], margin: float = NAN) -> Effect:
  """``mean(a) - mean(b)`` for independent samples, Welch-Satterthwaite degrees of freedom."""
  a = np.asarray([v for v in a if math.isfinite(v)], float)
  b = np.asarray([v for v in b if math.isfinite(v)], float)
  if not len(a) or not len(b):
    return Effect(NAN, NAN, NAN, NAN, 0, 0, "welch", margin)
  diff = float(a.mean() - b.mean())
  n = min(len(a), len(b))
  if len(a) < 2 or len(b) < 2:
    return Effect(diff, NAN, NAN, NAN, 0, n, "welch", margin)
  va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
  se = math.sqrt(va + vb)
  df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if se > 0 else len(a) + len(b) - 2
  return _t_effect(diff, se, float(df), n, "welch", margin)


def compare(a: Mapping[int, float], b: Mapping[int, float], margin: float = NAN) -> Effect:
  """Paired where the arms share at least two seeds (finite in both), else Welch over all their seeds."""
  e = paired(a, b, margin)
  return e if e.n >= 2 else welch(list(a.values()), list(b.values()), margin)


def holm(ps: Sequence[float]) -> list[float]:
  """Holm's step-down adjusted p-values (nan stays nan and does not count as a test)."""
  idx = [i for i, p in enumerate(ps) if math.isfinite(p)]
  order = sorted(idx, key=lambda i: ps[i])
  out, running = [NAN] * len(ps), 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (len(order) - rank) * ps[i]))
    out[i] = running
  return out


def outcomes(effects: Sequence[Effect]) -> list[str]:
  """Per effect of one family, after Holm: ``same`` (decisively within its margin), ``lower``/``higher``
  (decisively below/above zero) or ``unclear``."""
  p_diff = holm([e.p for e in effects])
  p_same = holm([e.p_same for e in effects])
  out = []
  for e, pd, ps in zip(effects, p_diff, p_same):
    if math.isfinite(ps) and ps < ALPHA:  # within the margin: negligible, however certain
      out.append("same")
    elif math.isfinite(pd) and pd < ALPHA:
      out.append("lower" if e.diff < 0 else "higher")
    else:
      out.append("unclear")
  return out


# ----------------------------------------------------------------------------- directed tests


def directed(values: Sequence[float], predict: str = "higher",
             margin: float = NAN) -> tuple[Effect, float, float]:
  """``(effect, p for, p against)`` for "the mean is ``predict`` than zero": for, the two-sided p if
  the estimate points that way (else 1); against, that p the other way or the smaller TOST p
  within ``margin`` (too small to matter is against)."""
  e = one_sample(values, margin)
  if not math.isfinite(e.p):
    return e, NAN, NAN
  sign = 1.0 if predict == "higher" else -1.0
  p_for = e.p if sign * e.diff > 0 else 1.0
  p_opposite = e.p if sign * e.diff < 0 else 1.0
  return e, p_for, (min(p_opposite, e.p_same) if math.isfinite(e.p_same) else p_opposite)


def below(values: Sequence[float], margin: float) -> tuple[Effect, float, float]:
  """``(effect, p for, p against)`` for "the mean is below ``margin``" (non-inferiority): one-sided t p's."""
  e = one_sample(values)
  shifted = one_sample([v - margin for v in values])
  if not math.isfinite(shifted.p):
    return e, NAN, NAN
  one_sided = shifted.p / 2
  return (e, one_sided, 1.0) if shifted.diff < 0 else (e, 1.0, one_sided)

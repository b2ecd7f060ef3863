"""A learning-rate recipe that could have been wrong: its rate with a joint-over-seeds interval, and its check against the naive rule.

- ``predict``: a ``kinds.Recipe`` per seed (seed s's base optimum plus each leg's slope for s times
  the doublings carried); the rate is their mean, its interval their t interval (the jackknife over
  seeds of the whole recipe), so a seed whose base is off moves all its legs together, which
  per-leg errors in quadrature miss.
- ``BeatsNaive``: on a held-out rung, the naive rule's error ``|log(rung / base rate)|`` minus the
  recipe's ``|log(rung / recipe)|`` decisively above ``MARGIN``.
- ``BeatsRule``: the same against a rule of fewer legs (width and depth alone: issue 71), whose
  per-seed rate at the rung stands for the base rate's, so a rung can tell the legs it lacks.

The rate a report tells a user to train with (``Answer``), its legs carried past their data and
the study's GPU time are the recipe check's report items (``experiments/readings/recipe_check.py``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from research import claims
from research import kinds
from research import stats
from research.kind_base import _missing, LOG_RATIO, NAN

# How far the recipe must beat "keep the base rate", in log rate: a factor sqrt 2, half a x2 grid
# step and about one seed's scatter (sd 0.28 over 3 seeds, results/recipe-cpu); in loss 0.06-0.09
# nats at 200 steps, 0.02 at 800.
MARGIN = math.log(2) / 2
BOOTSTRAP = 4000
SEED = 0  # the resampling generator's seed: the same interval on every run


# ----------------------------------------------------------------------------- the recipe, per seed


@dataclasses.dataclass(frozen=True)
class Joint:
  """A recipe at a point: per seed the recipe and its base (means: ``recipe``, ``naive``), what was not located."""
  per_seed: dict[int, float]
  base: dict[int, float]
  missing: tuple[str, ...] = ()

  @property
  def recipe(self) -> stats.Effect:
    return stats.one_sample(list(self.per_seed.values()))

  @property
  def naive(self) -> stats.Effect:
    return stats.one_sample([self.base[s] for s in self.per_seed])

  def text(self, e: stats.Effect | None = None) -> str:
    e = e or self.recipe
    lo, hi = (math.exp(e.lo), math.exp(e.hi)) if e.defined else (NAN, NAN)
    return f"{math.exp(e.diff):.3g} [{lo:.3g}, {hi:.3g}]"


def predict(recipe: kinds.Recipe, data: kinds.Data, at: Mapping[str, Any] | None = None) -> Joint | None:
  """``recipe`` at ``at`` (default: its legs' targets), per seed (the module docstring); None without a
  base point or two seeds located at the base and on every leg."""
  base = recipe.base(data)
  if base is None:
    return None
  base_logs, missing = kinds.point_optima(data.runs(recipe.base_arm, base), recipe.base_arm, "the base", "bracketed")
  per_seed = dict(base_logs)
  for leg in recipe.legs:
    doublings = math.log2((at or {}).get(leg.axis, leg.target) / base[leg.axis])
    if doublings == 0:
      continue
    points, out = kinds.axis_optima(data, leg.arm, leg.axis, "bracketed")
    missing += out
    slopes = kinds.seed_slopes(points, 2)
    per_seed = {s: x + slopes[s] * doublings for s, x in per_seed.items() if s in slopes}
  if len(per_seed) < 2:
    return None
  return Joint(per_seed, base_logs, tuple(missing))


def advantage(rung: Mapping[int, float], recipe: Mapping[int, float], naive: Mapping[int, float],
              margin: float) -> tuple[float, float, float, float, float]:
  """``(a, lo, hi, p_for, p_against)``: ``a = |M - N| - |M - P|`` (M the rung's mean log optimum, P, N the
  recipe's and naive rule's), a 95 % bootstrap interval drawing the legs' seeds jointly (P and N share
  the base) and the rung's apart, and two-sided p-values that ``a`` lies above/below ``margin``."""
  legs = sorted(recipe)
  m, p, n = (np.array([d[s] for s in seeds]) for d, seeds in ((rung, sorted(rung)), (recipe, legs), (naive, legs)))
  a = abs(m.mean() - n.mean()) - abs(m.mean() - p.mean())
  rng = np.random.default_rng(SEED)
  i = rng.integers(0, len(legs), (BOOTSTRAP, len(legs)))
  j = rng.integers(0, len(m), (BOOTSTRAP, len(m)))
  mb = m[j].mean(1)
  ab = np.abs(mb - n[i].mean(1)) - np.abs(mb - p[i].mean(1))
  lo, hi = np.quantile(ab, [stats.ALPHA / 2, 1 - stats.ALPHA / 2])
  return (float(a), float(lo), float(hi), min(1.0, 2 * float(np.mean(ab <= margin))),
          min(1.0, 2 * float(np.mean(ab >= margin))))


@dataclasses.dataclass(frozen=True)
class BeatsNaive(kinds.HeldOut):
  """The recipe against "keep the base rate" on the held-out rung ``arm`` (one grid point, its own
  seeds; ``HeldOut``'s fields and needs): ``advantage`` decisively above ``margin``."""
  margin: float = MARGIN
  min_seeds: int = 3
  test_kind = "directed"

  def quantity_text(self) -> str:
    return (f"abs(log({self.arm}'s optimum / the base rate)) - abs(log({self.arm}'s optimum / the "
            f"recipe's rate)) ({LOG_RATIO})")

  def rule(self) -> str:
    return (f"per seed, the optimum by the fit that brackets its best rate "
            f"(optimum.seed_optimum); the recipe at {self.arm}'s point per seed of the legs (its "
            f"base plus each leg's per-seed slope times the doublings), its mean over seeds; the "
            f"naive rule, the base's mean optimum over the same seeds; {self.quantity_text()}, "
            f"with a 95 % interval resampling the legs' seeds jointly and the rung's apart "
            f"({BOOTSTRAP} draws): reproduced (the recipe earns its name) when it lies decisively "
            f"above the margin {self.margin:.3f} (log sqrt 2: half a x2 grid step), not reproduced "
            f"when decisively below, inconclusive otherwise, or with fewer than {self.min_seeds} "
            f"located seeds on the rung or the legs")

  def reading(self, data: kinds.Data) -> tuple[dict, Joint | None, list[str]]:
    """The rung's per-seed optima, the recipe there, what was not located."""
    rung = data.points(self.arm)
    if len(rung) != 1:
      return {}, None, [f"{self.arm} has {len(rung)} grid points, not one"]
    at = dict(rung[0])
    found, missing = kinds.point_optima(data.runs(self.arm, at), self.arm, "the held-out rung", "bracketed")
    joint = predict(self.recipe, data, at)
    return found, joint, missing + list(joint.missing if joint else ["the recipe has no base or legs"])

  def test(self, data: kinds.Data) -> claims.Test:
    found, joint, missing = self.reading(data)
    if joint is None or min(len(found), len(joint.per_seed)) < self.min_seeds:
      return _missing(self, f"{self.min_seeds} located seeds on {self.arm} and on every leg",
                      ["Not located: " + "; ".join(missing)] if missing else [])
    a, lo, hi, pf, pa = advantage(found, joint.per_seed, joint.base, self.margin)
    e = stats.Effect(a, lo, hi, NAN, NAN, len(found) + len(joint.per_seed), "seed bootstrap", self.margin)
    m = stats.one_sample(list(found.values()))
    err = lambda x: abs(m.diff - x.diff)
    lines = [f"Held-out rung: measured {joint.text(m)} (geometric mean of {len(found)} seeds, "
             f"95 % t); the recipe predicted {joint.text()} (error x{math.exp(err(joint.recipe)):.2f}), "
             f"keeping the base rate {joint.text(joint.naive)} (error x{math.exp(err(joint.naive)):.2f}); "
             f"the margin is x{math.exp(self.margin):.2f}."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), pf, pa,
                       [], tuple(sorted(found)))


@dataclasses.dataclass(frozen=True)
class BeatsRule(BeatsNaive):
  """``BeatsNaive`` against ``against``: a rule of fewer legs from the same base (a ``kinds.Recipe``, e.g.
  width and depth only; None: keep the base rate). Per seed of the recipe's legs, the rule's rate at the
  rung (``predict``) stands where the base's optimum stood, so the legs the rule lacks are what the
  rung can tell apart; the rule's legs must be the recipe's (the same cells, the same seeds)."""
  against: kinds.Recipe | None = None

  def needs(self) -> tuple[str, ...]:
    return (*super().needs(), *(leg.arm for leg in (self.against.legs if self.against else ())))

  def rule_name(self) -> str:
    return f"the {self.against.name} rule" if self.against else "keeping the base rate"

  def quantity_text(self) -> str:
    rule = f"{self.against.name}'s rate" if self.against else "the base rate"
    return (f"abs(log({self.arm}'s optimum / {rule})) - abs(log({self.arm}'s optimum / the recipe's rate)) "
            f"({LOG_RATIO})")

  def rule(self) -> str:
    return (f"per seed, the optimum by the fit that brackets its best rate (optimum.seed_optimum); the "
            f"recipe at {self.arm}'s point per seed of the legs (its base plus each leg's per-seed slope "
            f"times the doublings), its mean over seeds; {self.rule_name()} at the same point from the "
            f"same seeds' cells; {self.quantity_text()}, with a 95 % interval resampling the legs' seeds "
            f"jointly and the rung's apart ({BOOTSTRAP} draws): reproduced when it lies decisively above "
            f"the margin {self.margin:.3f}, not reproduced when decisively below, inconclusive otherwise, "
            f"or with fewer than {self.min_seeds} located seeds on the rung or the legs")

  def rival(self, data: kinds.Data, joint: Joint) -> Joint:
    """The rule's per-seed log rate at the rung over the recipe's seeds (as ``Joint.per_seed``)."""
    if self.against is None:
      return Joint({s: joint.base[s] for s in joint.per_seed}, joint.base)
    at = dict(data.points(self.arm)[0])
    other = predict(self.against, data, at)
    seeds = {} if other is None else other.per_seed
    return Joint({s: seeds[s] for s in joint.per_seed if s in seeds}, joint.base, other.missing if other else ())

  def test(self, data: kinds.Data) -> claims.Test:
    found, joint, missing = self.reading(data)
    rival = self.rival(data, joint) if joint is not None else None
    if rival is None or min(len(found), len(joint.per_seed)) < self.min_seeds or set(rival.per_seed) != set(
        joint.per_seed):
      return _missing(self, f"{self.min_seeds} located seeds on {self.arm} and on every leg of the recipe "
                      f"and of {self.rule_name()}", ["Not located: " + "; ".join(missing)] if missing else [])
    a, lo, hi, pf, pa = advantage(found, joint.per_seed, rival.per_seed, self.margin)
    e = stats.Effect(a, lo, hi, NAN, NAN, len(found) + len(joint.per_seed), "seed bootstrap", self.margin)
    m = stats.one_sample(list(found.values()))
    err = lambda x: math.exp(abs(m.diff - x.diff))
    lines = [f"Held-out rung {self.arm}: measured {joint.text(m)} (geometric mean of {len(found)} seeds, "
             f"95 % t); the recipe predicted {joint.text()} (error x{err(joint.recipe):.2f}), "
             f"{self.rule_name()} {joint.text(rival.recipe)} (error x{err(rival.recipe):.2f}); the margin "
             f"is x{math.exp(self.margin):.2f}."]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), pf, pa,
                       [], tuple(sorted(found)))

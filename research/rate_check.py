"""A learning-rate recipe that could have been wrong: its rate with a joint-over-seeds interval, its check against the naive rule, and the rate a report tells a user to train with.

- ``predict``: a ``kinds.Recipe`` per seed (seed s's base optimum plus each leg's slope for s times
  the doublings carried); the rate is their mean, its interval their t interval (the jackknife over
  seeds of the whole recipe), so a seed whose base is off moves all its legs together, which
  per-leg errors in quadrature miss. It omits ``OMITTED``; past ``GUESS_DOUBLINGS`` it says "a guess".
- ``BeatsNaive``: on a held-out rung, the naive rule's error ``|log(rung / base rate)|`` minus the
  recipe's ``|log(rung / recipe)|`` decisively above ``MARGIN``.
- ``Answer``: the recipe's rate where that check passed, else ``DEFAULT_RATE`` (never above ``CAP``).
- ``DeviceTime`` and ``CheckedStudy``: a ``Study`` whose page opens with its ``Answer`` and whose
  plan states fresh seeds and GPU time (``model.flops_per_token`` at a stated MFU).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from andrea_jax import config as config_lib
from andrea_jax import model as model_lib
from research import claims
from research import kinds
from research import registry
from research import stats
from research.kind_recipe import command
from research.study import Study

NAN = float("nan")
# The literature's default for a model of andrea120m's size: GPT-3 Small (125M), 6e-4 at a
# 0.5 M-token batch (Brown et al. 2020, Table 2.1); GPT-2's reproductions use it too.
DEFAULT_RATE = 6e-4
DEFAULT_SOURCE = "GPT-3 125M: 6e-4 at a 0.5 M-token batch (Brown et al. 2020, Table 2.1)"
CAP = 3e-3  # the most a report may print for the target unless its check passed
GUESS_DOUBLINGS = 2.0  # a leg carried further than this past its data gives a guess
# How far the recipe must beat "keep the base rate", in log rate: a factor sqrt 2, half a x2 grid
# step and about one seed's scatter (sd 0.28 over 3 seeds, results/recipe-cpu); in loss 0.06-0.09
# nats at 200 steps, 0.02 at 800.
MARGIN = math.log(2) / 2
OMITTED = ("context (the legs train at one context)", "vocabulary (one vocabulary)",
           "data (one corpus, one split)")
BOOTSTRAP = 4000
SEED = 0  # the resampling generator's seed: the same interval on every run


# ----------------------------------------------------------------------------- the recipe, per seed


@dataclasses.dataclass(frozen=True)
class LegRow:
  arm: str
  axis: str
  slope: stats.Effect  # per doubling, over seeds (shown; the interval is the joint one)
  doublings: float  # carried from the base
  past_data: float  # doublings beyond the values the leg's data span

  @property
  def guess(self) -> bool:
    return self.past_data > GUESS_DOUBLINGS


@dataclasses.dataclass(frozen=True)
class Joint:
  """A recipe at a point: per seed the recipe and its base (means: ``recipe``, ``naive``), the legs, what was not located."""
  per_seed: dict[int, float]
  base: dict[int, float]
  legs: tuple[LegRow, ...]
  missing: tuple[str, ...] = ()

  @property
  def recipe(self) -> stats.Effect:
    return stats.one_sample(list(self.per_seed.values()))

  @property
  def naive(self) -> stats.Effect:
    return stats.one_sample([self.base[s] for s in self.per_seed])

  @property
  def guesses(self) -> list[LegRow]:
    return [r for r in self.legs if r.guess]

  def text(self, e: stats.Effect | None = None) -> str:
    e = e or self.recipe
    lo, hi = (math.exp(e.lo), math.exp(e.hi)) if e.defined else (NAN, NAN)
    return f"{math.exp(e.diff):.3g} [{lo:.3g}, {hi:.3g}]"

  def guess_text(self) -> str:
    """The sentence that says the rate is a guess (empty when no leg is carried that far)."""
    if not self.guesses:
      return ""
    legs = ", ".join(f"{r.axis.split('.')[-1]} {r.past_data:.1f}" for r in self.guesses)
    return (f"**A guess**: legs carried more than {GUESS_DOUBLINGS:g} doublings past their data "
            f"({legs} doublings); the interval assumes the optimum keeps moving as a power there.")


def predict(recipe: kinds.Recipe, data: kinds.Data, at: Mapping[str, Any] | None = None) -> Joint | None:
  """``recipe`` at ``at`` (default: its legs' targets), per seed (the module docstring); None without a
  base point or two seeds located at the base and on every leg."""
  base = recipe.base(data)
  if base is None:
    return None
  base_logs, missing = kinds.point_optima(data.runs(recipe.base_arm, base), recipe.base_arm, "the base", "bracketed")
  per_seed, rows = dict(base_logs), []
  for leg in recipe.legs:
    target = (at or {}).get(leg.axis, leg.target)
    doublings = math.log2(target / base[leg.axis])
    if doublings == 0:
      continue
    points, out = kinds.axis_optima(data, leg.arm, leg.axis, "bracketed")
    missing += out
    slopes = kinds.seed_slopes(points, 2)
    values = data.values(leg.arm, leg.axis)
    past = max(0.0, math.log2(target / max(values)), math.log2(min(values) / target))
    rows.append(LegRow(leg.arm, leg.axis, stats.one_sample(list(slopes.values())), doublings, past))
    per_seed = {s: x + slopes[s] * doublings for s, x in per_seed.items() if s in slopes}
  if len(per_seed) < 2:
    return None
  return Joint(per_seed, base_logs, tuple(rows), tuple(missing))


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
class BeatsNaive(kinds.Claim):
  """The recipe against "keep the base rate" on the held-out rung ``arm`` (one grid point, its own
  seeds): ``advantage`` decisively above ``margin``."""
  arm: str = ""
  recipe: kinds.Recipe | None = None
  margin: float = MARGIN
  min_seeds: int = 3

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.recipe.base_arm, *(leg.arm for leg in self.recipe.legs))

  def quantity_text(self) -> str:
    return (f"abs(log({self.arm}'s optimum / the base rate)) - abs(log({self.arm}'s optimum / the "
            f"recipe's rate)) (log rate)")

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
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"{self.min_seeds} located seeds on {self.arm} and on every leg", self.rule(),
          ["Not located: " + "; ".join(missing)] if missing else []))
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


def passed(check: BeatsNaive, data: kinds.Data) -> bool:
  """Whether ``check`` comes out reproduced (it is judged alone: its own family)."""
  (_, verdict), = claims.decide_family([check.test(data)])
  return verdict.verdict == claims.REPRODUCED


# ----------------------------------------------------------------------------- the answer


@dataclasses.dataclass(frozen=True)
class Answer:
  """The rate to train ``check.recipe``'s target with: the recipe's where ``check`` passed, else
  ``DEFAULT_RATE``; beside it the recipe's interval and ``measured``'s optimum (the target's shape, a
  short horizon)."""
  check: BeatsNaive
  measured: str = ""

  def lines(self, data: kinds.Data, judged: bool = True) -> tuple[list[str], dict]:
    """The answer's lines and numbers; ``judged``: False when the check was declared not powered."""
    recipe, ok = self.check.recipe, judged and passed(self.check, data)
    joint = predict(recipe, data)
    rate = math.exp(joint.recipe.diff) if ok and joint else DEFAULT_RATE
    why = ("the held-out check passed: the recipe beat keeping the base rate by the margin" if ok else
           f"the held-out check did not pass, so the literature's default ({DEFAULT_SOURCE})")
    out = [f"**Answer: train {recipe.config} at {rate:.3g}** ({why}).", "",
           f"    {command(recipe.config, recipe.carry, rate)}", ""]
    ranges = [f"the recipe at {recipe.config}: {joint.text()} (the t interval over seeds of the "
              f"whole recipe; it omits {', '.join(OMITTED)}). {joint.guess_text()}"] if joint else []
    found, _ = kinds.point_optima(data.runs(self.measured), self.measured, "its point", "bracketed")
    if found:
      ranges.append(f"measured at {recipe.config}'s own shape ({self.measured}, "
                    f"{kinds.words(dict(data.points(self.measured)[0]))}): "
                    f"{Joint(found, found, ()).text()} over {len(found)} seeds")
    out += ["The study's range: " + ("; ".join(r.strip().rstrip(".") for r in ranges) if ranges else
                                     "none located at this scale") + ".", ""]
    found_rung, joint_rung, _ = self.check.reading(data)
    if joint_rung and found_rung:
      m = stats.one_sample(list(found_rung.values()))
      out += [f"Held-out rung ({self.check.arm}): measured {joint_rung.text(m)}; keep the base rate "
              f"{joint_rung.text(joint_rung.naive)}; the recipe {joint_rung.text()}; the recipe "
              f"{'beat' if ok else 'did not beat'} the naive rule by the margin "
              f"x{math.exp(self.check.margin):.2f} (the verdict below).", ""]
    return out, {"rate": rate, "passed": ok, "command": command(recipe.config, recipe.carry, rate),
                 "recipe": None if joint is None else dataclasses.asdict(joint.recipe)}


# ----------------------------------------------------------------------------- the study


@dataclasses.dataclass(frozen=True)
class DeviceTime:
  """A scale's time on one GPU: training FLOPs (an eval pass a third of a step) at ``mfu`` of ``peak``,
  plus ``program_s`` per program (start, compiles, checkpoint) and ``data_s`` once (tokenizer, shards)."""
  device: str = "one H100"
  peak: float = 989e12  # bf16 dense FLOP/s (H100 SXM)
  mfu: float = 0.40
  program_s: float = 75.0
  data_s: float = 120.0
  limit_minutes: float = 10.0

  def seconds(self, study: Study, scale: str) -> tuple[float, float]:
    """``(total, training)`` seconds of ``scale``'s sweep."""
    sweep, flops, shapes = study.sweep(scale), 0.0, {}
    for c in sweep.cells:
      if c.group not in shapes:
        run = config_lib.run_config(registry.group_config(sweep.base_config, dict(c.overrides)))
        t = run.train
        evals = t.steps // max(1, t.eval_every) + int(t.eval_at_start)
        shapes[c.group] = model_lib.flops_per_token(run.model) * run.model.block_size * t.batch_size * (
            t.steps + evals * t.eval_batches / 3)
      flops += shapes[c.group]
    train = flops / (self.mfu * self.peak)
    return train + self.program_s * len(shapes) + self.data_s, train

  def lines(self, study: Study, scale: str) -> list[str]:
    total, train = self.seconds(study, scale)
    return [f"Estimated time on {self.device}: **{total / 60:.1f} minutes** ({train / 60:.1f} of "
            f"training at {self.mfu:.0%} MFU of {self.peak / 1e12:g} TFLOP/s, from "
            f"6 N + 12 L H Q T FLOPs per token; {self.program_s:g} s per program for start and "
            f"compile; {self.data_s:g} s once for the tokenizer and shards); the limit is "
            f"{self.limit_minutes:g} minutes.", ""]


@dataclasses.dataclass(frozen=True)
class CheckedStudy(Study):
  """A ``Study`` whose report opens with its ``answer`` and whose plan says whether its seeds
  are fresh (``registry.used_seeds``) and, per scale in ``devices``, its GPU time."""
  answer: Answer | None = None
  devices: Mapping[str, DeviceTime] = dataclasses.field(default_factory=dict)

  def plan_lines(self, scale: str) -> list[str]:
    seeds = sorted({c.seed for c in self.sweep(scale).cells})
    reused = sorted(set(seeds) & registry.used_seeds(self.name))
    lines = [f"Seeds {', '.join(map(str, seeds))}: " + (
        f"**{reused} were used by another study**" if reused else
        "none used by another study's grid or committed cells (research.registry.used_seeds)") + ".", ""]
    if scale in self.devices:
      lines += self.devices[scale].lines(self, scale)
    return lines + super().plan_lines(scale)

  def page(self, index: dict, cells: list[dict], out: str):
    page = super().page(index, cells, out)
    if self.answer is not None:
      lines, results = self.answer.lines(self.data(cells), self.answer.check.claim not in self.not_powered)
      page.headline = lines
      page.results["answer"] = results
    return page

"""The recipe check's own report items (not rules): the rate a report tells a user to train with
(``Answer``; ``Carried``, which carries each leg only as far as a held-out rung checked it), its legs
carried past their data (``legs``), the study whose page opens with that answer
and whose plan states its seeds and GPU time (``CheckedStudy``, ``DeviceTime``), and its width leg's
slope beside the confirmed muTransfer ladder's (``Widths``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from andrea_jax import config as config_lib
from andrea_jax import model as model_lib
from experiments.readings.recipe import command
from research import claims
from research import kinds
from research import rate_check
from research import registry
from research import stats
from research.study import Study

# The literature's default for a model of andrea120m's size: GPT-3 Small (125M), 6e-4 at a
# 0.5 M-token batch (Brown et al. 2020, Table 2.1); GPT-2's reproductions use it too.
DEFAULT_RATE = 6e-4
DEFAULT_SOURCE = "GPT-3 125M: 6e-4 at a 0.5 M-token batch (Brown et al. 2020, Table 2.1)"
CAP = 3e-3  # the most a report may print for the target unless its check passed
GUESS_DOUBLINGS = 2.0  # a leg carried further than this past its data gives a guess
OMITTED = ("context (the legs train at one context)", "vocabulary (one vocabulary)",
           "data (one corpus, one split)")


# The confirmed muTransfer ladder's sp width slope (docs/studies/mutransfer-cpu: "pre", 9 seeds).
LADDER_SLOPE = (-0.664, -0.722, -0.606)
LADDER_DIFFERENCES = (
    "heads: here heads = d_model / 64 (1, 2, 4 heads of 64), there 2 heads whose size grows with "
    "the width (16 to 128), so there the attention logits' scale grows with the width at "
    "initialisation and here it does not",
    "multipliers: GPT-2's (1, 1) here, the muP base stage's tuned readout and attention "
    "multipliers there",
    "widths 64-256 here, 32-256 there; warmup 4 % of the run here, a tenth there",
    "the fit: each seed's bracketed optimum here, the three-point parabola there")


@dataclasses.dataclass(frozen=True)
class Widths:
  """A report item: the width leg's slope beside the confirmed ladder's, and the designs' differences."""
  arm: str
  axis: str

  def section(self, data: kinds.Data, out: str) -> kinds.Section:
    points, _ = kinds.axis_optima(data, self.arm, self.axis, "bracketed")
    e = stats.one_sample(list(kinds.seed_slopes(points, 2).values()))
    lo, hi = LADDER_SLOPE[1:]
    where = ("no slope located" if not e.defined else
             "the intervals overlap" if e.lo <= hi and e.hi >= lo else
             "shallower than the ladder's, intervals apart" if e.lo > hi else
             "steeper than the ladder's, intervals apart")
    lines = ["## The width slope against the confirmed ladder's", "",
             f"Here ({self.arm}, sp, heads of 64): " + (f"{e.diff:+.3f} [{e.lo:+.3f}, {e.hi:+.3f}] "
             f"{kinds.per_doubling(kinds.LOG_RATE)} ({e.n} seeds)" if e.defined else "no slope located")
             + f"; the confirmed muTransfer ladder's sp slope: {LADDER_SLOPE[0]:+.3f} "
             f"[{lo:+.3f}, {hi:+.3f}] (results/mutransfer-cpu, 9 seeds): {where}. What differs "
             "between the two designs (any may move the slope; this study varies none of them):", "",
             *[f"- {d}" for d in LADDER_DIFFERENCES], ""]
    return kinds.Section(lines, results={"width_slope": dataclasses.asdict(e), "ladder": LADDER_SLOPE,
                                         "where": where})


# ----------------------------------------------------------------------------- the recipe's legs


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


def legs(recipe: kinds.Recipe, data: kinds.Data, at: Mapping[str, Any] | None = None) -> list[LegRow]:
  """Each leg ``rate_check.predict`` carries to ``at`` (default: the legs' targets): its slope over
  seeds, the doublings carried and how far past its data."""
  base, rows = recipe.base(data), []
  for leg in recipe.legs if base else ():
    target = (at or {}).get(leg.axis, leg.target)
    doublings = math.log2(target / base[leg.axis])
    if doublings == 0:
      continue
    points, _ = kinds.axis_optima(data, leg.arm, leg.axis, "bracketed")
    values = data.values(leg.arm, leg.axis)
    past = max(0.0, math.log2(target / max(values)), math.log2(min(values) / target))
    rows.append(LegRow(leg.arm, leg.axis, stats.one_sample(list(kinds.seed_slopes(points, 2).values())),
                       doublings, past))
  return rows


def guess_text(rows: list[LegRow]) -> str:
  """The sentence that says the rate is a guess (empty when no leg is carried that far)."""
  guesses = [r for r in rows if r.guess]
  if not guesses:
    return ""
  far = ", ".join(f"{r.axis.split('.')[-1]} {r.past_data:.1f}" for r in guesses)
  return (f"**A guess**: legs carried more than {GUESS_DOUBLINGS:g} doublings past their data "
          f"({far} doublings); the interval assumes the optimum keeps moving as a power there.")


# ----------------------------------------------------------------------------- the answer


def passed(check: rate_check.BeatsNaive, data: kinds.Data) -> bool:
  """Whether ``check`` comes out reproduced (it is judged alone: its own family)."""
  (_, verdict), = claims.decide_family([check.test(data)])
  return verdict.verdict == claims.REPRODUCED


@dataclasses.dataclass(frozen=True)
class Answer:
  """The rate to train ``check.recipe``'s target with: the recipe's where ``check`` passed, else
  ``DEFAULT_RATE``; beside it the recipe's interval and ``measured``'s optimum (the target's shape, a
  short horizon)."""
  check: rate_check.BeatsNaive
  measured: str = ""

  def lines(self, data: kinds.Data, judged: bool = True) -> tuple[list[str], dict]:
    """The answer's lines and numbers; ``judged``: False when the check was declared not powered."""
    recipe, ok = self.check.recipe, judged and passed(self.check, data)
    joint = rate_check.predict(recipe, data)
    rate = math.exp(joint.recipe.diff) if ok and joint else DEFAULT_RATE
    why = ("the held-out check passed: the recipe beat keeping the base rate by the margin" if ok else
           f"the held-out check did not pass, so the literature's default ({DEFAULT_SOURCE})")
    out = [f"**Answer: train {recipe.config} at {rate:.3g}** ({why}).", "",
           f"    {command(recipe.config, recipe.carry, rate)}", ""]
    ranges = [f"the recipe at {recipe.config}: {joint.text()} (the t interval over seeds of the "
              f"whole recipe; it omits {', '.join(OMITTED)}). {guess_text(legs(recipe, data))}"] if joint else []
    found, _ = kinds.point_optima(data.runs(self.measured), self.measured, "its point", "bracketed")
    if found:
      ranges.append(f"measured at {recipe.config}'s own shape ({self.measured}, "
                    f"{kinds.words(dict(data.points(self.measured)[0]))}): "
                    f"{rate_check.Joint(found, found).text()} over {len(found)} seeds")
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

  def page_lines(self, study: Study, data: kinds.Data, verdicts: list[claims.Verdict]) -> tuple[list[str], dict]:
    """``lines`` as the study's page opens with them (judged unless the check was declared not powered)."""
    del verdicts
    return self.lines(data, self.check.claim not in study.not_powered)


# ----------------------------------------------------------------------------- the answer a rung can see (issue 71)


@dataclasses.dataclass(frozen=True)
class Reach:
  """One leg of ``Carried``'s answer: the doublings the target moves its axis from the base (``whole``),
  those a passing rung checked (``carried``, by ``rung``), and its own claim's verdict (``verdict``)."""
  arm: str
  axis: str
  whole: float
  carried: float
  rung: str
  verdict: str

  @property
  def unchecked(self) -> float:
    return self.whole - self.carried


def short(axis: str) -> str:
  return axis.split(".")[-1].replace("_", " ")


@dataclasses.dataclass(frozen=True)
class Carried:
  """The rate to train ``recipe``'s target with, as far as its held-out rungs can see it (issue 71).

  A rung (``rungs``: its arm -> the claims judged on it) checks a leg when every one of its claims
  is reproduced and it moves the leg's axis from the base toward the target; it checks the leg as
  far as it moves it. A leg is carried only as far as a rung checked it, and only when its own
  claim (the study's ``Slope`` on the leg's arm and axis) was judged, not declared not powered.
  The answer is ``measured``'s optimum where the target's own shape trained (the gpu scale); else
  the recipe with each leg carried that far (``rate_check.predict`` there: the t interval over the
  legs' seeds), with the legs left unchecked named beside it; where no leg is carried,
  ``DEFAULT_RATE`` with the study's estimate (the whole recipe, unchecked) beside it.

  ``every_leg``: the checked rate is the answer only where every leg is carried some of the way;
  where a leg no rung checked is left at the base's value, that rate assumes the leg flat from the
  base, itself a guess no rung saw (and, the legs pulling opposite ways toward andrea120m, one that
  keeps only the legs that raise the rate or only those that lower it), so the answer is then
  ``DEFAULT_RATE``, the checked rate beside it."""
  recipe: kinds.Recipe
  rungs: Mapping[str, tuple[str, ...]]
  measured: str = ""
  every_leg: bool = True

  def passed(self, data: kinds.Data, verdicts: list[claims.Verdict]) -> dict[str, dict]:
    """The rungs every claim of which is reproduced, each with its one grid point."""
    by_claim = {v.claim: v.verdict for v in verdicts}
    return {arm: dict(data.points(arm)[0]) for arm, checks in self.rungs.items()
            if checks and all(by_claim.get(c) == claims.REPRODUCED for c in checks) and len(data.points(arm)) == 1}

  def reaches(self, study: Study, data: kinds.Data, verdicts: list[claims.Verdict]) -> list[Reach]:
    """Per leg, how far the target moves it and how far a passing rung checked it (the class docstring)."""
    base, passed = self.recipe.base(data), self.passed(data, verdicts)
    by_claim = {v.claim: v.verdict for v in verdicts}
    out = []
    for leg in self.recipe.legs:
      whole = math.log2(leg.target / base[leg.axis])
      claim = next((c.claim for c in study.claims if isinstance(c, kinds.Slope) and c.arm == leg.arm
                    and c.axis == leg.axis), "")
      toward = {arm: min(abs(math.log2(p[leg.axis] / base[leg.axis])), abs(whole)) for arm, p in passed.items()
                if math.log2(p[leg.axis] / base[leg.axis]) * whole > 0}
      rung = max(toward, key=toward.get, default="") if claim and claim not in study.not_powered else ""
      out.append(Reach(leg.arm, leg.axis, whole, math.copysign(toward[rung], whole) if rung else 0.0, rung,
                       by_claim.get(claim, "not judged")))
    return out

  def rung_line(self, study: Study, data: kinds.Data, arm: str, verdicts: list[claims.Verdict]) -> str:
    """A rung measured against the recipe and every rule its claims judge it against."""
    checks = [c for c in study.claims if c.claim in self.rungs[arm]]  # rate_check.BeatsRule's
    found, joint, _ = checks[0].reading(data) if checks else ({}, None, [])
    if not found or joint is None:
      return f"Rung {arm}: not located."
    m = stats.one_sample(list(found.values()))
    err = lambda e: f"error x{math.exp(abs(m.diff - e.diff)):.2f}"
    said = {v.claim: v.verdict.lower() for v in verdicts}
    return (f"Rung {arm} ({kinds.words({short(k): v for k, v in data.points(arm)[0]})}; seeds of its own): "
            f"measured {joint.text(m)}; " + "; ".join(
                f"{c.rule_name()} {joint.text(c.rival(data, joint).recipe)} ({err(c.rival(data, joint).recipe)})"
                for c in checks)
            + f"; the recipe {joint.text()} ({err(joint.recipe)}); against "
            + ", ".join(f"{c.rule_name()}: {said.get(c.claim, 'not judged')}" for c in checks) + ".")

  def answer(self, study: Study, data: kinds.Data, verdicts: list[claims.Verdict]) -> tuple[float, str, str, list]:
    """``(rate, how, why, reaches)``: how is ``measured``, ``checked`` or ``default`` (the class docstring)."""
    found = (kinds.point_optima(data.runs(self.measured), self.measured, "its point", "bracketed")[0]
             if self.measured else {})
    if len(found) >= 2:
      return (math.exp(stats.one_sample(list(found.values())).diff), "measured",
              f"its optimum measured at its own shape ({self.measured}): {rate_check.Joint(found, found).text()} "
              f"over {len(found)} seeds", [])
    base = self.recipe.base(data)
    whole = rate_check.predict(self.recipe, data) if base else None
    if whole is None:
      return DEFAULT_RATE, "default", (f"the literature's default, {DEFAULT_SOURCE}: the recipe's base and legs "
                                       f"were not located at this scale"), []
    reaches = self.reaches(study, data, verdicts)
    carried = [r for r in reaches if r.carried]
    checked = rate_check.predict(self.recipe, data, self.at(base, reaches)) if carried else None
    shape = "the recipe carried " + ", ".join(f"{r.arm} to {short(r.axis)} {base[r.axis] * 2 ** r.carried:.4g} "
                                              f"(rung {r.rung})" for r in carried)
    if checked is not None and (len(carried) == len(reaches) or not self.every_leg):
      return (math.exp(checked.recipe.diff), "checked", f"the rate the checked legs support: {checked.text()}, "
              f"the t interval over seeds of {shape}", reaches)
    if checked is not None:
      return DEFAULT_RATE, "default", (
          f"no rung checked {' or '.join(r.arm for r in reaches if not r.carried)}, so the literature's "
          f"default, {DEFAULT_SOURCE}; the rate the checked legs support, {checked.text()}, is {shape}, with the "
          f"other legs flat from the base"), reaches
    return DEFAULT_RATE, "default", (f"no rung checked a leg, so the literature's default, {DEFAULT_SOURCE}; the "
                                     f"study's estimate, the whole recipe unchecked: {whole.text()}"), reaches

  @staticmethod
  def at(base: dict, reaches: list[Reach]) -> dict:
    """The point each leg is carried to: its axis' base value times 2 ** the doublings carried."""
    return {r.axis: base[r.axis] * 2 ** r.carried for r in reaches}

  def unchecked_line(self, data: kinds.Data, reaches: list[Reach]) -> str:
    """What was not checked: each leg's doublings left, and what the whole recipe would move the rate there."""
    base, whole = self.recipe.base(data), rate_check.predict(self.recipe, data)
    slopes = {row.axis: row.slope.diff for row in legs(self.recipe, data)}
    left = [r for r in reaches if abs(r.unchecked) > 1e-9]
    value = lambda r, d: f"{base[r.axis] * 2 ** d:.4g}"
    if not left:
      return f"Every leg checked as far as {self.recipe.config}."
    return ("Not checked, so not carried: " + "; ".join(
        f"{r.arm}: {short(r.axis)} {abs(r.unchecked):.1f} of {abs(r.whole):.1f} doublings ({value(r, r.carried)} to "
        f"{value(r, r.whole)}; its leg {r.verdict.lower()}, {slopes.get(r.axis, math.nan) * r.unchecked:+.2f} "
        f"{kinds.LOG_RATE} there)" for r in left)
        + f". The whole recipe carried to {self.recipe.config}, unchecked: {whole.text()} (it omits "
          f"{', '.join(OMITTED)}).")

  def page_lines(self, study: Study, data: kinds.Data, verdicts: list[claims.Verdict]) -> tuple[list[str], dict]:
    """The answer's lines (the report opens with them) and its numbers for results.json."""
    rate, how, why, reaches = self.answer(study, data, verdicts)
    config = self.recipe.config
    out = [f"**Answer: train {config} at {rate:.3g}** ({why}).", "",
           f"    {command(config, self.recipe.carry, rate)}", ""]
    out += [self.unchecked_line(data, reaches), ""] if reaches else []
    out += [line for arm in self.rungs if data.points(arm) for line in (self.rung_line(study, data, arm, verdicts), "")]
    return out, {"rate": rate, "how": how, "command": command(config, self.recipe.carry, rate),
                 "carried": {r.axis: r.carried for r in reaches}, "unchecked": {r.axis: r.unchecked for r in reaches}}


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
  answer: Answer | Carried | None = None
  devices: Mapping[str, DeviceTime] = dataclasses.field(default_factory=dict)

  def arm_of(self, name: str) -> str:
    """The arm of that name, else the one whose cells carry it (``Arm.also``): a leg with an arm of its own
    is planned at its own seeds, not at the base's that also carry its name."""
    return name if name in {a.name for a in self.arms} else super().arm_of(name)

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
      lines, results = self.answer.page_lines(self, self.data(cells), page.verdicts)
      page.headline = lines
      page.results["answer"] = results
    return page

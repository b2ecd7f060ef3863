"""The muTransfer ladder's power plan, computed after the base stage and before the ladder runs, from the spreads then known and the measured costs.

For each claim of ``rules.py``: the per-seed quantity its test is on, that quantity's planned
standard deviation and where it comes from, the effect the plan sizes it for (the
literature's, or the smallest the claim cares about, stated), and the seeds a test at the
family's level needs for 80 % power (``research/power.py``: Holm over the family, planned
at ``alpha / m``, the first-ranked test's level; a one-sided test is planned as two-sided at
that level, which is conservative). ``no_cost`` is an intersection-union test over the widths
where muP and sp differ, so each width is planned at power ``0.8 ** (1 / widths)``.

**The spreads** (rough: 3 seeds each, the seeds needed at their one-sided 80 % upper bound
printed beside): the tuned muP has been trained only at its base width (the base stage,
``results/mup_base-cpu``: readout 8, attention 1, seeds 200-202); the earlier proxies
ladder (``results/proxies-cpu``, seeds 0-2) trained sp across widths, and its muP arm
(base readout 1) left the unigram plateau at different steps in different seeds, a spread the
tuned base does not have (0.03 nats of best loss at the base against 0.25-0.36 there), so it
is not used:

- ``transfer``: |slope sp| - |slope muP| per doubling; SD from the proxies ladder's sp slopes
  and, for muP, the base stage's per-seed log-optimum SD propagated to a least-squares slope
  over the ladder's widths (SD / sqrt(sum (log2 w - mean)^2)), the two added in quadrature;
- ``flat``: muP's slope times the span: that slope SD times the span;
- ``no_cost``: muP - sp best loss at one width: sqrt(2) x the base stage's per-seed best-loss
  SD (two arms, independent but for the shared data order, which only narrows it);
- ``wider``: the slope of the loss at a fixed rate: the proxies ladder's sp per-seed slopes
  at its rate nearest sp's base optimum (sp standing in for the tuned muP);
- ``qk``: the proxies ladder's per-seed sensitivity gap sp - sp+qk at d128.

**The costs**: per group (an arm at a width) and seed, its rates x steps x the proxies
ladder's measured seconds per model-step at that width, plus its share of the fixed cost per
program, measured from the base stage (its wall time less its modelled model-steps, over its
programs). Claims are admitted cheapest first while the union of the groups they need fits
the budget; the rest are **not powered**, declared here before the run. The outcome is frozen
in ``grid.py`` (seeds, widths, rates) and ``rules.py`` (``NOT_POWERED``, ``COST_MARGIN``); a
test recomputes the plan and checks the frozen numbers against it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

from research import cells as cells_lib
from research import curves
from research import power
from research import stats
from research.power import ClaimPlan
from experiments.studies.mutransfer import rules
from experiments.studies.proxies import grid as ladder_grid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROXIES = os.path.join("results", "proxies-cpu")
BASE_STAGE = os.path.join("results", "mup_base-cpu")
BASE_STAGE_TIME_MINUTES = 33.9  # the base stage's measured wall time (its REPORT.md)
TOTAL_BUDGET_MINUTES = 120.0  # issue 29's guide: the base stage and the ladder together
# The ladder's budget: at the guide's 86 minutes left after the base stage, neither transfer
# nor no_cost is powered (8-9 seeds of the 16 sp and muP groups, 83-94 minutes each, beside
# the flat and wider claims); 100 minutes powers both. So the two stages together are planned
# at about 134 minutes, stated in the report.
BUDGET_MINUTES = 100.0
POWER = 0.8
MIN_SEEDS = 5  # every judged arm: leave-one-seed-out is informative from 5
WIDTHS = (32, 64, 128, 256)  # 8x; the base width first
RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
QK_WIDTH = 128
STEPS = 200
MEMBERS_PER_PROGRAM = 24


def group(arm: str, width: int) -> str:
  return ladder_grid.group_name(arm, width)


LADDER_SP = tuple(group(rules.REFERENCE, w) for w in WIDTHS)
LADDER_MUP = tuple(group(rules.MUP, w) for w in WIDTHS)
QK_GROUPS = (group(rules.REFERENCE, QK_WIDTH), group(rules.QK, QK_WIDTH))


def claims(cost_margin: float = rules.COST_MARGIN) -> tuple[ClaimPlan, ...]:
  n_cost = len(WIDTHS) - 1  # at the base width muP is sp, to the bit: no test there
  return (
      ClaimPlan("transfer", "under muP the optimal rate moves less with width than under sp",
                "|slope sp| - |slope muP| of log(fitted optimum) per doubling of d_model",
                "directed", 0.35, None,
                "half the movement the proxies ladder measured under sp (its per-seed slopes, "
                "mean -0.70 per doubling), with muP flat (Yang et al. 2022): a muP optimum that "
                "still moves half as fast as sp's is detected", LADDER_SP + LADDER_MUP),
      ClaimPlan("flat", f"under muP the optimal rate moves by less than a factor "
                f"{rules.FLAT_FACTOR:g} over the ladder",
                "muP's slope of log(fitted optimum) per doubling x the ladder's span",
                "equivalent", 0.0, math.log(rules.FLAT_FACTOR),
                f"Yang et al. 2022: the muP optimum stays put (true 0); flat = within a factor "
                f"{rules.FLAT_FACTOR:g} over the ladder", LADDER_MUP),
      ClaimPlan("no_cost", f"at every width muP's best loss is within {cost_margin} nats of sp's "
                f"or better", "fitted best loss, muP - sp, at one width", "directed",
                cost_margin, None,
                f"Yang et al. 2022 find muP at least as good: true difference 0, so "
                f"{cost_margin} from the margin; each of the {n_cost} widths above the base "
                f"at power {POWER:g}^(1/{n_cost}) (an intersection-union test)",
                LADDER_SP + LADDER_MUP, power=POWER ** (1 / n_cost)),
      ClaimPlan("wider", "under muP a wider model is not worse at a fixed rate",
                "slope of the final loss per doubling of d_model at a fixed rate", "directed",
                0.05 + rules.WIDER_MARGIN, None,
                f"half the improvement per doubling the proxies ladder measured under sp at a "
                f"fixed rate (-0.096 nats): a true slope of -0.05, {0.05 + rules.WIDER_MARGIN:g} "
                f"from the bound +{rules.WIDER_MARGIN}", LADDER_MUP),
      ClaimPlan("qk", "qk-LayerNorm lowers the learning-rate sensitivity at the widest rung",
                f"sensitivity sp - sp+qk at d{QK_WIDTH} (Wortsman et al. 2023)", "directed",
                0.1, None, "smallest the claim cares about: 0.1 nats, twice the sensitivity "
                "equivalence margin (Wortsman et al. 2023 report differences of tenths of a nat); "
                "the norm x MLP study's sensitivity claim is planned the same way", QK_GROUPS),
  )


@functools.lru_cache(maxsize=1)
def _records(path: str) -> tuple[dict, ...]:
  return tuple(cells_lib.load(os.path.join(ROOT, path))[1])


def spreads() -> dict[str, power.Spread]:
  """Each claim's planned per-seed SD (the module's docstring says from what)."""
  from experiments.studies.proxies import report as proxies  # pylint: disable=import-outside-toplevel
  rows = [proxies.to_row(c) for c in _records(PROXIES)]
  chosen = read_choice()
  base = [cells_lib.to_run(c) for c in _records(BASE_STAGE)
          if c["overrides"].get("model.readout_multiplier") == chosen["readout_multiplier"]
          and c["overrides"].get("model.attention_multiplier") == chosen["attention_multiplier"]]
  sp_slopes = power.Spread.of(list(rules.slopes(rows, rules.REFERENCE)[0].values()))
  base_opt = power.Spread.of(list(curves.log_optima(base).values()))
  base_best = power.Spread.of(list(curves.best_losses(base).values()))
  x = [math.log2(w) for w in WIDTHS]
  sxx = sum((v - sum(x) / len(x)) ** 2 for v in x)
  mup_slope_sd = base_opt.sd / math.sqrt(sxx)
  span = math.log2(WIDTHS[-1] / WIDTHS[0])
  n = min(sp_slopes.n, base_opt.n)
  wider = rules.check_wider([dataclasses.replace(r, arm=rules.MUP) for r in rows
                             if r.arm == rules.REFERENCE])
  qk = rules.check_qk(rows)
  return {
      "transfer": power.Spread(math.hypot(sp_slopes.sd, mup_slope_sd), n,
                               abs(sp_slopes.mean)),
      "flat": power.Spread(mup_slope_sd * span, base_opt.n),
      "no_cost": power.Spread(math.sqrt(2) * base_best.sd, base_best.n),
      "wider": power.Spread(_sd_of_effect(wider.effect), wider.effect.n, wider.effect.diff),
      "qk": power.Spread(_sd_of_effect(qk.effect), qk.effect.n, qk.effect.diff),
  }


def _sd_of_effect(e: stats.Effect) -> float:
  """A one-sample effect's per-seed SD, from its interval's half-width and t quantile."""
  from scipy import stats as sps  # pylint: disable=import-outside-toplevel
  return (e.hi - e.lo) / 2 / sps.t.ppf(1 - stats.ALPHA / 2, e.df) * math.sqrt(e.n)


def read_choice() -> dict:
  from experiments.studies.mutransfer import grid  # pylint: disable=import-outside-toplevel
  return grid.base_choice(os.path.join(ROOT, BASE_STAGE, "results.json"))


def seconds_per_program() -> float:
  """Measured: the base stage's fixed cost per program (its wall time less its modelled
  model-steps, over its programs)."""
  cells = _records(BASE_STAGE)
  steps = sum(c["steps"] * ladder_grid.SECONDS_PER_MODEL_STEP_CPU[c["overrides"]["model.d_model"]]
              for c in cells)
  programs = len({c["group"] for c in cells})
  return (BASE_STAGE_TIME_MINUTES * 60 - steps) / programs


def minutes_per_seed(per_program: float) -> dict[str, float]:
  """Per group, what one more seed costs (minutes): its rates' model-steps and its share of
  the programs' fixed cost."""
  out = {}
  for arm in (rules.REFERENCE, rules.MUP, rules.QK):
    for w in WIDTHS:
      out[group(arm, w)] = (len(RATES) * STEPS * ladder_grid.SECONDS_PER_MODEL_STEP_CPU[w]
                            + len(RATES) / MEMBERS_PER_PROGRAM * per_program) / 60
  return out


@dataclasses.dataclass
class Plan(power.Totals):
  claims: list[power.Planned]
  alpha: float
  family: int
  seeds: dict[str, int]  # per group
  minutes: dict[str, float]  # per group
  seconds_per_program: float
  budget_minutes: float

  def ladder_seeds(self) -> int:
    """The seeds of the sp and muP ladder (one number: they are paired by seed)."""
    return max([self.seeds.get(g, 0) for g in LADDER_SP + LADDER_MUP] or [0])


def make(cost_margin: float = rules.COST_MARGIN, budget: float = BUDGET_MINUTES) -> Plan:
  per_program = seconds_per_program()
  per_seed = minutes_per_seed(per_program)
  planned, seeds, alpha, family = power.admit(claims(cost_margin), spreads(), per_seed, budget,
                                              MIN_SEEDS, POWER, stats.ALPHA)
  # sp and muP are one ladder, paired by seed: every ladder group at the ladder's seeds.
  n = max([seeds.get(g, 0) for g in LADDER_SP + LADDER_MUP] or [0])
  if n:
    seeds.update({g: n for g in LADDER_SP + LADDER_MUP})
  # The comparisons of claims without power still exist (reported, not judged): their own
  # groups at the most seeds the rest of the budget allows (at most the ladder's, at least 3;
  # else not run).
  own = sorted({g for c in planned if not c.powered for g in c.plan.arms if g not in seeds})
  left = budget - sum(per_seed[g] * k for g, k in seeds.items())
  cost = sum(per_seed[g] for g in own)
  k = min(n or MIN_SEEDS, int(left // cost)) if cost else 0
  if k >= 3:
    seeds.update({g: k for g in own})
  minutes = {g: per_seed[g] * k for g, k in seeds.items()}
  return Plan(planned, alpha, family, seeds, minutes, per_program, budget)


@functools.lru_cache(maxsize=1)
def compute() -> Plan:
  """The frozen plan (computed once per process)."""
  return make()


def lines(plan: Plan) -> list[str]:
  """The plan as markdown: the table per claim, the seeds per group, the cost."""
  return [f"Power plan (fixed before the run; `experiments/studies/mutransfer/plan.py`): each "
          f"claim's test at level {stats.ALPHA} / {plan.family} = {plan.alpha:.4f} (Holm over the "
          f"family of the {plan.family} powered claims, planned at the first-ranked test's level) "
          f"and power {POWER:.0%} (no_cost: per width, so that all three widths pass together "
          f"at {POWER:.0%}), for the effect stated. Spreads: 3 seeds each, rough (in brackets the "
          f"seeds needed at the SD's one-sided 80 % upper bound); their sources are in the "
          f"plan module's docstring. Cost: the proxies ladder's measured seconds per model-step "
          f"per width and {plan.seconds_per_program:.0f} s fixed per program (the base stage's); "
          f"'minutes' is the claim's groups at its seeds alone. Budget "
          f"{plan.budget_minutes:.0f} minutes (issue 29's {TOTAL_BUDGET_MINUTES:.0f} for both "
          f"stages, less the base stage's {BASE_STAGE_TIME_MINUTES:.0f}); refinement rounds at "
          f"an edge optimum come on top.", "",
          *power.table_lines(plan.claims, plan.seeds, plan.minutes, plan.budget_minutes, "planned")]

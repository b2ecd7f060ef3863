"""The confirmatory study's power plan, computed before its run from the exploratory study's per-seed spread and measured costs.

For each confirmatory claim: the per-seed quantity it tests, that quantity's standard
deviation over the exploratory study's seeds (``results/norm_mlp-cpu``, 3 seeds: a
rough figure, stated as such), the effect the plan sizes it for (the literature's, or the
smallest the claim cares about, with its source), the seeds a test at the family's level
needs for 80 % power (``research/power.py``; Holm over the family, planned at
``alpha / m``, the first-ranked test's level), and what those seeds cost: the arms the claim
needs, at the measured seconds per base-shape model-step (the exploratory cells' wall
times). Claims are admitted cheapest first while the union of the arms they need fits the
budget; the rest are **not powered**, declared here before the run. The plan's outcome is
frozen in ``grid.py`` (seeds per arm) and ``rules.py`` (``NOT_POWERED``); a test recomputes
it and checks the frozen numbers against it.
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXPLORATORY = os.path.join("results", "norm_mlp-cpu")
BUDGET_MINUTES = 120.0  # of training on an idle 2-core CPU
POWER = 0.8
MIN_SEEDS = 5  # every judged arm gets at least this many: leave-one-seed-out is informative from 5


ClaimPlan, Planned, upper_sd = power.ClaimPlan, power.Planned, power.upper_sd


# The claims, the effect each is planned for, and the groups it needs (grid.py's names).
LOG_GROWTH = math.log(1.5)
CLAIMS = (
    ClaimPlan("init_post", "at init under Xavier, post-LN's gradient grows toward the output",
              "log(MLP grad norm last / first layer), post-LN, Xavier, step 0", "directed",
              math.log(2.0) - LOG_GROWTH, None,
              "smallest the claim cares about: last/first = 2, beyond the growth bound 1.5 "
              "(Xiong et al. 2020, Fig. 3, show growth with layer index, no single figure)",
              ("xavier-post",)),
    ClaimPlan("init_pre_flat", "at init under Xavier, pre-LN's gradient is nearly flat",
              "log(MLP grad norm last / first layer), pre-LN, Xavier, step 0", "equivalent",
              0.0, LOG_GROWTH, "Xiong et al. 2020, Thm. 1: pre-LN's gradient norm does not "
              "depend on the layer (true ratio 1); flat = within 1/1.5..1.5", ("xavier-pre",)),
    ClaimPlan("init_resid", "at init under Xavier, pre-LN's residual stream grows with depth",
              "log(residual norm after the last / the first block), pre-LN, Xavier, step 0",
              "directed", math.log(math.sqrt(4.0 / 1.5)) - LOG_GROWTH, None,
              "Xiong et al. 2020, Lemma 1: (1 + l/2) d <= E|x_l|^2 <= (1 + 3l/2) d for pre-LN; "
              "block 6 over block 1 is sqrt(4/1.5) = 1.63 by the lower bounds (2.0 by the upper "
              "ones), planned at the smaller, just beyond the growth bound 1.5", ("xavier-pre",)),
    ClaimPlan("warmup_post", "without warmup, post-LN is penalised",
              "fitted best loss, post-LN without - with the long warmup", "directed", 0.25, None,
              "Xiong et al. 2020: post-LN without warmup fails to train (BLEU 8.45 against ~34); "
              "planned at 0.25 nats, under a third of the gap between a trained post-LN and the "
              "unigram plateau here", ("post-none", "post-long")),
    ClaimPlan("warmup_pre", "without warmup, pre-LN is not penalised",
              "fitted best loss, pre-LN without - with the long warmup", "equivalent", 0.0, 0.05,
              "Xiong et al. 2020: pre-LN trains without warmup to the same quality (true "
              "penalty 0); margin 0.05 nats, about 1 % of the loss", ("pre-none", "pre-long")),
    ClaimPlan("warmup_interaction", "post-LN's warmup penalty exceeds pre-LN's",
              "(post none - post long) - (pre none - pre long), fitted best losses", "directed",
              0.25, None, "the two halves above: 0.25 nats for post-LN, 0 for pre-LN",
              ("post-none", "post-long", "pre-none", "pre-long")),
    ClaimPlan("sensitivity", "post-LN is more sensitive to the learning rate",
              "Wortsman et al.'s sensitivity over the one grid, post-LN - pre-LN", "directed",
              0.1, None, "smallest the claim cares about: twice the 0.05-nat equivalence margin "
              "(Wortsman et al. 2023 report differences of tenths of a nat)",
              ("post-long", "pre-long")),
    ClaimPlan("smaller_rate", "post-LN needs a smaller learning rate",
              "log fitted optimal rate, post-LN - pre-LN (long warmup)", "directed",
              math.log(2.0), None, "smallest the claim cares about: a factor 2 (beyond the "
              "factor-1.5 equivalence margin of curves.RATE_FACTOR)", ("post-long", "pre-long")),
    ClaimPlan("swiglu", "SwiGLU beats GELU at equal size",
              "fitted best loss over the shared rates, SwiGLU (r = 8/3) - GELU (r = 4)",
              "directed", 0.04, None, "Shazeer 2020: about 0.04 nats", ("swiglu", "pre-long")),
    ClaimPlan("matched", "parameter-matched MLP ratios perform alike",
              "fitted best loss over the shared rates, matched r - r = 4 (r = 2, 8)",
              "equivalent", 0.0, 0.02 * 4.6, "Kaplan et al. 2020, Fig. 5: a few percent: "
              "within 2 % of the r = 4 loss (about 4.6 nats here), true difference 0",
              ("matched2", "matched8", "pre-long")),
    ClaimPlan("depth", "post-LN's trouble grows with depth",
              "(post - pre at 12 layers) - (post - pre at 6 layers), fitted best losses",
              "directed", 0.1, None, "Liu et al. 2020 give no figure at this size; the smallest "
              "the claim cares about, 0.1 nats; its spread is the warmup interaction's (a "
              "difference of differences of the same kind; no exploratory depth arms)",
              ("deep-post", "deep-pre", "post-long", "pre-long")),
)


@functools.lru_cache(maxsize=2)
def exploratory_runs(path: str = EXPLORATORY) -> tuple[tuple[curves.Run, ...], tuple[dict, ...]]:
  """The committed exploratory study's runs and cell records (read once per process)."""
  _, cells, _ = cells_lib.load(os.path.join(ROOT, path))
  return tuple(cells_lib.to_run(c) for c in cells), tuple(cells)


def _diff(a: dict, b: dict) -> dict:
  return {s: a[s] - b[s] for s in set(a) & set(b)}


def exploratory_values(runs: list[curves.Run]) -> dict[str, dict[int, float]]:
  """Per claim, the per-seed values of its quantity in the exploratory study."""
  arms = curves.by_arm(runs)
  xav = lambda norm, field: {r.seed: math.log(getattr(r, field)) for r in runs
                             if r.init == "xavier" and r.norm == norm and getattr(r, field) > 0}
  best = {k: curves.best_losses(arms[f"norm:{k}"]) for k in ("post/none", "post/long", "pre/none", "pre/long")}
  wpost, wpre = _diff(best["post/none"], best["post/long"]), _diff(best["pre/none"], best["pre/long"])
  post, pre = arms["norm:post/long"], arms["norm:pre/long"]
  rates = curves.base_rates(post, pre)
  gelu = curves.best_losses(arms["mlp_width:4"])
  matched = [_diff(curves.best_losses(arms[f"mlp_matched:{r}"]), gelu) for r in (2, 8)]
  inter = _diff(wpost, wpre)
  return {"init_post": xav("post", "grad_ratio_init"), "init_pre_flat": xav("pre", "grad_ratio_init"),
          "init_resid": xav("pre", "resid_ratio_init"), "warmup_post": wpost, "warmup_pre": wpre,
          "warmup_interaction": inter,
          "sensitivity": _diff(curves.sensitivity(post, rates), curves.sensitivity(pre, rates)),
          "smaller_rate": _diff(curves.log_optima(post), curves.log_optima(pre)),
          "swiglu": _diff(curves.best_losses(arms["swiglu"]), gelu),
          # the larger of the two pairs' spreads (both must be shown equivalent)
          "matched": max(matched, key=lambda d: power.sd_of(d.values())),
          "depth": inter}


def seconds_per_model_step(cells: list[dict]) -> float:
  """Measured: the trained programs' wall time over their base-shape model-steps (the
  exploratory study's cells, the short Xavier programs apart: their time is a compile)."""
  from experiments.studies.norm_mlp_confirm import grid  # pylint: disable=import-outside-toplevel
  programs: dict[str, list[float]] = {}
  for c in cells:
    if c.get("group", "").startswith("xavier"):
      continue
    p = programs.setdefault(c["group"], [0.0, 0.0])
    p[0] = max(p[0], c["wall_time_s"])
    p[1] += c["steps"] * grid.relative_cost(c["overrides"])
  return sum(p[0] for p in programs.values()) / sum(p[1] for p in programs.values())


def seconds_per_init_member(cells: list[dict]) -> float:
  """Measured: one member of a short Xavier program (its compile shared over its members)."""
  programs: dict[str, list[float]] = {}
  for c in cells:
    if c.get("group", "").startswith("xavier"):
      p = programs.setdefault(c["group"], [0.0, 0])
      p[0], p[1] = max(p[0], c["wall_time_s"]), p[1] + 1
  return max(p[0] / p[1] for p in programs.values())


@dataclasses.dataclass
class Plan(power.Totals):
  claims: list[Planned]
  alpha: float  # each claim's planned level (ALPHA / family size)
  family: int
  seeds: dict[str, int]  # per group
  minutes: dict[str, float]  # per group
  seconds_per_model_step: float
  seconds_per_init_member: float
  budget_minutes: float


def make(runs: list[curves.Run], cells: list[dict], budget: float = BUDGET_MINUTES) -> Plan:
  """The plan: each claim's seeds at the family's level, admitted cheapest first within
  ``budget`` minutes; the family shrinks to the admitted claims and the seeds are
  recomputed until nothing changes."""
  from experiments.studies.norm_mlp_confirm import grid  # pylint: disable=import-outside-toplevel
  values = exploratory_values(runs)
  sps_, spi = seconds_per_model_step(cells), seconds_per_init_member(cells)
  per_seed = grid.minutes_per_seed(sps_, spi)
  spreads = {p.key: power.Spread.of(list(values[p.key].values())) for p in CLAIMS}
  planned, group_seeds, _, family = power.admit(CLAIMS, spreads, per_seed, budget, MIN_SEEDS,
                                                POWER, stats.ALPHA)
  # The comparisons of claims without power still exist (reported, not judged): their own
  # arms, all at one number of seeds, the most the rest of the budget allows (at most the
  # norm arms', at least 3; else not run). Depth is out whatever is left (its cost is stated).
  base = group_seeds.get("pre-long", MIN_SEEDS)
  own = sorted({a for c in planned if not c.powered and c.plan.key != "depth"
                for a in c.plan.arms if a not in group_seeds})
  left = budget - sum(per_seed[a] * n for a, n in group_seeds.items())
  cost = sum(per_seed[a] for a in own)
  n = min(base, int(left // cost)) if cost else 0
  if n >= 3:
    group_seeds.update({a: n for a in own})
  minutes = {a: per_seed[a] * n for a, n in group_seeds.items()}
  return Plan(planned, stats.ALPHA / family, family, group_seeds, minutes, sps_, spi, budget)


def compute() -> Plan:
  runs, cells = exploratory_runs()
  return make(list(runs), list(cells))


def lines(plan: Plan) -> list[str]:
  """The plan as markdown: the table per claim, the seeds per arm, the cost, depth."""
  from experiments.studies.norm_mlp_confirm import grid  # pylint: disable=import-outside-toplevel
  per_seed = grid.minutes_per_seed(plan.seconds_per_model_step, plan.seconds_per_init_member)
  out = [f"Power plan (fixed before the run; `experiments/studies/norm_mlp_confirm/plan.py`): "
         f"each claim's test at level {stats.ALPHA} / {plan.family} = {plan.alpha:.4f} (Holm over "
         f"the family of the {plan.family} powered claims, planned at the first-ranked test's "
         f"level) and power {POWER:.0%}, for the effect stated; the spread is the exploratory "
         f"study's per-seed SD (3 seeds: rough; in brackets the seeds needed at its one-sided "
         f"80 % upper bound). Cost: {plan.seconds_per_model_step:.4f} s per base-shape "
         f"model-step and {plan.seconds_per_init_member:.1f} s per Xavier init member, measured "
         f"from the exploratory cells' wall times; 'minutes' is the claim's arms at its seeds "
         f"alone (arms are shared between claims). Budget {plan.budget_minutes:.0f} minutes; "
         f"every judged arm has at least {MIN_SEEDS} seeds.", "",
         *power.table_lines(plan.claims, plan.seeds, plan.minutes, plan.budget_minutes, "exploratory")]
  deep = per_seed["deep-post"] + per_seed["deep-pre"]
  base6 = per_seed["post-long"] + per_seed["pre-long"]
  d = next(c for c in plan.claims if c.plan.key == "depth")
  out += [f"Depth (Liu et al. 2020: post-LN's trouble grows with depth): the base arms are 6 "
          f"layers ({base6:.1f} minutes per seed for post- and pre-LN over the grid); 12-layer "
          f"arms cost {deep:.1f} minutes per seed (twice the layers), "
          f"{deep * (d.seeds or power.MAX_SEEDS):.0f} minutes at the "
          f"{d.seeds or f'>{power.MAX_SEEDS}'} seeds the claim needs; "
          f"{'in' if d.powered else '**out**: it does not fit the budget beside the claims above'}.", ""]
  return out

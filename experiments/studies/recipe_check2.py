"""andrea120m's learning rate, checked where the recipe extrapolates (issue 71): a rung past the legs' data, warmup apart.

  python -m experiments.sweep --sweep=recipe_check2 --scale=cpu --dry_run     # the plan: groups, seeds, power, minutes
  python -m experiments.sweep --sweep=recipe_check2 --scale=cpu               # the confirmatory run (pilot first)
  python -m experiments.sweep --sweep=recipe_check2 --scale=gpu --dry_run     # andrea120m's own shape, one H100
  python -m experiments.report --sweep_dir=runs/sweeps/recipe_check2-<scale> --out=docs/studies/recipe_check2-<scale>

``recipe_check.py`` (kept unchanged so that its committed report regenerates) passed its
held-out check, but its rung moved steps and batch one doubling *down*, inside the legs' data,
while its answer carried the horizon leg 4.6 doublings and the batch leg 6 doublings *up*; a
recipe of width and depth alone passed the same check; and its horizon leg grew the warmup
with the steps, so the rise it measured was warmup's (issue 71). Here, around the same base
(d128, 2 heads of 64, 2 layers, context 64, vocabulary 512, 200 steps of 16 sequences, warmup
8), under sp:

- **The legs**, one axis at a time, each on its own arm: width 64, 128, 256 (heads = d_model /
  64), depth 2 and 4, steps 100, 200, 400 at the base's **fixed** warmup of 8 steps (the horizon
  leg), sequences 8, 16, 32 at the base's steps and warmup (the batch leg), and warmup 8, 16, 32
  steps at the base's 200 steps (warmup's own leg: andrea120m warms up over 200 of its 5,000
  steps, 4 %, ``experiments/configs/common.py``). The recipe carries all five
  (``rate_check.predict``: per seed, its base plus each leg's slope times the doublings).
- **Every leg judged**: each leg is a ``Slope`` claim in one Holm family, its power planned at
  the smallest slope that moves the answer by the margin over the doublings a rung checks it
  (the margin over 1 doubling of width and depth, over 2 of steps, batch and warmup), at the
  per-seed spreads the committed cells (results/recipe_check-cpu) showed.
- **The rung past the data** (``far``): 800 steps of 64 sequences, warmup 32 (4 % of its run, as
  andrea120m's): one doubling more steps and sequences than any leg trained, and the warmup leg's
  longest warmup, on seeds of its own. It sits at d64, inside the width leg, so that keeping the base rate and the recipe of
  width and depth alone part there (the committed slopes put them 0.35 apart, the whole recipe
  a further 0.8 up); judged against both (``rate_check.BeatsRule``, margin log sqrt 2).
- **The rung for width and depth** (``held``): d256, 4 layers, 100 steps of 8 sequences, warmup
  4 (the committed rung's shape, on seeds of its own), judged against keeping the base rate.
- **The answer** (``Carried``, ``experiments/readings/recipe_check.py``) carries a leg only as
  far as a rung all of whose checks passed moved it toward andrea120m, and only when the leg's
  own claim was judged; it names every leg left unchecked and what the whole recipe would have
  carried there; where no leg is carried it is GPT-3 125M's 6e-4, the study's estimate beside it.
  At the gpu scale (andrea120m's own shape at a short horizon) the measured optimum is the answer.

Seeds: legs 1500-1507 (width, depth, horizon, warmup), 1500-1512 (the base and the batch leg,
whose spread is the widest), rung ``far`` 1520-1527, rung ``held`` 1530-1537, gpu 1540-1541: no
earlier study used them (``research.registry.used_seeds``; tests/test_recipe_check2.py).
"""

import math

from experiments.readings.recipe_check import Carried, CheckedStudy, DeviceTime
from research import kinds
from research import ladder
from research import rate_check
from research.power import Spread
from research.study import Arm, Grid

W, L, S, B, WU = "model.d_model", "model.n_layer", "train.steps", "train.batch_size", "train.warmup_steps"
HEAD = 64  # the ANDREA family's d_head
# Each leg: its arm and the axis it moves, every other axis at the base's value.
LEGS = {"width": W, "depth": L, "horizon": S, "batch": B, "warmup": WU}


def points(base: dict, legs: dict, rungs: dict) -> dict:
  """Per arm, the grid points it trains (axis -> values): the base, each leg along its axis, each rung."""
  at = {a: (v,) for a, v in base.items()}
  out = {"base": at, **{arm: {**at, axis: legs[axis]} for arm, axis in LEGS.items()}}
  return {**out, **{name: {a: (v,) for a, v in p.items()} for name, p in rungs.items()}}


def scale(s: dict, base: dict, legs: dict, rungs: dict, head: int, **grid) -> Grid:
  """A scale's grid: the base once (its cells serve every leg), each leg off its base value, the rungs."""
  arms = points(base, legs, rungs)
  values = lambda a: tuple(sorted({v for p in arms.values() for v in p[a]}))
  return Grid(shared={**ladder.ladder_overrides(s), "model.n_head": base[W] // head},
              axes={a: values(a) for a in base},
              linked={W: {w: {"model.n_head": w // head} for w in values(W)},
                      S: {n: {"train.eval_every": n, "checkpoint.every": n, "diagnostics.every": n}
                          for n in values(S)}},
              arm_axes=arms, arms=tuple(arms), **grid)


# Seconds per model-step at 16 sequences by (d_model, n_layer): each group's member wall time over
# its steps in recipe_check-cpu's 16 programs (compiles, evaluations and probes included; the
# shared 2-core CPU), scaled with the sequences per step; d256 x 4 from its 8-sequence rung.
MEASURED = {(64, 2): 0.0105, (128, 2): 0.020, (128, 4): 0.069, (256, 2): 0.078, (256, 4): 0.142}


def seconds_per_model_step(o) -> float:
  return MEASURED[(o[W], o[L])] * o[B] / 16


CPU_BASE = {W: 128, L: 2, S: 200, B: 16, WU: 8}
CPU_LEGS = {W: (64, 256), L: (4,), S: (100, 400), B: (8, 32), WU: (16, 32)}
CPU_RUNGS = {"far": {W: 64, L: 2, S: 800, B: 64, WU: 32}, "held": {W: 256, L: 4, S: 100, B: 8, WU: 4}}
# The smoke scale's toy models learn only from about 384 steps (recipe_check.py's note).
SMOKE_BASE = {W: 32, L: 1, S: 384, B: 8, WU: 15}
SMOKE_LEGS = {W: (16, 64), L: (2,), S: (192, 768), B: (4, 16), WU: (30, 60)}
SMOKE_RUNGS = {"far": {W: 16, L: 1, S: 1536, B: 32, WU: 60}, "held": {W: 64, L: 2, S: 192, B: 4, WU: 8}}
LEG_SEEDS = (1500, 1501, 1502, 1503, 1504, 1505, 1506, 1507)
WIDE_SEEDS = LEG_SEEDS + (1508, 1509, 1510, 1511, 1512)  # the base and the batch leg

# andrea120m at a short horizon on one H100 (the gpu scale): recipe_check.py's, on fresh seeds.
GPU = {S: 500, B: 16, WU: 20, "train.eval_every": 500, "train.eval_batches": 8, "train.log_every": 50,
       "checkpoint.every": 500, "checkpoint.keep": 1, "sample.num_samples": 0, "diagnostics.enabled": False}

TARGET = {W: 768, L: 12, S: 5000, B: 64 * 1024 // 64, WU: 200}  # andrea120m; its batch in 64-token sequences
SP = kinds.Recipe("andrea120m under sp (its own parametrisation)", "sp", "base",
                  tuple(kinds.Leg(arm, axis, TARGET[axis]) for arm, axis in LEGS.items()))
WIDTH_DEPTH = kinds.Recipe("width and depth only", "width-and-depth-only", "base",
                           tuple(kinds.Leg(arm, LEGS[arm], TARGET[LEGS[arm]]) for arm in ("width", "depth")))
CHECKS_SOURCE = ("the committed cells (results/recipe_check-cpu, bracketed optima): {}; less the margin 0.35")
FAR_NAIVE, FAR_WIDTH_DEPTH, HELD_NAIVE = (
    rate_check.BeatsRule(
        "past the legs' data, the recipe predicts the optimum better than keeping the base rate, by the margin",
        family="check", arm="far", recipe=SP, effect=0.81,
        source=CHECKS_SOURCE.format("width 64 +0.35, steps 2 x -0.03, sequences 2 x +0.14, warmup 2 x +0.29 "
                                    "(800 steps, paired) move this rung 1.16 from the base")),
    rate_check.BeatsRule(
        "past the legs' data, the recipe predicts the optimum better than width and depth alone, by the margin",
        family="check", arm="far", recipe=SP, against=WIDTH_DEPTH, effect=0.46,
        source=CHECKS_SOURCE.format("steps, sequences and warmup move this rung 0.81 from width and depth alone")),
    rate_check.BeatsRule(
        "on the wider, deeper rung, the recipe predicts the optimum better than keeping the base rate, by the margin",
        family="check", arm="held", recipe=SP, effect=0.18,
        source=CHECKS_SOURCE.format("width 256 -0.41, depth 4 -0.03, steps 100 +0.05, sequences 8 -0.10, "
                                    "warmup 4 -0.04 move this rung 0.53 from the base")))
SLOPE = dict(family="legs", of="bracketed")
LEG_CLAIMS = (
    kinds.Slope("under sp the optimal rate falls with the width at d_head 64", arm="width", axis=W,
                predict="lower", effect=0.35, source="the margin, 0.35, over the 1 doubling the held rung checks",
                **SLOPE),
    kinds.Slope("the optimal rate falls with the depth", arm="depth", axis=L, predict="lower", min_points=2,
                effect=0.35, source="the margin, 0.35, over the 1 doubling the held rung checks", **SLOPE),
    kinds.Slope("at a fixed warmup the optimal rate falls with the horizon", arm="horizon", axis=S,
                predict="lower", effect=0.17,
                source="the margin over the 2 doublings the far rung checks (Bjorck et al. 2024: a power of the "
                       "horizon)", **SLOPE),
    kinds.Slope("at fixed steps the optimal rate rises with the batch", arm="batch", axis=B, predict="higher",
                effect=0.17, source="the margin over the 2 doublings the far rung checks (Malladi et al. "
                                          "2022: the square-root rule for Adam)", **SLOPE),
    kinds.Slope("at fixed steps the optimal rate rises with the warmup", arm="warmup", axis=WU, predict="higher",
                effect=0.17, source="the margin over the 2 doublings the far rung checks (the committed "
                                          "cells: warmup 8 to 32 at 800 steps moved it +0.59)", **SLOPE),
)

STUDY = CheckedStudy(
    name="recipe_check2",
    question=("Which peak learning rate should andrea120m train with, as far as a held-out rung can see? A "
              "recipe carried from a small base along width (d_head 64), depth, steps at a fixed warmup, "
              "batch and warmup, each leg judged, checked on a rung past the legs' data (more steps and "
              "sequences than any leg trained) against keeping the base rate and against width and depth "
              "alone, and on a wider, deeper rung."),
    design=("Confirmatory: grid, seeds (legs 1500-1512, rungs 1520-1527 and 1530-1537, gpu 1540-1541: none "
            "used before), rules (research/rate_check.py), the margin and the answer's rule "
            "(experiments/readings/recipe_check.py's Carried) were committed before any cell of this study "
            "trained; the committed recipe_check cells (results/recipe_check-cpu) are exploratory for it."),
    arms=(Arm("base", label="the base: d128, 2 heads of 64, 2 layers, 200 steps (warmup 8), 16 sequences",
              also=tuple(LEGS)),
          Arm("width", label="along the width, heads = d_model / 64"),
          Arm("depth", label="along the depth"),
          Arm("horizon", label="along the steps, warmup fixed at the base's 8"),
          Arm("batch", label="along the sequences per step at the base's steps and warmup"),
          Arm("warmup", label="along the warmup steps at the base's 200 steps"),
          Arm("far", label="held out past the legs' data: more steps and sequences, warmup 4 %, at d64"),
          Arm("held", label="held out: wider and deeper, fewer steps and sequences"),
          Arm("andrea120m", label="andrea120m's shape at a short horizon (gpu scale)")),
    scales={
        "cpu": scale(ladder.CPU, CPU_BASE, CPU_LEGS, CPU_RUNGS, HEAD, rates=(5e-4, 1e-3, 2e-3, 4e-3, 8e-3),
                     seeds=LEG_SEEDS,
                     arm_seeds={"base": WIDE_SEEDS, "batch": WIDE_SEEDS,
                                "far": tuple(range(1520, 1528)), "held": tuple(range(1530, 1538))},
                     arm_rates={"far": (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2),
                                "held": (2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3)},
                     seconds_per_model_step=seconds_per_model_step, seconds_per_program=10.0),
        "smoke": scale(ladder.SMOKE, SMOKE_BASE, SMOKE_LEGS, SMOKE_RUNGS, 16, rates=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2),
                       seeds=(1500, 1501, 1502), arm_seeds={"far": (1520, 1521, 1522), "held": (1530, 1531, 1532)},
                       smoke=True),
        "gpu": Grid(rates=(3e-4, 6e-4, 1.2e-3, 2.4e-3, 4.8e-3, 1.44e-2), seeds=(1540, 1541), shared=GPU,
                    base_config="andrea120m", arms=("andrea120m",), members_per_program=4),
    },
    claims=(FAR_NAIVE, FAR_WIDTH_DEPTH, HELD_NAIVE, *LEG_CLAIMS),
    not_powered=(HELD_NAIVE.claim,),
    spread={"*": Spread(0.30, 5), LEG_CLAIMS[0].claim: Spread(0.123, 5), LEG_CLAIMS[1].claim: Spread(0.037, 5),
            LEG_CLAIMS[2].claim: Spread(0.033, 5), LEG_CLAIMS[3].claim: Spread(0.150, 5),
            LEG_CLAIMS[4].claim: Spread(0.06, 5)},
    spread_source=("the committed cells (results/recipe_check-cpu, 5 seeds, bracketed optima): per-seed SD of the "
                   "width slope 0.123, of depth 2 to 4 0.037, of the horizon at fixed warmup over 100-400 steps "
                   "0.033, of the batch at fixed steps 0.150 (one seed's optimum at 32 sequences off by 0.4), of "
                   "warmup 8 to 16 at 400 steps 0.06 per doubling; the checks' 0.30 as recipe_check's plan"),
    tags={W: "d", L: "L", S: "s", B: "b", WU: "w"},
    answer=Carried(SP, {"far": (FAR_NAIVE.claim, FAR_WIDTH_DEPTH.claim), "held": (HELD_NAIVE.claim,)},
                   measured="andrea120m"),
    devices={"gpu": DeviceTime()},
)

# What limits the reading (outside STUDY: the report's limitations, first).
LIMITS = (
    "One corpus, context 64 and vocabulary 512 at the cpu scale: the recipe carries width, depth, steps, batch "
    "and warmup, not context, vocabulary or data.",
    "The rungs reach one or two doublings toward andrea120m on each axis; the answer carries no leg further, so "
    "at the cpu scale it is a rate for a model far smaller than andrea120m, and its first lines say which legs "
    "it leaves unchecked and by how much the whole recipe would move the rate there.",
    "The wider, deeper rung's check is declared not powered (the committed slopes part the recipe and keeping "
    "the base rate by 0.53 there, 0.18 past the margin): width and depth are carried only where it passes.",
)

"""andrea120m's rate checked where the recipe extrapolates (issue 71): a rung past the legs' data judged against keeping the base rate and against fewer legs, warmup apart from horizon, every carried leg judged, and an answer that carries no leg further than a rung checked it."""

import dataclasses
import math

import pytest

from experiments.readings import recipe_check as answer_lib
from research import claims
from research import kinds
from research import rate_check
from research import registry
from research import study as study_lib
from research.study import Arm, Grid
from synthetic_runs import arm as runs_of, bowl

RATES = tuple(1.25e-4 * 2 ** k for k in range(11))  # 1.25e-4 .. 0.128, factor 2
BASE_LR = 2e-3
LEG_SEEDS, RUNG_SEEDS = (0, 1, 2, 3), (10, 11, 12, 13)
JITTER = (-0.04, 0.0, 0.04, 0.02)
BASE = {"x": 128, "s": 200}  # a width-like axis x and a steps-like axis s
TARGET = {"x": 1024, "s": 3200}


def runs(name, point, log_move, seeds=LEG_SEEDS):
  """One run per seed of ``name`` at ``point`` whose optimum is the base's times exp(``log_move``) (and the
  seed's jitter)."""
  out = []
  for i, seed in enumerate(seeds):
    lr = BASE_LR * math.exp(log_move + JITTER[i % len(JITTER)])
    out += [(name, tuple(point.items()), dataclasses.replace(r, seed=seed), {})
            for r in runs_of(name, bowl(3.8, lr, width=0.3, rates=RATES), seeds=1)]
  return out


def data_of(slopes=(-0.5, 0.3), rungs=None):
  """The base, a leg along x (64, 256) and along s (100, 400) at ``slopes`` per doubling, and rungs
  (name -> (point, the log move of their measured optimum from the base's)) on seeds of their own."""
  rows = [r for n in ("base", "w", "t") for r in runs(n, BASE, 0.0)]
  rows += [r for v in (64, 256) for r in runs("w", {**BASE, "x": v}, slopes[0] * math.log2(v / 128))]
  rows += [r for v in (100, 400) for r in runs("t", {**BASE, "s": v}, slopes[1] * math.log2(v / 200))]
  for name, (point, move) in (rungs or {}).items():
    rows += runs(name, point, move, RUNG_SEEDS)
  return kinds.Data(tuple(rows))


def carried_move(point, slopes=(-0.5, 0.3)):
  """The log move the legs' slopes give at ``point``."""
  return slopes[0] * math.log2(point["x"] / 128) + slopes[1] * math.log2(point["s"] / 200)


FAR = {"x": 64, "s": 800}  # one doubling past the steps leg's data, a doubling narrower
HELD = {"x": 256, "s": 200}  # the width leg's edge
RECIPE = kinds.Recipe("r", "r", "base", (kinds.Leg("w", "x", TARGET["x"]), kinds.Leg("t", "s", TARGET["s"])))
WIDTH = kinds.Recipe("width only", "width-only", "base", (kinds.Leg("w", "x", TARGET["x"]),))
FAR_NAIVE = rate_check.BeatsRule("far naive", family="check", arm="far", recipe=RECIPE)
FAR_WIDTH = rate_check.BeatsRule("far width", family="check", arm="far", recipe=RECIPE, against=WIDTH)
HELD_NAIVE = rate_check.BeatsRule("held naive", family="check", arm="held", recipe=RECIPE)
LEG_W = kinds.Slope("w falls", family="legs", arm="w", axis="x", of="bracketed", predict="lower")
LEG_T = kinds.Slope("t rises", family="legs", arm="t", axis="s", of="bracketed", predict="higher")


def study_of(not_powered=(), every_leg=True, measured=""):
  answer = answer_lib.Carried(RECIPE, {"far": (FAR_NAIVE.claim, FAR_WIDTH.claim), "held": (HELD_NAIVE.claim,)},
                              measured=measured, every_leg=every_leg)
  return answer_lib.CheckedStudy(
      name="synthetic", question="q", design="Confirmatory: synthetic.",
      arms=(Arm("base", also=("w", "t")), Arm("w"), Arm("t"), Arm("far"), Arm("held"), Arm("target")),
      scales={"cpu": Grid(rates=RATES, seeds=LEG_SEEDS)}, claims=(FAR_NAIVE, FAR_WIDTH, HELD_NAIVE, LEG_W, LEG_T),
      not_powered=not_powered, answer=answer)


def answer_of(data, **kw):
  study = study_of(**kw)
  verdicts = study_lib.judge(study, data, robust=False)
  return study.answer.page_lines(study, data, verdicts), {v.claim: v.verdict for v in verdicts}


def verdict(test):
  return claims.decide_family([test])[0][1].verdict


def printed_rate(lines):
  return float(next(line for line in lines if "--config.train.learning_rate=" in line).rsplit("=", 1)[1])


# ----------------------------------------------------------------------------- the check against fewer legs


def test_against_the_base_rate_the_rule_is_the_committed_check():
  """``BeatsRule`` without ``against`` is ``BeatsNaive``: the same effect, interval and verdict."""
  data = data_of(rungs={"far": (FAR, carried_move(FAR))})
  old = rate_check.BeatsNaive("far naive", family="check", arm="far", recipe=RECIPE).test(data)
  new = FAR_NAIVE.test(data)
  assert (new.effect.diff, new.effect.lo, new.effect.hi) == (old.effect.diff, old.effect.lo, old.effect.hi)
  assert verdict(new) == verdict(old) == claims.REPRODUCED


def test_the_far_rung_tells_the_steps_leg_from_width_alone():
  """Where the steps leg holds past its data, the recipe beats width alone there; where the optimum past
  the data is what width alone says (the steps leg stopped at its data), width alone wins, though the
  recipe still beats keeping the base rate (the referee's case: a check that cannot see the leg)."""
  held_up = data_of(rungs={"far": (FAR, carried_move(FAR))})
  assert verdict(FAR_WIDTH.test(held_up)) == claims.REPRODUCED
  stopped = data_of(rungs={"far": (FAR, carried_move({"x": 64, "s": 200}))})  # the steps leg moved nothing there
  t = FAR_WIDTH.test(stopped)
  assert verdict(t) == claims.NOT_REPRODUCED and t.effect.hi < rate_check.MARGIN, t.lines
  assert "the width-only rule" in t.lines[0] and FAR_WIDTH.unit() == kinds.LOG_RATIO
  assert set(FAR_WIDTH.needs()) == {"far", "base", "w", "t"}


# ----------------------------------------------------------------------------- the answer


def test_the_answer_carries_each_leg_only_as_far_as_a_passing_rung_moved_it():
  rungs = {"far": (FAR, carried_move(FAR)), "held": (HELD, carried_move(HELD) + 1.0)}  # held above the base: naive wins
  data = data_of(rungs=rungs)
  (lines, results), said = answer_of(data, every_leg=False)
  assert said[FAR_WIDTH.claim] == said[FAR_NAIVE.claim] == claims.REPRODUCED
  assert said[HELD_NAIVE.claim] != claims.REPRODUCED
  # The steps leg to the far rung's 800 (2 doublings), not to the target's 3200; width not at all (the far
  # rung moved it away from the target, the held rung failed).
  assert results["carried"] == {"x": 0.0, "s": 2.0} and results["how"] == "checked"
  expected = math.exp(rate_check.predict(RECIPE, data, {"x": 128, "s": 800}).recipe.diff)
  assert printed_rate(lines) == pytest.approx(expected, rel=1e-2) and results["rate"] == pytest.approx(expected)
  whole = math.exp(rate_check.predict(RECIPE, data).recipe.diff)
  # The whole recipe adds width's 3 doublings (-1.5) and steps' last 2 (+0.6): not the answer.
  assert math.log(whole / results["rate"]) == pytest.approx(-1.5 + 0.6, abs=0.05)
  text = " ".join(lines[:10])
  assert "Not checked, so not carried: w: x 3.0 of 3.0 doublings (128 to 1024" in text
  assert "t: s 2.0 of 4.0 doublings (800 to 3200" in text and "-1.50 ln(rate) there" in text
  assert "Rung far" in " ".join(lines) and "the width-only rule: reproduced." in " ".join(lines)


def test_with_a_leg_no_rung_checked_the_answer_is_the_default_the_checked_rate_beside_it():
  data = data_of(rungs={"far": (FAR, carried_move(FAR)), "held": (HELD, carried_move(HELD) + 1.0)})
  (lines, results), _ = answer_of(data)  # every_leg: the default
  assert results["how"] == "default" and printed_rate(lines) == answer_lib.DEFAULT_RATE
  assert "no rung checked w, so" in lines[0] and "the recipe carried t to s 800 (rung far)" in lines[0]
  partial = math.exp(rate_check.predict(RECIPE, data, {"x": 128, "s": 800}).recipe.diff)
  assert f"{partial:.3g}" in lines[0]  # the rate the checked legs support, beside the default


def test_every_leg_checked_carries_both_and_a_not_powered_leg_is_not_carried():
  data = data_of(rungs={"far": (FAR, carried_move(FAR)), "held": (HELD, carried_move(HELD))})
  (lines, results), said = answer_of(data)
  assert said[HELD_NAIVE.claim] == claims.REPRODUCED
  assert results["carried"] == {"x": 1.0, "s": 2.0} and results["how"] == "checked"
  expected = math.exp(rate_check.predict(RECIPE, data, {"x": 256, "s": 800}).recipe.diff)
  assert printed_rate(lines) == pytest.approx(expected, rel=1e-2)
  (lines, results), _ = answer_of(data, not_powered=(LEG_T.claim,))  # its leg not judged: not carried
  assert results["carried"] == {"x": 1.0, "s": 0.0} and results["how"] == "default"
  (lines, results), _ = answer_of(data, not_powered=(HELD_NAIVE.claim,))  # the held rung not judged
  assert results["carried"] == {"x": 0.0, "s": 2.0}


def test_nothing_checked_gives_the_default_with_the_whole_recipe_beside_it():
  data = data_of(rungs={"far": (FAR, 0.0), "held": (HELD, 0.0)})  # both rungs at the base's optimum
  (lines, results), said = answer_of(data)
  assert said[FAR_NAIVE.claim] == said[HELD_NAIVE.claim] == claims.NOT_REPRODUCED
  assert results["carried"] == {"x": 0.0, "s": 0.0} and printed_rate(lines) == answer_lib.DEFAULT_RATE
  whole = rate_check.predict(RECIPE, data)
  assert "no rung checked a leg" in lines[0] and whole.text() in lines[0]


def test_the_target_measured_at_its_own_shape_is_the_answer():
  data = data_of(rungs={"far": (FAR, 0.0)})
  data = kinds.Data(data.rows + tuple(runs("target", {"x": None, "s": None}, math.log(3e-4 / BASE_LR), (20, 21))))
  (lines, results), _ = answer_of(data, measured="target")
  assert results["how"] == "measured" and printed_rate(lines) == pytest.approx(3e-4, rel=0.05)


# ----------------------------------------------------------------------------- the study


def test_the_far_rung_lies_past_every_legs_data_toward_andrea120m_on_fresh_seeds():
  from experiments.studies import recipe_check2 as study_file  # pylint: disable=import-outside-toplevel
  study = registry.study("recipe_check2")
  cells = study.sweep("cpu").cells
  rung = {c.arms[0] for c in cells} & {"far", "held"}
  assert rung == {"far", "held"}
  legs = [c.overrides for c in cells if c.arms[0] not in rung]
  far = next(c.overrides for c in cells if c.arms[0] == "far")
  for axis in (study_file.S, study_file.B):  # steps and sequences: past every leg's, short of andrea120m's
    assert far[axis] > max(o[axis] for o in legs) and study_file.TARGET[axis] > far[axis], axis
  assert far[study_file.WU] == max(o[study_file.WU] for o in legs)  # warmup: the warmup leg's longest
  by_arm = {}
  for c in cells:
    by_arm.setdefault(c.arms[0], set()).add(c.seed)
  assert not (by_arm["far"] | by_arm["held"]) & by_arm["base"] and not by_arm["far"] & by_arm["held"]
  used = registry.used_seeds("recipe_check2")
  for scale in ("cpu", "gpu"):
    seeds = {c.seed for c in study.sweep(scale).cells}
    assert seeds and not seeds & used, sorted(seeds & used)


def test_the_horizon_leg_keeps_the_warmup_and_warmup_is_its_own_leg():
  study = registry.study("recipe_check2")
  cells = study.sweep("cpu").cells
  horizon = [c.overrides for c in cells if c.arms[0] == "horizon"]
  warmup = [c.overrides for c in cells if c.arms[0] == "warmup"]
  assert {o["train.warmup_steps"] for o in horizon} == {8} and len({o["train.steps"] for o in horizon}) == 2
  assert {o["train.steps"] for o in warmup} == {200} and {o["train.warmup_steps"] for o in warmup} == {16, 32}
  far = next(c.overrides for c in cells if c.arms[0] == "far")
  assert far["train.warmup_steps"] == round(0.04 * far["train.steps"])  # andrea120m's 200 of 5,000


def test_every_leg_the_answer_can_carry_is_a_judged_powered_claim_and_the_plan_is_modest():
  from experiments import sweep as sweep_cmd  # pylint: disable=import-outside-toplevel
  from experiments.studies import recipe_check2 as study_file  # pylint: disable=import-outside-toplevel
  study = registry.study("recipe_check2")
  plan = {c.claim: (c, powered) for c, _, _, powered in study.plan("cpu")}
  given = {c.claim: have for c, _, have, _ in study.plan("cpu")}
  # A leg is planned at its own arm's seeds, not at the base's (which also carry its name).
  assert given[study_file.LEG_CLAIMS[0].claim] == len(study_file.LEG_SEEDS) == 8
  assert given[study_file.LEG_CLAIMS[3].claim] == len(study_file.WIDE_SEEDS) == 13
  for leg in study.answer.recipe.legs:
    claim = next(c for c, _ in plan.values() if isinstance(c, kinds.Slope) and (c.arm, c.axis) == (leg.arm, leg.axis))
    assert claim.claim not in study.not_powered and plan[claim.claim][1], leg
  # The far rung's checks are powered, the held rung's declared not (its effect 0.18 needs 32 seeds).
  assert plan[study_file.FAR_WIDTH_DEPTH.claim][1] and plan[study_file.FAR_NAIVE.claim][1]
  assert study.not_powered == (study_file.HELD_NAIVE.claim,) and not plan[study_file.HELD_NAIVE.claim][1]
  sweep = study.sweep("cpu")
  minutes = study.minutes("cpu", sweep.cells)
  assert 60 < minutes < 90
  text = "\n".join(sweep_cmd.plan_lines(sweep, "runs/sweeps/recipe_check2-cpu", gated=True))
  assert f"about {minutes:.0f} minutes on the 2-core CPU" in text and "none used by another study" in text
  assert "36 models in 12 programs, about 7 minutes on the 2-core CPU" in text  # its pilot, the cost beside


def test_the_studys_own_answer_on_cells_that_follow_the_committed_slopes():
  """recipe_check2's cpu grid, each cell's loss a bowl around an optimum that moves with the committed
  slopes (and warmup's +0.29 a doubling): the far rung passes both its checks, so steps, batch and warmup
  are carried to its 800 steps, 64 sequences and warmup 32; the held rung's check is declared not
  powered, so width and depth are not carried, and the answer is the default with the checked rate beside."""
  from experiments.studies import recipe_check2 as study_file  # pylint: disable=import-outside-toplevel
  study = registry.study("recipe_check2")
  slopes = {study_file.W: -0.38, study_file.L: -0.10, study_file.S: -0.03, study_file.B: 0.14, study_file.WU: 0.29}
  base = study_file.CPU_BASE
  axes = tuple(study.grid("cpu").axes)
  rows, groups = [], {}
  for c in study.sweep("cpu").cells:
    groups.setdefault((c.group, c.seed), []).append(c)
  for (group, seed), cs in groups.items():
    o = cs[0].overrides
    lr = BASE_LR * math.exp(sum(k * math.log2(o[a] / base[a]) for a, k in slopes.items()) + 0.03 * (seed % 3 - 1))
    rates = sorted(c.learning_rate for c in cs)
    for r in runs_of(group, bowl(3.8, lr, width=0.3, rates=rates), seeds=1):
      rows += [(name, tuple((a, o.get(a)) for a in axes), dataclasses.replace(r, seed=seed), {})
               for name in cs[0].arms]
  data = kinds.Data(tuple(rows))
  verdicts = study_lib.judge(study, data, robust=False)
  said = {v.claim: v.verdict for v in verdicts}
  assert said[study_file.FAR_NAIVE.claim] == said[study_file.FAR_WIDTH_DEPTH.claim] == claims.REPRODUCED
  assert said[study_file.HELD_NAIVE.claim] == study_lib.NOT_POWERED
  (lines, results) = study.answer.page_lines(study, data, verdicts)
  assert results["carried"] == {study_file.W: 0.0, study_file.L: 0.0, study_file.S: 2.0, study_file.B: 2.0,
                                study_file.WU: 2.0}
  assert results["how"] == "default" and printed_rate(lines) == answer_lib.DEFAULT_RATE
  assert "no rung checked width or depth" in lines[0]
  assert lines[4].startswith("Not checked, so not carried: width: d model 2.6 of 2.6 doublings (128 to 768")


def test_the_readme_and_the_recipe_report_it_links_give_andrea120m_the_same_rate():
  """Issue 71: the README's andrea120m rate is the one the first ten lines of the recipe report it links tell
  a user to train with (a superseded page's note first, else its answer), and where the README calls it the
  default, it is the configs' default."""
  import os  # pylint: disable=import-outside-toplevel
  import re  # pylint: disable=import-outside-toplevel
  from experiments.configs import common  # pylint: disable=import-outside-toplevel
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
  item = readme.split("**andrea120m's learning rate**: ", 1)[1].split("\n- ", 1)[0]
  rate = float(re.match(r"\d[\d.e-]*\d", item)[0])
  page = re.search(r"\((docs/studies/recipe_check[^/]*/REPORT\.md)\)", item)[1]
  head = " ".join(open(os.path.join(root, page), encoding="utf-8").read().splitlines()[:10])
  told = re.search(r"andrea120m(?:'s rate stays the default,| at) (\d[\d.e-]*\d)", head)
  assert told and float(told[1]) == rate, (rate, page, told and told[0])
  if "the default" in item.split(". ", 1)[0]:
    assert rate == common.base_config(common.model_group(vocab_size=512, block_size=64, d_model=64, n_layer=1,
                                                         n_head=1)).train.learning_rate

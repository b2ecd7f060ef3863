"""The reworked recipe study (issue 61): fresh seeds, andrea120m's shape under ten H100 minutes, the check against keeping the base rate both ways, the interval over whole per-seed recipes, and the printed rate."""

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats as sps

from experiments.readings import recipe_check as answer_lib
from research import claims
from research import kinds
from research import rate_check
from research import registry
from synthetic_runs import arm as runs_of, bowl

RATES = tuple(2.5e-4 * 2 ** k for k in range(9))  # 2.5e-4 .. 6.4e-2, factor 2
BASE_LR = 2e-3
LEG_SEEDS, RUNG_SEEDS = (0, 1, 2, 3), (10, 11, 12, 13)
JITTER = (-0.04, 0.0, 0.04, 0.02)


def runs(name, point, opt, seeds=LEG_SEEDS, shift=None):
  """One run per seed of ``name`` at ``point`` whose optimum is ``opt`` (times the seed's jitter,
  and ``shift[seed]`` in log where given)."""
  out = []
  for i, seed in enumerate(seeds):
    lr = opt * math.exp(JITTER[i % len(JITTER)] + (shift or {}).get(seed, 0.0))
    out += [(name, point, dataclasses.replace(r, seed=seed), {})
            for r in runs_of(name, bowl(3.8, lr, width=0.3, rates=RATES), seeds=1)]
  return out


def study_data(rung_move, slopes=(-0.5, -0.3), base_shift=None):
  """A base at (x 128, y 2), a leg along x (256, 512) and along y (4, 8) at ``slopes`` per
  doubling, a rung at (512, 8) on seeds of its own whose optimum is the base's x exp(rung_move)."""
  base = (("x", 128), ("y", 2))
  rows = [r for n in ("base", "w", "d") for r in runs(n, base, BASE_LR, shift=base_shift)]
  for v in (256, 512):
    rows += runs("w", (("x", v), ("y", 2)), BASE_LR * math.exp(slopes[0] * math.log2(v / 128)))
  for v in (4, 8):
    rows += runs("d", (("x", 128), ("y", v)), BASE_LR * math.exp(slopes[1] * math.log2(v / 2)))
  rows += runs("held", (("x", 512), ("y", 8)), BASE_LR * math.exp(rung_move), RUNG_SEEDS)
  return kinds.Data(tuple(rows))


RECIPE = kinds.Recipe("r", "r", "base", (kinds.Leg("w", "x", 4096), kinds.Leg("d", "y", 64)))
CHECK = rate_check.BeatsNaive("c", family="check", arm="held", recipe=RECIPE)


def verdict(test):
  return claims.decide_family([test])[0][1].verdict


# ----------------------------------------------------------------------------- seeds and the gpu scale


def test_the_seeds_are_fresh():
  study = registry.study("recipe_check")
  used = registry.used_seeds("recipe_check")
  for scale in ("cpu", "gpu"):
    seeds = {c.seed for c in study.sweep(scale).cells}
    assert seeds and not seeds & used, sorted(seeds & used)
  assert "none used by another study" in study.plan_lines("gpu")[0]


def test_the_gpu_dry_run_is_andrea120m_under_ten_h100_minutes():
  from andrea_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  study = registry.study("recipe_check")
  sweep = study.sweep("gpu")
  for c in sweep.cells:
    m = config_lib.run_config(registry.group_config(sweep.base_config, dict(c.overrides))).model
    assert (m.d_model, m.n_layer, m.n_head, m.block_size, m.vocab_size) == (768, 12, 12, 1024, 8449)
  total, train = study.devices["gpu"].seconds(study, "gpu")
  assert 0 < train < total < 600
  lines = " ".join(study.plan_lines("gpu"))
  assert "Estimated time on one H100" in lines and f"{total / 60:.1f} minutes" in lines
  rates = {c.learning_rate for c in sweep.cells}
  assert {6e-4, 1.2e-3, 2.4e-3, 1.44e-2} <= rates


def test_the_cpu_rung_moves_every_carried_axis_and_warmup_is_andrea120ms_fraction():
  study = registry.study("recipe_check")
  cells = study.sweep("cpu").cells
  base = next(c.overrides for c in cells if c.arms[0] == "base")
  held = next(c.overrides for c in cells if c.arms[0] == "held")
  for axis in ("model.d_model", "model.n_layer", "train.steps", "train.batch_size"):
    assert held[axis] != base[axis], axis
  for c in cells:
    o = c.overrides
    fixed = c.arms[0] in ("horizon-fixed-warmup", "batch")
    assert o["train.warmup_steps"] == (8 if fixed else max(1, round(0.04 * o["train.steps"]))), c.name
  tokens = {c.overrides["train.steps"] * c.overrides["train.batch_size"] for c in cells if "batch-tokens" in c.arms}
  assert tokens == {200 * 16}


# ----------------------------------------------------------------------------- the check


def test_the_recipe_beats_keeping_the_base_rate_where_the_slopes_hold():
  data = study_data(rung_move=-0.5 * 2 - 0.3 * 2)  # the rung where the legs' slopes put it
  t = CHECK.test(data)
  assert verdict(t) == claims.REPRODUCED, t.lines
  assert t.effect.diff == pytest.approx(1.6, abs=0.1) and t.effect.lo > rate_check.MARGIN
  assert answer_lib.passed(CHECK, data)


@pytest.mark.parametrize("rung_move, slopes", [
    (0.0, (-0.5, -0.3)),  # the rung's optimum stayed at the base's: the naive rule wins
    (-0.1 * 2 - 0.05 * 2, (-0.1, -0.05)),  # the recipe is right, but moves less than the margin
])
def test_the_recipe_does_not_earn_its_name_without_beating_the_naive_rule_by_the_margin(rung_move, slopes):
  data = study_data(rung_move, slopes)
  t = CHECK.test(data)
  assert verdict(t) == claims.NOT_REPRODUCED, t.lines
  assert t.effect.hi < rate_check.MARGIN
  assert not answer_lib.passed(CHECK, data)


def test_the_check_is_inconclusive_without_enough_located_seeds():
  data = kinds.Data(tuple(r for r in study_data(-1.6).rows if not (r[0] == "held" and r[2].seed != 10)))
  assert verdict(CHECK.test(data)) == claims.INCONCLUSIVE


# ----------------------------------------------------------------------------- the interval


def test_a_shared_base_outlier_moves_every_leg_of_its_seed_together():
  delta = 0.6
  data = study_data(-1.6, base_shift={0: delta})  # seed 0's base optimum is off, its legs are not
  joint = rate_check.predict(RECIPE, data)
  clean = rate_check.predict(RECIPE, study_data(-1.6))
  # The base point is the first of three on each leg: seed 0's slopes fall by delta / 2 each,
  # carried 5 doublings of x and 5 of y, against its base's +delta.
  moved = joint.per_seed[0] - clean.per_seed[0]
  assert moved == pytest.approx(delta - 2 * 5 * delta / 2, abs=0.05)
  assert all(joint.per_seed[s] == pytest.approx(clean.per_seed[s], abs=1e-9) for s in (1, 2, 3))
  # The interval is the t interval over the per-seed recipes, not the legs' and the base's
  # intervals in quadrature: those treat the legs as independent, though here both legs of
  # seed 0 moved the same way, through the base they share, and add.
  e, x = joint.recipe, np.array(list(joint.per_seed.values()))
  half = lambda x: (x.hi - x.lo) / 2
  assert half(e) == pytest.approx(sps.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
  legs = answer_lib.legs(RECIPE, data)
  quadrature = math.sqrt(half(joint.naive) ** 2 + sum((half(r.slope) * r.doublings) ** 2 for r in legs))
  assert half(e) > 1.05 * quadrature
  assert [r.guess for r in legs] == [True, True]  # 3 doublings past their data
  assert "A guess" in answer_lib.guess_text(legs)


# ----------------------------------------------------------------------------- the printed rate


def printed_rate(lines):
  command = next(line for line in lines if "--config.train.learning_rate=" in line)
  return float(command.rsplit("=", 1)[1])


def test_the_printed_command_is_the_literature_default_unless_the_check_passed():
  answer = answer_lib.Answer(CHECK)
  # The legs rise steeply, so the recipe's rate at the target is far above the cap ...
  failed = study_data(rung_move=0.0, slopes=(0.4, 0.3))
  assert math.exp(rate_check.predict(RECIPE, failed).recipe.diff) > answer_lib.CAP
  lines, results = answer.lines(failed)
  assert printed_rate(lines) == answer_lib.DEFAULT_RATE <= answer_lib.CAP and not results["passed"]
  assert "The study's range" in " ".join(lines)
  # ... and is printed only where the rung confirms it.
  held = study_data(rung_move=0.4 * 2 + 0.3 * 2, slopes=(0.4, 0.3))
  lines, results = answer.lines(held)
  assert results["passed"] and printed_rate(lines) == pytest.approx(results["rate"], rel=1e-2)
  assert printed_rate(lines) > answer_lib.CAP
  lines, results = answer.lines(held, judged=False)  # a check declared not powered never passes
  assert printed_rate(lines) == answer_lib.DEFAULT_RATE


def test_the_report_opens_with_the_answer_its_command_in_the_first_ten_lines():
  """The answer is the report's headline (``CheckedStudy.page`` -> ``Page.headline``), above the
  verdicts' table: the command at the literature's rate and the study's range beside it (under the
  note of the study that supersedes it, issue 71, which the first ten lines count apart)."""
  from research import report  # pylint: disable=import-outside-toplevel
  from research.page import Page  # pylint: disable=import-outside-toplevel
  lines, _ = answer_lib.Answer(CHECK).lines(study_data(rung_move=0.0, slopes=(0.4, 0.3)))
  page = Page(verdicts=[], method="", sections=[], plots=[], results={}, headline=lines)
  opening = report.opening("recipe_check", {"name": "recipe_check", "scale": "cpu"}, [], "Confirmatory.", [],
                           page, {}, [])
  assert opening[2].startswith("> **Superseded.** andrea120m's rate stays the default, 6e-4")
  head = [opening[0], *opening[4:]][:10]
  assert printed_rate(head) == answer_lib.DEFAULT_RATE
  assert any(line.startswith("The study's range") for line in head)
  assert not any(line.startswith("**Answer:** ") and "(the table)" in line for line in head)


def test_the_committed_run_is_the_frozen_rules_on_a_clean_tree_and_its_check_passed():
  """results/recipe_check-cpu: every cell trained at one clean commit under the rules the sweep
  recorded (unchanged since); the held-out check passed, so the answer is the recipe's rate,
  inside its own interval and the literature's cap, and said to be a guess past the data."""
  import json  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel
  from experiments.studies import recipe_check as study_file  # pylint: disable=import-outside-toplevel
  from research import cells as cells_lib  # pylint: disable=import-outside-toplevel
  from research import identity  # pylint: disable=import-outside-toplevel
  from research import registry  # pylint: disable=import-outside-toplevel
  from research import report  # pylint: disable=import-outside-toplevel
  where = os.path.join(registry.RESULTS, "recipe_check-cpu")
  _, cells, _ = cells_lib.load(where)
  assert len(cells) == 480 and {(c["code"]["clean"], c["code"]["commit"][:7]) for c in cells} == {(True, "fe0a575")}
  study = study_file.STUDY
  with open(os.path.join(where, "sweep.json")) as f:
    index = json.load(f)
  line, = report.rules_line(where, index, "recipe_check", study.judge(cells, robust=False))
  assert identity.compare(index["rules"], "recipe_check").same or "re-expressed, same verdicts" in line
  data = study.data(cells)
  assert answer_lib.passed(study_file.CHECK, data)
  lines, results = study.answer.lines(data)
  joint = rate_check.predict(study_file.SP, data)
  assert results["passed"] and printed_rate(lines) == pytest.approx(math.exp(joint.recipe.diff), rel=1e-2)
  assert joint.recipe.lo < joint.recipe.diff < joint.recipe.hi and math.exp(joint.recipe.diff) < answer_lib.CAP
  assert any(r.guess for r in answer_lib.legs(study_file.SP, data)) and "A guess" in " ".join(lines)
  verdicts = [v.verdict for v in study.judge(cells, robust=False)]
  assert verdicts == ["Reproduced"] + ["Not powered"] * 6

"""The proxies study and the muTransfer ladder as one-file studies (experiments/studies/
proxies.py, mutransfer.py): their cells are the committed ones, re-judging the committed
cells gives the verdicts their earlier rules gave (verdicts_before.json), the runner's
refinement rounds come out as committed, the plan is the frozen one, the base choice is read
from the base stage's results."""

import dataclasses
import json
import os
import shutil

import pytest

from andrea_jax import errors
from research import cells as cells_lib
from research import ladder
from research import registry
from research import report as reporting
from research import sweep as sweep_lib

RESULTS = os.path.join(registry.RESULTS)
# The muP fields the proxies study ran with when they were mup.py's defaults (its committed
# cells do not name them; its grid names them since the defaults changed).
PROXIES_MUP_DEFAULTS = {"model.mup_attention": "inverse", "model.mup_decay": "with_rate"}


def committed(name):
  index, cells, _ = cells_lib.load(os.path.join(RESULTS, f"{name}-cpu"))
  return index, cells


@pytest.mark.parametrize("name", ["proxies", "mutransfer"])
def test_the_study_trains_the_committed_cells(name):
  index, _ = committed(name)
  sweep = registry.load(name, "cpu")
  assert sweep.base_config == index["base_config"] == "tiny"
  want = [c for c in index["cells"] if c.get("round", 0) == 0]
  assert [c.name for c in sweep.cells] == [c["name"] for c in want]
  for c, w in zip(sweep.cells, want):
    overrides = dict(c.overrides)
    if name == "proxies" and c.arms == ("pre+mup",):
      assert {k: overrides.pop(k) for k in PROXIES_MUP_DEFAULTS} == PROXIES_MUP_DEFAULTS
    assert (overrides, list(c.arms), c.seed, c.group, c.refinable) == (
        w["overrides"], w["arms"], w["seed"], w["group"], w.get("refinable", False))


@pytest.mark.parametrize("name", ["proxies", "mutransfer"])
def test_re_judging_the_committed_cells_gives_the_verdicts_before(name):
  _, cells = committed(name)
  with open(os.path.join(RESULTS, f"{name}-cpu", reporting.BEFORE), encoding="utf-8") as f:
    before = json.load(f)
  verdicts = registry.study(name).judge(cells, robust=False)
  assert [reporting._figures(v) for v in verdicts] == [reporting._figures(v) for v in before["verdicts"]]
  assert reporting.reexpressed(before, verdicts, ["Rules: re-judged"])[0].startswith(
      "Rules: **re-expressed, same verdicts.**")


def test_the_runner_refines_the_ladder_as_it_did():
  _, cells = committed("mutransfer")
  by_name = {c["name"]: c for c in cells}
  sweep = registry.load("mutransfer", "cpu").cells
  for rnd in (1, 2):
    new = sweep_lib.refine(sweep, {c.path: cells_lib.to_run(by_name[c.name]) for c in sweep}, rnd)
    want = [c for c in cells if c.get("round") == rnd]
    assert sorted((c.name, c.group, c.seed, c.round) for c in new) == sorted(
        (c["name"], c["group"], c["seed"], c["round"]) for c in want)
    assert all(c.overrides == by_name[c.name]["overrides"] for c in new)
    sweep = sweep + new


def test_the_ladder_arms_seeds_and_widths():
  cells = registry.load("mutransfer", "cpu").cells
  per_group = {}
  for c in cells:
    per_group.setdefault(c.group.split(".")[0], set()).add(c.seed)
  assert per_group == {**{f"{a}-d{w}": set(range(300, 309)) for a in ("pre", "pre-mup")
                          for w in (32, 64, 128, 256)}, "pre-qk-d128": set(range(300, 305))}
  choice = ladder.base_choice()
  for c in cells:
    o = c.overrides
    assert (o["model.readout_multiplier"], o["model.attention_multiplier"]) == (
        choice["readout_multiplier"], choice["attention_multiplier"])
    assert (o.get("model.parametrization", "sp") == "mup") == (c.arms == ("pre+mup",)) and c.refinable
  smoke = registry.load("mutransfer", "smoke")
  assert "Smoke scale" in smoke.description and smoke.cells[0].overrides["model.readout_multiplier"] == 1.0


def test_the_base_choice_is_read_or_its_absence_explained(tmp_path):
  with pytest.raises(errors.ConfigError, match=r"no base-stage choice.*--sweep=mup_base"):
    ladder.base_choice(str(tmp_path / "missing.json"))
  (tmp_path / "results.json").write_text(json.dumps({"choice": {"readout_multiplier": 4.0,
                                                                "attention_multiplier": 0.5}}))
  assert ladder.base_multipliers(str(tmp_path / "results.json")) == {
      "model.readout_multiplier": 4.0, "model.attention_multiplier": 0.5}


def test_the_plan_is_the_frozen_one():
  # The budgeted plan made before the run (0.05 / 4, the spreads and costs it stated): every
  # claim but qk powered (qk needs 42 seeds), 9 seeds of sp and muP, 5 of sp+qk, 99 minutes.
  study = registry.study("mutransfer")
  planned, seeds, level, family = study.budget_plan("cpu")
  assert [(c.seeds, c.powered) for c in planned] == [(9, True), (6, True), (9, True), (7, True), (42, False)]
  assert seeds == {"pre": 9, "pre+mup": 9, "pre+qk": 5} and (level, family) == (0.0125, 4)
  assert ("The grid's seeds per arm keep the plan's (more is a reserve) within the budget, and the "
          "claims the study declares not powered are the plan's.") in study.plan_lines("cpu")


@pytest.mark.parametrize("budget, not_powered", [
    (5, 5), (60, {"transfer", "no_cost", "qk"}), (86, {"transfer", "no_cost", "qk"})])
def test_the_plan_admits_cheapest_first_and_never_readmits(budget, not_powered):
  # At 86 minutes the family at 0.05 / 4 admits flat and wider only; at 0.05 / 2 transfer
  # would fit again, but a dropped claim is not readmitted (the families would alternate).
  study = registry.study("mutransfer")
  g = study.grid("cpu")
  study = dataclasses.replace(study, scales={"cpu": dataclasses.replace(
      g, budget=dataclasses.replace(g.budget, minutes=budget))})
  keys = ("transfer", "flat", "no_cost", "wider", "qk")
  got = {k for k, c in zip(keys, study.budget_plan("cpu")[0]) if not c.powered}
  assert got == (set(keys) if not_powered == 5 else not_powered)


def test_the_report_says_re_expressed_and_gives_the_rates(tmp_path):
  # A copy of the committed data: the report writes results.json beside the data it reads.
  data = shutil.copytree(os.path.join(RESULTS, "mutransfer-cpu"), tmp_path / "data")
  path = reporting.write_report("mutransfer", str(data), str(tmp_path))
  text = " ".join(open(path, encoding="utf-8").read().split(" "))
  text = text.replace("\n  ", " ").replace("\n> ", " ")  # long prose lines wrapped (reporting.wrapped)
  assert "**re-expressed, same verdicts.**" in " ".join(text.split()) and "## Power plan" in text
  text = " ".join(text.split())
  assert "- muP, arm `pre+mup`: 0.007 (95 % t interval over seeds 0.0066 .. 0.0075" in text
  assert "check: fitted without 256, the lines predict its optimum x0.75 of the fitted one [0.61, 0.94]" in text
  assert ("`python -m experiments.run --config=andrea120m --config.model.parametrization=mup "
          "--config.model.base_width=32 --config.model.readout_multiplier=8 "
          "--config.model.attention_multiplier=1 --config.train.learning_rate=0.007`") in text


def test_the_proxies_prediction_for_andrea120m():
  study = registry.study("proxies")
  lines = study.reports[0].section(study.data(committed("proxies")[1]), "").lines[2:]
  assert lines[0].startswith("- standard parametrisation, arm `pre`: 0.00032 (95 % t interval over "
                             "seeds 6.6e-05 .. 0.0016; 3 seeds, extrapolated x6.0 beyond 128")
  assert lines[1].startswith("- muP: no prediction (d_model 16: pre+mup does not learn")

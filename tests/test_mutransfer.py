"""The muTransfer ladder (experiments/studies/mutransfer/): its grid and the power plan it is
frozen from, each claim coming out reproduced, not reproduced and inconclusive on synthetic
ladders (as if powered), the plan's not-powered claim reported, not judged, and the rates it
gives andrea120m."""

import json
import math

import numpy as np
import pytest

from andrea_jax import errors
from research import curves
from research import registry
from experiments.studies.mutransfer import grid
from experiments.studies.mutransfer import plan as plan_lib
from experiments.studies.mutransfer import rules as R
from experiments.studies.proxies.rules import Row

WIDTHS = (32, 64, 128, 256)
RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
UNIGRAM, INITIAL = 6.27, 6.3


def synthetic(seeds=range(300, 306), noise=0.005, mup_opt=lambda w: 1e-2, mup_cost=0.0,
              mup_wider=-0.1, qk_curv=0.05, sp_curv=0.3, qk_widths=(128,), plateau=()):
  """A ladder: sp's optimum falls like 1/width from 3e-2 at d32, muP's follows ``mup_opt``;
  the best loss falls by 0.1 nats per doubling (muP's by ``-mup_wider``) and muP's lies
  ``mup_cost`` above sp's; qk has a flatter curve (lower sensitivity) than sp. Arms in
  ``plateau`` sit on the unigram plateau."""
  rng = np.random.default_rng(1)
  rows = []
  def add(arm, w, opt, best, curv):
    for seed in seeds:
      shift = rng.normal(0, noise)
      for lr in RATES:
        loss = best + shift + curv * math.log(lr / opt) ** 2 + rng.normal(0, noise / 3)
        if (arm, w) in plateau:
          loss = UNIGRAM + 0.02
        rows.append(Row(curves.Run((arm,), lr, seed, loss, INITIAL, unigram=UNIGRAM), arm, w))
  for w in WIDTHS:
    d = math.log2(w / 32)
    add(R.REFERENCE, w, 3e-2 * 32 / w, 4.5 - 0.1 * d, sp_curv)
    add(R.MUP, w, mup_opt(w), 4.5 + mup_wider * d + mup_cost, sp_curv)
    if w in qk_widths:
      add(R.QK, w, 3e-2 * 32 / w, 4.5 - 0.1 * d, qk_curv)
  return rows


def verdicts(rows, robust=False):
  return {t.key: v.verdict for t, v in R.family(rows)}


@pytest.fixture
def all_powered(monkeypatch):
  """Every claim judged, as if the plan had powered them all: each rule is tested each way
  whether or not this ladder's budget powers it."""
  monkeypatch.setattr(R, "NOT_POWERED", frozenset())


def test_every_claim_reproduced_on_a_ladder_that_transfers(all_powered):
  got = verdicts(synthetic())
  assert got == dict.fromkeys(("transfer", "flat", "no_cost", "wider", "qk"), "Reproduced"), got
  # "wider" is judged at the grid rate nearest muP's optimum at the base width (1e-2 here).
  wider = next(v for t, v in R.family(synthetic()) if t.key == "wider")
  assert wider.lines[0].startswith("At rate 0.01: ")


def test_every_claim_not_reproduced_on_a_ladder_that_does_not(all_powered):
  rows = synthetic(mup_opt=lambda w: 3e-2 * 32 / w, mup_cost=0.3, mup_wider=0.1, qk_curv=0.3)
  got = verdicts(rows)
  assert got == dict.fromkeys(("transfer", "flat", "no_cost", "wider", "qk"), "Not reproduced"), got


def test_every_claim_inconclusive_when_the_seeds_cannot_decide(all_powered):
  got = verdicts(synthetic(seeds=(300, 301), noise=0.3, mup_cost=0.05, mup_wider=0.01, qk_curv=0.25,
                           mup_opt=lambda w: 1e-2 * (32 / w) ** 0.3))
  assert set(got.values()) == {"Inconclusive"}, got


def test_an_unlocated_optimum_or_a_plateau_makes_a_claim_inconclusive(all_powered):
  # muP's optimum at d256 below the grid: transfer and flat cannot be judged.
  rows = synthetic(mup_opt=lambda w: 1e-2 if w < 256 else 1e-4)
  got = {t.key: (v.verdict, " ".join(v.lines)) for t, v in R.family(rows)}
  assert got["transfer"][0] == got["flat"][0] == "Inconclusive"
  assert "grid's edge" in got["transfer"][1]
  rows = synthetic(plateau=((R.QK, 128),))
  assert verdicts(rows)["qk"] == "Inconclusive"
  # muP on the plateau at d256: its optimum there is not located, so transfer is not judged.
  got = {t.key: (v.verdict, " ".join(v.lines)) for t, v in R.family(synthetic(plateau=((R.MUP, 256),)))}
  assert got["transfer"][0] == "Inconclusive" and "d256: pre+mup does not learn" in got["transfer"][1]


def test_leave_one_seed_out_is_reported_from_five_seeds(all_powered):
  judged = R.judge(synthetic(seeds=range(300, 305)))
  assert all("survives leaving out any one seed" in v.robustness for v in judged), [v.robustness for v in judged]
  few = R.judge(synthetic(seeds=range(300, 304)))
  assert all("uninformative at 4 seeds" in v.robustness for v in few)


def test_the_rates_for_andrea120m():
  mup, sp = R.predictions(synthetic())
  assert mup.lr == pytest.approx(1e-2, rel=0.05) and mup.interval[0] < mup.lr < mup.interval[1]
  assert mup.interval[1] / mup.interval[0] < 3  # the bar
  assert sp.lr == pytest.approx(3e-2 * 32 / 768, rel=0.1)
  assert "fitted without d256, the lines predict its optimum x1.0" in sp.check


def test_the_grid_reads_the_base_choice_and_trains_unseen_seeds(tmp_path):
  with pytest.raises(errors.ConfigError, match=r"no base-stage choice.*--sweep=mup_base"):
    grid.base_choice(str(tmp_path / "missing.json"))
  (tmp_path / "results.json").write_text(json.dumps({"choice": {"readout_multiplier": 4.0,
                                                                "attention_multiplier": 0.5}}))
  choice = grid.base_choice(str(tmp_path / "results.json"))
  sweep = grid.get_sweep("cpu", choice)
  for c in sweep.cells:
    o = c.overrides
    assert (o["model.readout_multiplier"], o["model.attention_multiplier"]) == (4.0, 0.5)
    assert (o.get("model.parametrization", "sp") == "mup") == (c.arms == (R.MUP,))
    if c.arms == (R.MUP,):
      assert o["model.base_width"] == 32 and o["model.mup_decay"] == "constant"
  qk = {c.overrides["model.d_model"] for c in sweep.cells if c.arms == (R.QK,)}
  assert qk == {128}
  earlier = ({c.seed for c in registry.load("norm_mlp_confirm", "cpu").cells}
             | {c.seed for c in registry.load("mup_base", "cpu").cells} | {0, 1, 2})
  assert not {c.seed for c in sweep.cells} & earlier
  assert sweep.cells and all(c.refinable for c in sweep.cells)


def test_the_report_page_gives_the_rates_the_command_and_the_table(tmp_path):
  from experiments.studies.mutransfer import report  # pylint: disable=import-outside-toplevel
  cells = []
  for i, r in enumerate(synthetic(seeds=range(300, 303))):
    o = {"model.d_model": r.width}
    if r.arm == R.MUP:
      o.update({"model.parametrization": "mup", "model.base_width": 32, "model.readout_multiplier": 4.0})
    cells.append({"name": f"c{i}", "group": f"{r.arm}-{r.width}", "arms": [r.arm], "learning_rate": r.run.lr,
                  "seed": r.run.seed, "final_val_loss": r.run.final, "initial_val_loss": INITIAL,
                  "status": "completed", "unigram_val_loss": UNIGRAM, "overrides": o, "n_params": 0})
  page = report.page({}, cells, str(tmp_path))
  text = "\n".join(page.sections)
  assert "--config.model.parametrization=mup --config.model.base_width=32" in text
  assert "--config.model.readout_multiplier=4 " in text and "--config.train.learning_rate=0.01" in text
  assert text.count("| yes |") == len([t for t in page.results["table"]]) == 9  # 4 + 4 + qk at 128
  assert [v.verdict for v in page.verdicts] == ["Reproduced"] * 4 + ["Not powered"]  # qk: the plan's
  assert "## Pre-registered plan" in text and "Not powered (declared before the run" in text


def test_the_frozen_plan_is_the_plan():
  # The grid's seeds, widths and rates and the rules' NOT_POWERED are what the plan computes
  # from the committed base stage and proxies ladder.
  p = plan_lib.compute()
  assert p.total_minutes <= plan_lib.BUDGET_MINUTES
  ladder = set(plan_lib.LADDER_SP + plan_lib.LADDER_MUP)
  assert {g: n for g, n in p.seeds.items() if g in ladder} == dict.fromkeys(ladder, len(grid.LADDER_SEEDS))
  assert p.seeds.get(plan_lib.QK_GROUPS[1], 0) == len(grid.QK_SEEDS)
  assert set(p.not_powered) == set(R.NOT_POWERED) == {"qk"}
  assert grid.RATES == plan_lib.RATES and grid.SCALES["cpu"]["widths"] == plan_lib.WIDTHS
  assert grid.SCALES["cpu"]["steps"] == plan_lib.STEPS
  assert all(c.seeds >= plan_lib.MIN_SEEDS for c in p.claims if c.powered)
  # Each powered claim's seeds reach 80 % power at the family's level (the ladder's 9 >= each).
  assert all(c.seeds <= len(grid.LADDER_SEEDS) for c in p.claims if c.powered)
  sweep = grid.get_sweep("cpu")
  per_group = {}
  for c in sweep.cells:
    per_group.setdefault(c.group.split(".")[0], set()).add(c.seed)
  assert per_group == {g: set(grid.QK_SEEDS if g == plan_lib.QK_GROUPS[1] else grid.LADDER_SEEDS)
                       for g in p.seeds}
  text = "\n".join(plan_lib.lines(p))
  assert "Not powered (declared before the run; their figures are reported, not judged): qk." in text


def test_the_plan_admits_cheapest_first_and_never_readmits():
  # A budget that powers nothing, one that powers the muP-only claims (flat, wider), and the
  # frozen one (all but qk).
  assert plan_lib.make(budget=5).not_powered == ("transfer", "flat", "no_cost", "wider", "qk")
  small = plan_lib.make(budget=60)
  assert set(small.not_powered) == {"transfer", "no_cost", "qk"}
  assert set(plan_lib.make().not_powered) == {"qk"}
  # At the 86 minutes the family at 0.05 / 4 admits flat and wider only, and at
  # 0.05 / 2 transfer would fit again, but a dropped claim is not readmitted (the two
  # families would alternate): the plan ends with the two.
  assert set(plan_lib.make(budget=86).not_powered) == {"transfer", "no_cost", "qk"}
  # At the first pre-registered margin (0.05 nats) no_cost needs 15+ seeds: not powered.
  assert "no_cost" in plan_lib.make(cost_margin=0.05).not_powered


def test_a_claim_the_plan_declares_not_powered_is_reported_not_judged(monkeypatch):
  monkeypatch.setattr(R, "NOT_POWERED", frozenset({"no_cost"}))
  pairs = R.family(synthetic())
  got = {t.key: v for t, v in pairs}
  assert got["no_cost"].verdict == "Not powered" and "muP - sp best loss per width" in " ".join(got["no_cost"].lines)
  # The other claims are decided as before, in a family one smaller.
  assert all(v.verdict == "Reproduced" for k, v in got.items() if k != "no_cost")
  assert "Holm over the family of 4 claims" in " ".join(got["transfer"].lines)

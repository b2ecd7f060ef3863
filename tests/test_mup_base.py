"""The muP base stage (experiments/studies/mup_base/): its grid, its choice rule on synthetic
results (each way it can come out), and its report page."""

import json
import math

import numpy as np
import pytest

from research import curves
from research import registry
from research import report as reporting
from research import sweep as base
from experiments.studies.mup_base import grid
from experiments.studies.mup_base import rules

RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
SEEDS = (200, 201, 202)
UNIGRAM = 6.0


def runs_for(scores: dict, optimum=1e-2, curvature=0.3, seeds=SEEDS, noise=0.01, learns=()):
  """Synthetic runs: each pair a parabola in log(rate) with its best loss ``scores[pair]`` at
  ``optimum`` (per pair if a dict), per-seed noise; a pair in ``learns=False`` sits on the
  unigram plateau."""
  out = []
  rng = np.random.default_rng(0)
  for pair, best in scores.items():
    opt = optimum[pair] if isinstance(optimum, dict) else optimum
    for seed in seeds:
      shift = rng.normal(0, noise)
      for lr in RATES:
        loss = best + shift + curvature * math.log(lr / opt) ** 2
        if pair in learns:
          loss = UNIGRAM + 0.05
        out.append(curves.Run((rules.arm_name(*pair),), lr, seed, loss, 6.3, unigram=UNIGRAM))
  return out


def test_the_grid_is_the_base_width_under_mup_on_unseen_seeds():
  sweep = grid.get_sweep("cpu")
  assert len(sweep.cells) == len(rules.READOUTS) * len(rules.ATTENTIONS) * 5 * 3 == 225
  assert len(base.groups(sweep.cells)) == 15  # a group's members differ in rate and seed alone
  for c in sweep.cells:
    o = c.overrides
    assert o["model.d_model"] == o["model.base_width"] == 32 and o["model.parametrization"] == "mup"
    assert (o["model.mup_attention"], o["model.mup_decay"]) == ("base", "constant")
    assert rules.parse(c.arms[0]) == (o["model.readout_multiplier"], o["model.attention_multiplier"])
    assert c.refinable
  # No earlier study trained these seeds (the committed studies used 0-2; the confirmatory
  # norm x MLP study 100 and up).
  confirm = {c.seed for c in registry.load("norm_mlp_confirm", "cpu").cells}
  assert {c.seed for c in sweep.cells} == set(SEEDS) and not set(SEEDS) & (confirm | {0, 1, 2})
  with pytest.raises(Exception, match="--scale='big'"):
    grid.get_sweep("big")


def test_the_lowest_score_is_chosen_with_its_rate_and_its_difference_from_the_default():
  scores = {(r, a): 4.5 for r in rules.READOUTS for a in rules.ATTENTIONS}
  scores[(4.0, 1.0)] = 4.2
  choice = rules.choose(runs_for(scores, optimum={p: (2e-2 if p == (4.0, 1.0) else 1e-2) for p in scores}))
  assert choice.arm == rules.arm_name(4.0, 1.0) and (choice.readout, choice.attention) == (4.0, 1.0)
  assert choice.lr == pytest.approx(2e-2, rel=0.05)
  assert choice.lr_interval[0] < choice.lr < choice.lr_interval[1]
  assert choice.against_default.hi < 0 and choice.against_default.diff == pytest.approx(-0.3, abs=0.03)
  assert not any("edge of the multiplier grid" in l for l in choice.lines)
  (verdict,) = rules.judge(runs_for(scores))
  assert verdict.verdict == "Chosen" and "readout multiplier 4" in verdict.lines[0]


def test_a_tie_keeps_the_pair_nearer_the_default():
  scores = {(1.0, 1.0): 4.50, (2.0, 1.0): 4.49, (8.0, 0.5): 4.49}
  choice = rules.choose(runs_for(scores, noise=0.0))
  assert choice.arm == rules.arm_name(1.0, 1.0) and choice.against_default is None
  assert any("within 0.02 nats" in l for l in choice.lines)
  # Beyond the tie margin the better pair wins.
  scores[(2.0, 1.0)] = 4.40
  assert rules.choose(runs_for(scores, noise=0.0)).arm == rules.arm_name(2.0, 1.0)


def test_an_edge_optimum_or_a_plateau_is_not_eligible_and_none_eligible_is_inconclusive():
  scores = {(1.0, 1.0): 4.5, (2.0, 1.0): 4.3, (4.0, 1.0): 4.0}
  # (4, 1) is best, but its optimum lies below the rates tried; (2, 1) sits on the plateau.
  choice = rules.choose(runs_for(scores, optimum={(1.0, 1.0): 1e-2, (2.0, 1.0): 1e-2, (4.0, 1.0): 1e-4},
                                 learns=((2.0, 1.0),)))
  reasons = {s.arm: s.reason for s in choice.settings}
  assert "rate grid's edge" in reasons[rules.arm_name(4.0, 1.0)]
  assert reasons[rules.arm_name(2.0, 1.0)] == "a seed does not learn"
  assert choice.arm == rules.arm_name(1.0, 1.0)
  nothing = rules.choose(runs_for({(1.0, 1.0): 4.5}, learns=((1.0, 1.0),)))
  assert nothing.arm is None and "No multiplier pair is eligible" in nothing.lines[0]
  (verdict,) = rules.judge(runs_for({(1.0, 1.0): 4.5}, learns=((1.0, 1.0),)))
  assert verdict.verdict == "Inconclusive"


def test_a_choice_at_the_multiplier_grids_edge_is_flagged():
  scores = {(r, 1.0): 4.5 - 0.05 * i for i, r in enumerate(rules.READOUTS)}  # best at 16
  choice = rules.choose(runs_for(scores, noise=0.0))
  assert choice.readout == 16.0 and any("edge of the multiplier grid" in l for l in choice.lines)


def test_the_report_page_shows_the_grid_and_writes_the_choice(tmp_path):
  scores = {(r, a): 4.5 for r in (1.0, 4.0) for a in (1.0,)}
  scores[(4.0, 1.0)] = 4.3
  cells = [{"name": f"c{i}", "group": r.arms[0],
            "arms": list(r.arms), "learning_rate": r.lr, "seed": r.seed, "final_val_loss": r.final,
            "initial_val_loss": r.initial, "status": "completed", "unigram_val_loss": UNIGRAM,
            "overrides": {}, "wall_time_s": 1.0}
           for i, r in enumerate(runs_for(scores))]
  from experiments.studies.mup_base import report  # pylint: disable=import-outside-toplevel
  page = report.page({}, cells, str(tmp_path))
  text = "\n".join(page.sections)
  (row,) = [l for l in text.splitlines() if l.startswith("| 4 | 1 |")]
  assert row.endswith("| 3 | **chosen** |") and float(row.split("|")[3]) == pytest.approx(4.3, abs=0.02)
  (other,) = [l for l in text.splitlines() if l.startswith("| 1 | 1 |")]
  assert other.endswith("| yes |")
  assert "`model.readout_multiplier=4`" in text and page.plots == ["base_grid.png"]
  assert (tmp_path / "base_grid.png").exists()
  body = json.loads(json.dumps(reporting._plain(page.results), allow_nan=True))
  assert body["choice"]["readout_multiplier"] == 4.0 and body["choice"]["attention_multiplier"] == 1.0


def test_seeds_that_leave_the_plateau_at_different_steps_learn_and_one_left_on_it_does_not():
  # Best losses 5.2, 5.8 and 4.9 against a unigram plateau of 6.27: every seed escaped, at
  # different steps; a 3-seed t interval reaches above the plateau, so curves.learns says no.
  def arm(bests):
    return [curves.Run(("a",), lr, seed, best + 0.3 * math.log(lr / 1e-2) ** 2, 6.5, unigram=6.27)
            for seed, best in enumerate(bests) for lr in RATES]
  assert curves.learns_every_seed(arm([5.2, 5.8, 4.9])) and not curves.learns(arm([5.2, 5.8, 4.9]))
  assert not curves.learns_every_seed(arm([5.2, 6.25, 4.9]))  # one seed still on the plateau

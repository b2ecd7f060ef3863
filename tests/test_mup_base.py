"""The muP base stage (experiments/studies/mup_base.py): its grid, its choice (``kinds.Choice``)
on synthetic results (each way it can come out), its report section with results.json's
``choice``, its cells the committed sweep's and its choice on the committed cells the one
recorded before it was re-expressed."""

import json
import math

import numpy as np
import pytest

from research import cells as cells_lib
from research import curves
from research import kinds
from research import registry
from research import report as reporting
from research import sweep as base
from experiments.studies.mup_base import STUDY

RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
SEEDS = (200, 201, 202)
UNIGRAM = 6.0
READOUTS, ATTENTIONS = (1.0, 2.0, 4.0, 8.0, 16.0), (0.5, 1.0, 2.0)
CHOICE = STUDY.claims[0]
COMMITTED = "results/mup_base-cpu"


def name(pair):
  return f"readout={pair[0]:g},attention={pair[1]:g}"


def cells_for(scores: dict, optimum=1e-2, curvature=0.3, seeds=SEEDS, noise=0.01, learns=()):
  """Synthetic cell records: each pair a parabola in log(rate) with its best loss
  ``scores[pair]`` at ``optimum`` (per pair if a dict), per-seed noise; a pair in ``learns``
  sits on the unigram plateau."""
  out = []
  rng = np.random.default_rng(0)
  for pair, best in scores.items():
    opt = optimum[pair] if isinstance(optimum, dict) else optimum
    for seed in seeds:
      shift = rng.normal(0, noise)
      for lr in RATES:
        loss = UNIGRAM + 0.05 if pair in learns else best + shift + curvature * math.log(lr / opt) ** 2
        out.append({"name": f"{name(pair)}-{lr:g}-{seed}", "group": name(pair), "arms": [name(pair)],
                    "learning_rate": lr, "seed": seed, "final_val_loss": loss, "initial_val_loss": 6.3,
                    "status": "completed", "unigram_val_loss": UNIGRAM, "wall_time_s": 1.0,
                    "overrides": {"model.readout_multiplier": pair[0], "model.attention_multiplier": pair[1]}})
  return out


def choose(cells):
  return CHOICE.choose(STUDY.data(cells))


def test_the_grid_is_the_base_width_under_mup_on_unseen_seeds():
  sweep = registry.load("mup_base", "cpu")
  assert len(sweep.cells) == len(READOUTS) * len(ATTENTIONS) * 5 * 3 == 225
  assert len(base.groups(sweep.cells)) == 15  # a group's members differ in rate and seed alone
  for c in sweep.cells:
    o = c.overrides
    assert o["model.d_model"] == o["model.base_width"] == 32 and o["model.parametrization"] == "mup"
    assert (o["model.mup_attention"], o["model.mup_decay"]) == ("base", "constant")
    assert c.arms == (name((o["model.readout_multiplier"], o["model.attention_multiplier"])),)
    assert c.refinable
  assert not {c.seed for c in sweep.cells} & registry.used_seeds("mup_base")
  assert len(registry.load("mup_base", "smoke").cells) == 2 * 3 * 2
  with pytest.raises(Exception, match="--scale='big'"):
    registry.load("mup_base", "big")


def test_the_lowest_score_is_chosen_with_its_rate_and_its_difference_from_the_default():
  scores = {(r, a): 4.5 for r in READOUTS for a in ATTENTIONS}
  scores[(4.0, 1.0)] = 4.2
  chosen, interval, lines, against, _ = choose(cells_for(scores, optimum={p: (2e-2 if p == (4.0, 1.0) else 1e-2) for p in scores}))
  assert chosen.arm == name((4.0, 1.0)) and chosen.values == {"readout_multiplier": 4.0, "attention_multiplier": 1.0}
  assert chosen.lr == pytest.approx(2e-2, rel=0.05) and interval[0] < chosen.lr < interval[1]
  assert against.hi < 0 and against.diff == pytest.approx(-0.3, abs=0.03)
  assert not any("edge of the grid" in l for l in lines)
  (verdict,) = STUDY.judge(cells_for(scores))
  assert verdict.verdict == kinds.CHOSEN and "readout multiplier 4" in verdict.lines[0]
  assert verdict.robustness == ""  # a choice is not re-judged without a seed


def test_a_tie_keeps_the_pair_nearer_the_default():
  scores = {(1.0, 1.0): 4.50, (2.0, 1.0): 4.49, (8.0, 0.5): 4.49}
  chosen, _, lines, against, _ = choose(cells_for(scores, noise=0.0))
  assert chosen.arm == name((1.0, 1.0)) and against is None
  assert any("within 0.02 nats" in l for l in lines)
  scores[(2.0, 1.0)] = 4.40  # beyond the tie margin the better pair wins
  assert choose(cells_for(scores, noise=0.0))[0].arm == name((2.0, 1.0))


def test_an_edge_optimum_or_a_plateau_is_not_eligible_and_none_eligible_is_inconclusive():
  scores = {(1.0, 1.0): 4.5, (2.0, 1.0): 4.3, (4.0, 1.0): 4.0}
  # (4, 1) is best, but its optimum lies below the rates tried; (2, 1) sits on the plateau.
  chosen, _, _, _, table = choose(cells_for(scores, optimum={(1.0, 1.0): 1e-2, (2.0, 1.0): 1e-2, (4.0, 1.0): 1e-4},
                                            learns=((2.0, 1.0),)))
  reasons = {s.arm: s.reason for s in table}
  assert "rate grid's edge" in reasons[name((4.0, 1.0))] and reasons[name((2.0, 1.0))] == "a seed does not learn"
  assert chosen.arm == name((1.0, 1.0))
  nothing = cells_for({(1.0, 1.0): 4.5}, learns=((1.0, 1.0),))
  assert choose(nothing)[0] is None and "No arm is eligible" in choose(nothing)[2][0]
  assert [v.verdict for v in STUDY.judge(nothing)] == ["Inconclusive"]


def test_a_choice_at_the_multiplier_grids_edge_is_flagged():
  chosen, _, lines, _, _ = choose(cells_for({(r, 1.0): 4.5 - 0.05 * i for i, r in enumerate(READOUTS)}, noise=0.0))
  assert chosen.values["readout_multiplier"] == 16.0 and any("edge of the grid" in l for l in lines)


def test_the_report_page_shows_the_grid_and_writes_the_choice(tmp_path):
  page = STUDY.page({"scale": "cpu"}, cells_for({(1.0, 1.0): 4.5, (4.0, 1.0): 4.3}), str(tmp_path))
  text = "\n".join(page.sections)
  (row,) = [l for l in text.splitlines() if l.startswith("| 4 | 1 |")]
  assert row.endswith("| 3 | **chosen** |") and float(row.split("|")[3]) == pytest.approx(4.3, abs=0.02)
  (other,) = [l for l in text.splitlines() if l.startswith("| 1 | 1 |")]
  assert other.endswith("| yes |") and "`model.readout_multiplier=4`" in text
  assert "choice_grid.png" in page.plots and (tmp_path / "choice_grid.png").exists()
  body = json.loads(json.dumps(reporting.rounded(page.results), allow_nan=True))
  assert set(body["choice"]) == {"readout_multiplier", "attention_multiplier", "learning_rate", "learning_rate_interval"}
  assert (body["choice"]["readout_multiplier"], body["choice"]["attention_multiplier"]) == (4.0, 1.0)


def test_its_cells_are_the_committed_sweeps():
  key = lambda c: (c["name"], c["overrides"], tuple(c["arms"]), c["seed"], c["group"], c["refinable"])
  with open(f"{COMMITTED}/sweep.json") as f:
    committed = sorted((key(c) for c in json.load(f)["cells"] if c["round"] == 0), key=repr)
  assert sorted((key(vars(c)) for c in registry.load("mup_base", "cpu").cells), key=repr) == committed


def test_the_committed_cells_give_the_choice_recorded_before_the_reexpression(tmp_path):
  _, cells, _ = cells_lib.load(COMMITTED)
  with open(f"{COMMITTED}/{reporting.BEFORE}") as f:
    before = json.load(f)
  assert [reporting._figures(v) for v in STUDY.judge(cells)] == [reporting._figures(v) for v in before["verdicts"]]
  # ... and the choice the muTransfer ladder, the z-loss studies and the coordinate check read.
  with open(f"{COMMITTED}/results.json") as f:
    recorded = json.load(f)["choice"]
  made = reporting.rounded(CHOICE.section(STUDY.data(cells), str(tmp_path)).results)["choice"]
  # To rounding: the fit's last digits move with the CPU's reduction order (CI's differs from ours),
  # and results.json keeps reporting.DIGITS significant digits so that every CPU writes the same bytes.
  assert made.keys() == recorded.keys()
  for key, value in recorded.items():
    assert made[key] == pytest.approx(value, rel=10.0 ** (1 - reporting.DIGITS)), key


def test_seeds_that_leave_the_plateau_at_different_steps_learn_and_one_left_on_it_does_not():
  # Best losses 5.2, 5.8 and 4.9 against a unigram plateau of 6.27: every seed escaped, at
  # different steps; a 3-seed t interval reaches above the plateau, so curves.learns says no.
  def arm(bests):
    return [curves.Run(("a",), lr, seed, best + 0.3 * math.log(lr / 1e-2) ** 2, 6.5, unigram=6.27)
            for seed, best in enumerate(bests) for lr in RATES]
  assert curves.learns_every_seed(arm([5.2, 5.8, 4.9])) and not curves.learns(arm([5.2, 5.8, 4.9]))
  assert not curves.learns_every_seed(arm([5.2, 6.25, 4.9]))  # one seed still on the plateau

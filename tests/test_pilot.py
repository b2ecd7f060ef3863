"""The pilot gate (research/pilot.py) and the measures that see what sensitivity cannot (issue 69): the
rate range near an arm's own best, the rates at which it learns, and residual growth as the change from
initialisation."""

import math
import os

import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver

from andrea_jax import errors
from research import cells as cells_lib
from research import curves
from research import kind_base
from research import kinds
from research import pilot
from research import registry
from research.study import Arm, Grid, Study
from tests.synthetic_runs import arm as synthetic_arm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
HALF = tuple(10 ** x for x in (-3, -2.5, -2, -1.5, -1))  # exact half decades, for figures by hand
UNIGRAM, INIT = 5.5, 6.3


def record(arm, lr, seed, final, init=None, end=None):
  """A finished cell as research/cells.py records it (``init``/``end``: residual_norm per layer)."""
  return {"name": f"{arm}-lr{lr:g}-s{seed}", "arms": [arm], "seed": seed, "round": 0, "group": arm,
          "learning_rate": lr, "status": "completed", "final_val_loss": final, "initial_val_loss": INIT,
          "unigram_val_loss": UNIGRAM, "overrides": {"train.learning_rate": lr, "train.seed": seed},
          "init": {"residual_norm": list(init or ())}, "end": {"residual_norm": list(end or ())},
          "steps": 10, "n_params": 1, "wall_time_s": 1.0, "train_curve": [], "val_curve": [], "group_size": 1}


def study(design="Confirmatory: test", learns=True, claims=()):
  return Study("t", "q", design, (Arm("a"), Arm("b", {"model.qk_norm": True}, learns=learns)),
               {"cpu": Grid(RATES, (5000, 5001, 5002)), "smoke": Grid(RATES, (0, 1), smoke=True)}, claims)


# ----------------------------------------------------------------------------- the measures


def test_rate_range_is_the_decades_within_the_margin_of_the_best_interpolated_on_the_grid():
  # Losses at log10 rates -3, -2.5, -2, -1.5, -1: best 4.0 at 1e-2; 4.05 and 4.08 within 0.1 of it,
  # 4.3 and 4.5 not. Crossing at 4.1 by hand: left between -3 (4.3) and -2.5 (4.05), 4.1 is 0.05 of
  # 0.25 from 4.05: -2.5 - 0.5 * 0.2 = -2.6; right between -1.5 (4.08) and -1 (4.5): -1.5 + 0.5 *
  # 0.02 / 0.42. Width: their difference.
  points = dict(zip(HALF, (4.3, 4.05, 4.0, 4.08, 4.5)))
  left, right = -2.5 - 0.5 * (0.05 / 0.25), -1.5 + 0.5 * (0.02 / 0.42)
  assert curves.within_best(points, 0.1) == pytest.approx(right - left)
  # A point within the margin past one that is not does not count (the interval is contiguous);
  # at the grid's edge the interval stops there.
  assert curves.within_best(dict(zip(HALF, (4.05, 4.3, 4.0, 4.3, 4.05))), 0.1) == pytest.approx(
      (-2 + 0.5 * 0.1 / 0.3) - (-2 - 0.5 * 0.1 / 0.3))
  assert curves.within_best(dict(zip(HALF, (4.0, 4.02, 4.04, 4.06, 4.08))), 0.1) == pytest.approx(2.0)
  assert math.isnan(curves.within_best({}, 0.1))


def test_rate_range_per_seed_reads_each_seeds_curve_over_the_base_rates():
  runs = synthetic_arm("a", dict(zip(RATES, (4.3, 4.05, 4.0, 4.08, 4.5))), seeds=3, spread=0.0)
  got = curves.rate_range(runs)
  assert sorted(got) == [0, 1, 2] and all(v == pytest.approx(
      curves.within_best(dict(zip(RATES, (4.3, 4.05, 4.0, 4.08, 4.5))))) for v in got.values())
  # Over the arm's base rates only: a rate added around the optimum (round 1) is not read.
  extra = [curves.Run(("a",), 5e-3, s, 3.0, 6.3, round=1) for s in range(3)]
  assert curves.rate_range(runs + extra) == pytest.approx(got)
  assert kind_base.QUANTITIES["rate_range"].per_seed is curves.rate_range and "decades" in kind_base.QUANTITIES["rate_range"].what


def test_the_rates_an_arm_learns_at_are_those_where_every_seed_ends_below_the_unigram():
  u = 6.27  # tests/synthetic_runs.py's unigram
  curve = {3e-4: u - 0.05, 1e-3: u - 0.5, 3e-3: u - 1.0, 1e-2: u - 0.3, 3e-2: u}
  runs = synthetic_arm("a", curve, seeds=3, spread=0.01)
  assert curves.learning_rates(runs) == [1e-3, 3e-3, 1e-2]
  assert curves.learning_counts(runs) == {0: 3.0, 1: 3.0, 2: 3.0}
  # A diverged model counts at its initial loss: that seed does not learn there.
  runs = synthetic_arm("a", curve, seeds=3, spread=0.01, diverged=((3e-3, 1),))
  assert curves.learning_rates(runs) == [1e-3, 1e-2] and curves.learning_counts(runs)[1] == 2.0
  # Two seeds far below, one on the plateau: the mean is below, but the arm does not learn there.
  split = [curves.Run(("a",), 1e-2, s, x, 7.7, unigram=u) for s, x in enumerate((u - 1, u - 1, u))]
  assert curves.learning_rates(split) == [] and curves.learning_counts(split) == {0: 1.0, 1: 1.0, 2: 0.0}
  assert kind_base.QUANTITIES["learning_rates"].per_seed is curves.learning_counts


def test_residual_growth_as_the_change_from_initialisation():
  # Per seed: log(end last / end first) - log(init last / init first), at the seed's best rate.
  cells = []
  for seed, (g0, g1) in enumerate(((1.2, 1.5), (1.1, 1.3), (1.25, 1.25))):
    for lr, loss in ((1e-3, 4.5), (1e-2, 4.0), (1e-1, 4.6)):
      end = (0.3, 2.0, 2.0 * (g1 if lr == 1e-2 else 9.0))
      cells.append(record("a", lr, seed, loss, init=(0.3, 1.0, g0), end=end))
  data = kinds.Data.of(cells, (), cells_lib.to_run)
  change = kinds.Probe("residual_norm", "change").per_seed(data, "a")
  expected = {0: math.log(1.5) - math.log(1.2), 1: math.log(1.3) - math.log(1.1), 2: 0.0}
  assert change == pytest.approx(expected)
  end = kinds.Probe("residual_norm", "end").per_seed(data, "a")
  assert end == pytest.approx({0: math.log(1.5), 1: math.log(1.3), 2: math.log(1.25)})  # unchanged
  assert "log ratio" in kinds.Probe("residual_norm", "change").text()
  # A claim on it: growth training added, judged paired by seed.
  claim = kinds.Contrast("b grows less in training", terms=kinds.pair("b", "a"), predict="lower",
                         quantity=kinds.Probe("residual_norm", "change"), edge=False)
  b = [dict(c, arms=["b"], name="b" + c["name"], end={"residual_norm": [0.3, 2.0, 2.0 * c["init"]["residual_norm"][2]]})
       for c in cells]
  t = claim.test(kinds.Data.of(cells + b, (), cells_lib.to_run))
  assert t.effect.diff == pytest.approx(-np.mean(list(expected.values())))


# ----------------------------------------------------------------------------- declaring an arm


def test_a_match_claim_naming_an_arm_declared_not_to_learn_is_refused_at_definition():
  same = kinds.Contrast("b matches a", terms=kinds.pair("b", "a"), predict="same", margin=0.05)
  with pytest.raises(errors.ConfigError, match=r"calls \['b'\] a match") as e:
    study(learns=False, claims=(same,))
  assert "\n" not in str(e.value)
  with pytest.raises(errors.ConfigError, match="a match"):
    study(learns=False, claims=(kinds.Alike("b no worse", arms=("b",), reference="a", predict="below", margin=0.02),))
  study(learns=True, claims=(same,))  # a learner may be called a match
  study(learns=False, claims=(kinds.Contrast("b worse", terms=kinds.pair("b", "a"), predict="higher"),))


# ----------------------------------------------------------------------------- the gate


def pilot_cells(b_loss, seeds=pilot.SEEDS[:3]):
  return [record(a, 1e-2, s, loss + 0.01 * i) for a, loss in (("a", 4.0), ("b", b_loss))
          for i, s in enumerate(seeds)]


def test_the_pilot_is_the_studys_sweep_at_the_middle_rate_and_pilot_seeds():
  s = study()
  cells = pilot.sweep(s, "cpu").cells
  assert {c.learning_rate for c in cells} == {1e-2} and {c.seed for c in cells} == set(pilot.SEEDS[:3])
  assert {c.arms[0] for c in cells} == {"a", "b"} and all(c.overrides.get("model.qk_norm") for c in cells if c.arms[0] == "b")
  assert pilot.middle_rate((1, 2, 3, 4)) == 2 and pilot.middle_rate((3, 1, 2)) == 2
  assert pilot.needed(s, "cpu") and not pilot.needed(s, "smoke") and not pilot.needed(study("Exploratory: x"), "cpu")
  # No study's grid trains a pilot seed.
  for name in (n for n in registry.names() if registry.is_file(n)):
    st = registry.study(name)
    assert not {x for g in st.scales.values() for x in (*g.seeds, *(y for v in g.arm_seeds.values() for y in v))} & set(pilot.SEEDS), name
  with pytest.raises(errors.ConfigError, match="reserved for pilots"):
    pilot.check_seeds(Study("t", "q", "Confirmatory: x", (Arm("a"),), {"cpu": Grid(RATES, (9000, 1))}, ()), "cpu")


def test_an_arm_at_the_unigram_in_its_pilot_stops_the_study_in_one_line():
  s = study()
  with pytest.raises(errors.ConfigError) as e:
    pilot.gate(s, "cpu", pilot.outcomes(s, "cpu", pilot_cells(UNIGRAM + 0.002)))
  line = str(e.value)
  assert "\n" not in line and "b: pilot loss 5.512 against the unigram's 5.500 at rate 0.01 (3 seeds)" in line
  assert "a:" not in line.split("before any cell trained:")[1]  # only the arm that failed
  pilot.gate(s, "cpu", pilot.outcomes(s, "cpu", pilot_cells(4.2)))  # both learn: it proceeds
  declared = study(learns=False)
  pilot.gate(declared, "cpu", pilot.outcomes(declared, "cpu", pilot_cells(UNIGRAM)))  # as declared
  with pytest.raises(errors.ConfigError, match="b: no finished pilot model"):
    pilot.gate(s, "cpu", [o for o in pilot.outcomes(s, "cpu", pilot_cells(4.2)) if o.arm == "a"])


def test_the_committed_norms_cells_at_the_middle_rate_would_have_stopped_the_study():
  # The referee's finding (issue 69): DyT and post-LN sat at the unigram at the middle rate.
  s = registry.study("norms")
  _, cells, _ = cells_lib.load(os.path.join(ROOT, "results", "norms-cpu"))
  mid = [c for c in cells if c["learning_rate"] == pilot.middle_rate(s.grid("cpu").rates) and c["seed"] < 1703]
  failed = {o.arm for o in pilot.outcomes(s, "cpu", mid) if not o.passed}
  assert failed == {"post", "dyt", "post-deep", "deepnorm-deep"}
  spreads = pilot.spreads(s, mid)
  assert spreads["RMSNorm's best loss matches LayerNorm's"].n == 3
  rms = {c["seed"]: c["final_val_loss"] for c in mid if c["arms"][0] == "rmsnorm"}
  pre = {c["seed"]: c["final_val_loss"] for c in mid if c["arms"][0] == "pre"}
  assert spreads["RMSNorm's best loss matches LayerNorm's"].sd == pytest.approx(np.std([rms[k] - pre[k] for k in rms], ddof=1))
  assert "Peri-LN is less sensitive to the learning rate than pre-LN" not in spreads  # needs the grid


def test_the_sweep_trains_the_pilot_first_and_no_cell_when_it_fails(tmp_path, monkeypatch):
  """End to end through ``experiments.sweep``: the pilot's models are trained by the sweep's runner
  (here a stand-in writing their files), an arm at the unigram stops the run in one line before the
  runner sees a cell of the study, and a passing pilot lets it go on."""
  from experiments import sweep as command  # pylint: disable=import-outside-toplevel
  from research import runner  # pylint: disable=import-outside-toplevel
  calls = []

  def run_sweep(sweep, workdir, *a, **kw):
    calls.append(workdir)
    if not workdir.endswith("-pilot"):
      return []
    loss = {"dyt": UNIGRAM} if bad else {}
    for c in sweep.cells:
      d = os.path.join(workdir, c.path)
      os.makedirs(d)
      runner.prepare_job(sweep, runner.Job([c], d, []), workdir)
      cells_lib.atomic_write(os.path.join(d, "summary.json"), cells_lib.json.dumps({
          "status": "completed", "steps": 12, "final_val_loss": loss.get(c.arms[0], 4.0), "initial_val_loss": INIT,
          "unigram_val_loss": UNIGRAM, "n_params": 1, "wall_time_s": 1.0}).encode())
    return [{"path": c.path, "status": "completed"} for c in sweep.cells]

  monkeypatch.setattr(runner, "run_sweep", run_sweep)
  for bad in (True, False):
    workdir = str(tmp_path / f"w{bad}")
    with flagsaver.flagsaver(sweep="norms", scale="smoke", workdir=workdir, pilot=True):
      flags.FLAGS.mark_as_parsed()
      if bad:
        with pytest.raises(errors.ConfigError, match=r"^study 'norms' stopped by its pilot .*dyt, n_layer 2: "
                                                     r"pilot loss 5.500 against the unigram's 5.500") as e:
          command.main([])
        assert "\n" not in str(e.value) and calls == [workdir + "-pilot"]  # no cell of the study
      else:
        calls.clear()
        with pytest.raises(SystemExit):
          command.main([])
        assert calls == [workdir + "-pilot", workdir]
        text = "\n".join(command.plan_lines(registry.load("norms", "smoke"), workdir, True))
        assert "Passed their pilot: pre, n_layer 2: pilot loss 4.000" in text and "Did not pass" not in text

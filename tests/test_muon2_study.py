"""The Muon study redone (experiments/studies/muon2.py): fresh seeds, its arms train what their labels
say (Muon as its references run it, the Adam branch's rate an arm each, WSD horizons branched off one
run), its spread recomputes from the committed muon study's cells, and its plan fits the CPU budget."""

import json
import math
import os
import statistics

from experiments.studies import muon2 as S
from research import pilot
from research import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_seed_of_an_earlier_study_nor_of_the_reserved_ranges():
  sweep = registry.load("muon2", "cpu")
  mine = {c.seed for c in sweep.cells} | {c.overrides["train.seed"] for c in sweep.cells}
  assert mine == set(S.SEEDS) and not mine & registry.used_seeds("muon2")
  reserved = set(range(1500, 1542)) | set(range(1900, 2000)) | set(pilot.SEEDS)  # other work's, and pilots'
  assert not mine & reserved


def test_the_arms_train_what_their_labels_say():
  by = {}
  for c in registry.load("muon2", "cpu").cells:
    by.setdefault(c.arms[0], []).append(c)
  assert set(by) == {"adamw", "muon-a0.3", "muon-a1", "muon-a3"}
  for arm, cells in by.items():
    o = [c.overrides for c in cells]
    assert {x["train.schedule"] for x in o} == {"wsd"} and {x["train.warmup_steps"] for x in o} == {S.WARMUP}
    assert {x["train.steps"] for x in o} == set(S.ADAMW_STEPS if arm == "adamw" else S.MUON_STEPS)
    # Every shorter horizon is a cooldown off the same arm's 600-step run, which keeps its branch steps.
    assert all(c.cooldown_from == f"{arm}-s{S.STEPS}" for c in cells if c.overrides["train.steps"] < S.STEPS)
    assert {c.trained_steps for c in cells if c.cooldown_from} == {round(0.2 * s) for s in {x["train.steps"] for x in o}
                                                                    if s < S.STEPS}
    if arm == "adamw":
      assert {x["train.optimizer"] for x in o} == {"adamw"}
      assert {x["train.learning_rate"] for x in o} == set(S.ADAMW_RATES)
      continue
    assert all(x["train.optimizer"] == "muon" and x["train.muon_split_qkv"] and x["train.muon_adam_decay"]
               and x["train.muon_consistent_rms"] == 0.2 for x in o)
    assert {x["train.adam_lr_ratio"] for x in o} == {float(arm.removeprefix("muon-a"))}
    assert {x["train.learning_rate"] for x in o} == set(S.MUON_RATES)
    assert cells[0].arms == (arm, "muon")  # the claims read every ratio's models as one arm, Muon


def test_the_planned_spread_recomputes_from_the_committed_muon_cells():
  """Per seed: AdamW's final loss at its best rate (by the mean over seeds) at 400 steps; the steps at
  which Muon's best over its rates reaches it, linear in log steps between its 200- and 400-step runs;
  the log of 400 over them. Their SD is the spread the plan uses, their mean the 1.99x the sources cite."""
  final = {}
  with open(os.path.join(ROOT, "results", "muon-cpu", "cells.jsonl"), encoding="utf-8") as f:
    for line in f:
      r = json.loads(line)
      final[(r["cell"]["arms"][0], r["cell"]["overrides"]["train.learning_rate"], r["cell"]["seed"])] = \
          r["summary"]["final_val_loss"]
  seeds = sorted({s for _, _, s in final})
  rates = lambda arm: sorted({lr for a, lr, _ in final if a == arm})
  best = min(rates("adamw"), key=lambda lr: statistics.mean(final[("adamw", lr, s)] for s in seeds))
  logs = []
  for s in seeds:
    half, full = (min(final[(arm, lr, s)] for lr in rates(arm)) for arm in ("muon-half", "muon"))
    logs.append(math.log(2) - (half - final[("adamw", best, s)]) / (half - full) * math.log(2))
  spread = S.STUDY.spread["*"]
  assert (round(statistics.stdev(logs), 3), len(logs)) == (spread.sd, spread.n)
  assert round(math.exp(statistics.mean(logs)), 2) == 1.99 and "1.99x" in S.STUDY.spread_source
  assert [c.effect for c in S.STUDY.claims] == [math.log(1.35), math.log(2 / 1.35), 0.0]


def test_the_plan_is_powered_and_fits_about_90_minutes_with_its_pilot():
  study, sweep = S.STUDY, registry.load("muon2", "cpu")
  assert all(powered for *_, powered in study.plan("cpu"))
  grid = study.minutes("cpu", sweep.cells)
  first = pilot.pilot_study(study, "cpu")
  gate = first.minutes("cpu", pilot.sweep(study, "cpu").cells)
  assert 60 < grid < 75 and grid + gate < 95, (grid, gate)

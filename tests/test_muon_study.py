"""The AdamW-vs-Muon study (experiments/studies/muon.py): fresh seeds, its arms train what their
labels say (Muon's optimizer fields; half the steps with warmup and evaluation scaled alike),
and its effects recompute from the committed recipe study's horizon leg."""

import json
import math
import os

import numpy as np

from experiments.studies import muon as S
from research import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_seed_of_an_earlier_study():
  used = registry.used_seeds("muon")
  assert {1000, 1001, 1002} <= used  # the check reads the committed studies
  sweep = registry.load("muon", "cpu")
  mine = {c.seed for c in sweep.cells} | {c.overrides["train.seed"] for c in sweep.cells}
  assert not mine & used, f"seeds {sorted(mine & used)} were used before"


def test_the_arms_train_what_their_labels_say():
  by = {}
  for c in registry.load("muon", "cpu").cells:
    by.setdefault(c.group.split("-d")[0], []).append(c.overrides)
  assert {o.get("train.optimizer", "adamw") for o in by["adamw"]} == {"adamw"}
  for arm, steps in (("muon", 400), ("muon-half", 200)):
    for o in by[arm]:
      assert o["train.optimizer"] == "muon" and o["train.muon_consistent_rms"] == 0.2
      assert o["train.adam_lr_ratio"] == 1.0
      assert (o["train.steps"], o["train.warmup_steps"], o["train.eval_every"]) == (steps, steps // 10, steps)
  assert {o["train.steps"] for o in by["adamw"]} == {400}
  assert len({o["train.learning_rate"] for o in by["muon"]}) == len(S.RATES)  # its own grid, tuned


def test_the_planned_effects_recompute_from_the_recipe_horizon_leg():
  """The 200 -> 400 step drop of the best loss at d128 (sp, plain, 16 sequences), per seed's best
  rate, is the doubling the effects read: 0.34 nats; 1.35x is 0.43 of it, 2x vs 1.35x 0.57."""
  best = {}
  with open(os.path.join(ROOT, "results", "recipe-cpu", "cells.jsonl"), encoding="utf-8") as f:
    for line in f:
      r = json.loads(line)
      o, s = r["cell"]["overrides"], r["summary"]
      if (o["model.d_model"], o["model.n_layer"], o["train.batch_size"]) != (128, 2, 16) or \
          "model.parametrization" in o or "model.depth_rule" in o or s.get("final_val_loss") is None:
        continue
      k = (o["train.steps"], r["cell"]["seed"])
      best[k] = min(best.get(k, math.inf), s["final_val_loss"])
  drop = np.mean([best[(200, s)] - best[(400, s)] for s in (1000, 1001, 1002)])
  assert round(drop, 2) == 0.34
  efficiency = {c.claim: c.effect for c in S.STUDY.claims}
  assert [round(math.log2(1.35) * drop, 2), round((1 - math.log2(1.35)) * drop, 2)] == list(efficiency.values())

"""The z-loss probe (experiments/studies/zloss_probe.py): its finding (``kinds.Finding``) coming
out found, not found and inconclusive on synthetic models, its report section, its cells the
committed sweep's and its finding on the committed cells the one recorded before it was
re-expressed."""

import json
import math

import pytest

from research import claims
from research import cells as cells_lib
from research import kinds
from research import registry
from research import report as reporting
from experiments.studies.zloss_probe import STUDY

RATES = (1e-2, 3e-2, 1e-1, 3e-1)
V = 512
LOG_V = math.log(V)
COMMITTED = "results/zloss_probe-cpu"
FINDING = STUDY.claims[0]


def models(excess, widths=(64, 128), seeds=(400, 401), diverged=(), start=9.0):
  """Cell records of every (width, decay, z-loss, rate, seed), log Z starting at ``start`` and
  ending ``excess(width, decay, z_loss, rate, seed)`` above log V; those in ``diverged`` did not
  complete."""
  out = []
  for w in widths:
    for wd in (0.1, 0.0):
      for z in (0.0, 1e-4):
        for lr in RATES:
          for s in seeds:
            done = (w, wd, z, lr, s) not in diverged
            out.append({"name": f"wd{wd:g}-z{z:g}-d{w}-lr{lr:g}-seed{s}", "arms": [f"wd{wd:g}+z{z:g}"],
                        "seed": s, "learning_rate": lr, "status": "completed" if done else "diverged",
                        "final_val_loss": 4.0 if done else None,
                        "overrides": {"model.d_model": w, "model.vocab_size": V,
                                      "train.weight_decay": wd, "train.z_loss": z, "train.steps": 200},
                        "log_z_curve": [[0, start], [200, LOG_V + excess(w, wd, z, lr, s)]]})
  return out


def find(cells):
  return FINDING.find(STUDY.data(cells))


def runaway(w, wd, z, lr, s):
  """Without weight decay log Z runs away from 1e-1 up, z-loss holds it; otherwise it stays."""
  return -4.0 - s % 2 if (wd == 0 and lr >= 1e-1 and z == 0) else -0.5 if wd == 0 and lr >= 1e-1 else 0.3


def test_found_where_log_z_runs_away_without_weight_decay():
  verdict, at, grows, lines = find(models(runaway))
  assert verdict == kinds.FOUND and at == {"model.d_model": 128}
  assert grows == [("wd0+z0", 0.1), ("wd0+z0", 0.3)]
  assert ("d_model 128, weight decay 0, rate 0.1: log_z at the end minus log V, median -4.50 nats; "
          "wd0+z0.0001: median -0.50 (stays).") in lines
  assert lines[-1] == "Found at d_model 128: weight decay 0 from rate 0.1."


def test_not_found_when_log_z_stays_everywhere():
  verdict, _, grows, lines = find(models(lambda *a: 0.6 if a[3] == 3e-1 else -0.2))
  assert verdict == kinds.NOT_FOUND and grows == [] and "largest |median| 0.60" in lines[0]
  # A log Z that starts far from log V (large logits at init) and comes back is learning, not
  # a divergence: what the probe's first rule, on the drift from step 0, called one.
  assert find(models(lambda *a: 0.3, start=LOG_V + 3.0))[0] == kinds.NOT_FOUND
  # Growth at the narrow width alone is not the finding: it is judged at the widest.
  assert find(models(lambda w, *a: -5.0 if w == 64 else 0.1))[0] == kinds.NOT_FOUND
  # ... and growth with z-loss alone is shown beside, not found.
  assert find(models(lambda w, wd, z, lr, s: 5.0 if z else 0.1))[0] == kinds.NOT_FOUND


def test_inconclusive_when_seeds_disagree_or_a_model_diverged():
  verdict, _, _, lines = find(models(lambda w, wd, z, lr, s: -5.0 if (s == 400 and wd == 0 and z == 0) else 0.1))
  assert verdict == claims.INCONCLUSIVE and "mixed" in lines[0]
  assert find(models(lambda *a: 0.1, diverged={(128, 0.0, 0.0, 3e-1, 401)}))[0] == claims.INCONCLUSIVE
  assert find([])[0] == claims.INCONCLUSIVE


def test_the_finding_is_a_verdict_neither_planned_nor_rejudged_without_a_seed(tmp_path):
  (verdict,) = STUDY.judge(models(runaway))
  assert verdict.verdict == "Found" and verdict.robustness == "" and verdict.effect is None
  assert STUDY.plan("cpu") == [] and "nothing to power" in STUDY.plan_lines("cpu")[0]
  cells = models(runaway)
  cells[-1]["status"] = "diverged"  # d128, decay 0, z-loss 1e-4, rate 0.3, seed 401
  page = STUDY.page({"scale": "cpu"}, cells, str(tmp_path))
  text = "\n".join(page.sections)
  assert "| wd0+z0 | d_model 128 | 0.1 | 9.00 | 1.74 | -4.50 (-4.00, -5.00) | grows | 4.000 |" in text
  assert "| wd0+z0.0001 | d_model 128 | 0.3 | 9.00 | 5.74 | -0.50 (-0.50, —) | mixed | 4.000 |" in text
  assert page.results["finding"] == {"verdict": "Found", "d_model": 128, "moved": [
      {"arm": "wd0+z0", "weight_decay": 0.0, "learning_rate": 0.1},
      {"arm": "wd0+z0", "weight_decay": 0.0, "learning_rate": 0.3}]}
  assert all((tmp_path / p).exists() for p in page.plots if p)


def test_its_cells_are_the_committed_sweeps_on_seeds_no_other_study_used():
  key = lambda c: (c["name"], c["overrides"], tuple(c["arms"]), c["seed"], c["group"])
  with open(f"{COMMITTED}/sweep.json") as f:
    committed = sorted(map(key, json.load(f)["cells"]), key=repr)
  cells = [vars(c) for c in registry.load("zloss_probe", "cpu").cells]
  assert sorted(map(key, cells), key=repr) == committed
  assert not {c["seed"] for c in cells} & registry.used_seeds("zloss_probe")
  smoke = registry.load("zloss_probe", "smoke")
  assert smoke.description.startswith("**Smoke scale") and len(smoke.cells) == 2 * 2 * 2 * 2 * 2


def test_the_committed_cells_give_the_finding_recorded_before_the_reexpression():
  _, cells, _ = cells_lib.load(COMMITTED)
  with open(f"{COMMITTED}/{reporting.BEFORE}") as f:
    before = json.load(f)
  assert [reporting._figures(v) for v in STUDY.judge(cells)] == [reporting._figures(v) for v in before["verdicts"]]
  assert [v["verdict"] for v in before["verdicts"]] == ["Found"]


@pytest.mark.parametrize("arm", ["wd9+z0"])
def test_an_arm_the_study_does_not_define_is_an_error(arm):
  import dataclasses  # pylint: disable=import-outside-toplevel
  with pytest.raises(Exception, match="names arms"):
    dataclasses.replace(STUDY, claims=(dataclasses.replace(FINDING, arms=(arm,)),))

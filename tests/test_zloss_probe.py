"""The z-loss probe (experiments/studies/zloss_probe/): its finding rule coming out found, not
found and inconclusive on synthetic models, its grid on unseen seeds, and its report page."""

import math

import pytest

from research import claims
from research import registry
from experiments.studies.mup_base import grid as base_grid
from experiments.studies.zloss_probe import grid
from experiments.studies.zloss_probe import report
from experiments.studies.zloss_probe import rules as R

RATES = (1e-2, 3e-2, 1e-1, 3e-1)


V = 512
LOG_V = math.log(V)


def models(excess, widths=(64, 128), seeds=(400, 401), diverged=(), start=9.0):
  """Every (width, decay, z-loss, rate, seed), log Z starting at ``start`` and ending
  ``excess(width, decay, z_loss, rate, seed)`` above log V; those in ``diverged`` did not
  complete."""
  return [R.Row(w, V, wd, z, lr, s, (w, wd, z, lr, s) not in diverged, start,
                LOG_V + excess(w, wd, z, lr, s), 4.0)
          for w in widths for wd in (0.1, 0.0) for z in (0.0, 1e-4) for lr in RATES for s in seeds]


def runaway(w, wd, z, lr, s):
  """Without weight decay log Z runs away from 1e-1 up, z-loss holds it; otherwise it stays."""
  return -4.0 - s % 2 if (wd == 0 and lr >= 1e-1 and z == 0) else -0.5 if wd == 0 and lr >= 1e-1 else 0.3


def test_found_where_log_z_runs_away_without_weight_decay():
  f = R.find(models(runaway))
  assert f.verdict == R.FOUND and f.width == 128 and f.grows == [(0.0, 0.1), (0.0, 0.3)]
  assert ("d128, weight decay 0, rate 0.1: log Z minus log V, median -4.50 nats; with z-loss: "
          "median excess -0.50 (stays).") in f.lines
  assert f.lines[-1] == "A z-loss claim can be judged at d128, weight decay 0 from rate 0.1."


def test_not_found_when_log_z_stays_everywhere():
  f = R.find(models(lambda *a: 0.6 if a[3] == 3e-1 else -0.2))
  assert f.verdict == R.NOT_FOUND and f.grows == []
  assert "largest |median excess| 0.60" in f.lines[0]
  # A log Z that starts far from log V (large logits at init) and comes back is learning, not
  # a divergence: what the probe's first rule, on the drift from step 0, called one.
  assert R.find(models(lambda *a: 0.3, start=LOG_V + 3.0)).verdict == R.NOT_FOUND
  # Growth at the narrow width alone is not the finding: it is judged at the widest.
  assert R.find(models(lambda w, *a: -5.0 if w == 64 else 0.1)).verdict == R.NOT_FOUND


def test_inconclusive_when_seeds_disagree_or_a_model_diverged():
  split = R.find(models(lambda w, wd, z, lr, s: -5.0 if (s == 400 and wd == 0 and z == 0) else 0.1))
  assert split.verdict == claims.INCONCLUSIVE and "mixed" in split.lines[0]
  gone = R.find(models(lambda *a: 0.1, diverged={(128, 0.0, 0.0, 3e-1, 401)}))
  assert gone.verdict == claims.INCONCLUSIVE
  assert R.find([]).verdict == claims.INCONCLUSIVE


def test_the_grid_runs_every_setting_on_unseen_seeds_with_the_base_multipliers():
  sweep = grid.get_sweep("cpu", {"readout_multiplier": 8.0, "attention_multiplier": 1.0})
  assert len(sweep.cells) == 2 * 2 * 2 * 4 * 2 and len({c.group for c in sweep.cells}) == 8
  for c in sweep.cells:
    o = c.overrides
    assert c.arms == (grid.arm_name(o["train.weight_decay"], o["train.z_loss"]),)
    assert o["model.readout_multiplier"] == 8.0 and o.get("model.parametrization", "sp") == "sp"
    assert o["diagnostics.enabled"] and o["diagnostics.every"] == 50
  earlier = ({c.seed for c in registry.load("norm_mlp_confirm", "cpu").cells} | {0, 1, 2}
             | {c.seed for c in base_grid.get_sweep("cpu").cells} | {c.seed for c in registry.load("mutransfer", "cpu").cells})
  assert not {c.seed for c in sweep.cells} & earlier


def test_the_report_page_tabulates_each_setting_and_records_the_finding(tmp_path):
  cells = []
  for i, r in enumerate(models(runaway)):
    cells.append({"name": f"c{i}", "arms": [grid.arm_name(r.weight_decay, r.z_loss)], "seed": r.seed,
                  "learning_rate": r.lr, "status": "completed", "final_val_loss": r.final,
                  "overrides": {"model.d_model": r.width, "model.vocab_size": V,
                                "train.weight_decay": r.weight_decay, "train.z_loss": r.z_loss},
                  "init": {"log_z": r.log_z_init}, "end": {"log_z": r.log_z_end}})
  cells[-1]["status"] = "diverged"  # d128, decay 0, z-loss 1e-4, rate 0.3, seed 401
  page = report.page({}, cells, str(tmp_path))
  text = "\n".join(page.sections)
  assert "| 128 | 0 | 0 | 0.1 | 9.00 | 1.74 | -4.50 (-4.00, -5.00) | grows | 4.000 |" in text
  assert "| 128 | 0 | 0.0001 | 0.3 | 9.00 | 5.74 | -0.50 (-0.50, —) | mixed | 4.000 |" in text
  assert page.results["finding"] == {"verdict": "Found", "width": 128, "grows": [
      {"weight_decay": 0.0, "learning_rate": 0.1}, {"weight_decay": 0.0, "learning_rate": 0.3}]}
  assert [v.verdict for v in page.verdicts] == ["Found"] and (tmp_path / page.plots[0]).exists()


@pytest.mark.parametrize("scale", ["smoke"])
def test_the_smoke_scale_is_small_and_says_so(scale):
  sweep = grid.get_sweep(scale)
  assert sweep.description.startswith("**Smoke scale") and len(sweep.cells) == 2 * 2 * 2 * 2 * 2

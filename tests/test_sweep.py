"""The sweep machinery on a two-cell micro grid: run, skip on rerun, divergence, report."""

import json
import os

import pytest

from experiments import report
from experiments import sweep as sweep_lib
from experiments.sweeps import base, micro, norm_mlp


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("sweep"))
  sweep = micro.get_sweep(cache_dir=str(tmp_path_factory.mktemp("cache")))
  return sweep, workdir, sweep_lib.run_sweep(sweep, workdir)


def test_cells_run_as_ordinary_runs_and_divergence_is_recorded(swept):
  _, workdir, records = swept
  status = {r["name"]: r["status"] for r in records}
  assert status == {"pre-seed0": "completed", "post-diverge-seed0": "diverged"}
  diverged = json.load(open(os.path.join(workdir, "post-diverge-seed0", "summary.json")))
  assert diverged["exit_code"] == 3 and diverged["diverged_at_step"] >= 1
  index = json.load(open(os.path.join(workdir, "sweep.json")))
  assert [c["status"] for c in index["cells"]] == ["completed", "diverged"]
  diag = [json.loads(l) for l in open(os.path.join(workdir, "pre-seed0", "diagnostics.jsonl"))]
  assert diag[0]["step"] == 0 and len(diag[0]["grad_mlp"]) == 1 and len(diag[0]["residual_norm"]) == 2
  assert any("update_mlp" in row for row in diag)


def test_rerun_skips_finished_cells(swept):
  sweep, workdir, _ = swept
  records = sweep_lib.run_sweep(sweep, workdir)
  assert all(r.get("skipped") for r in records)


def test_report_has_the_table_verdicts_and_plots(swept, tmp_path):
  _, workdir, _ = swept
  path = report.write_report(workdir, str(tmp_path), command="python -m experiments.sweep --sweep=micro")
  text = open(path).read()
  assert "| norm:pre/warmup | 1 |" in text
  assert "| norm:post/no-warmup | 1 | — | 1 (at step" in text
  assert "python -m experiments.sweep --sweep=micro" in text
  for png in ("loss_curves.png", "mlp_ratio.png", "init_profiles.png"):
    assert (tmp_path / png).stat().st_size > 1000, png


def test_norm_mlp_grid_covers_the_issue():
  sweep = norm_mlp.get_sweep("cpu")
  arms = {a for c in sweep.cells for a in c.arms}
  for arm in ("norm:pre/warmup", "norm:pre/no-warmup", "norm:post/warmup", "norm:post/no-warmup",
              "mlp_width:1", "mlp_width:8", "mlp_matched:1", "mlp_matched:8", "swiglu"):
    assert sum(arm in c.arms for c in sweep.cells) >= 2, arm  # at least two seeds
  assert len(arms) == 13
  # Parameter-matched arms hold the non-embedding count within a few percent.
  from andrea_jax import model
  from experiments.configs import common, tiny
  counts = []
  for c in sweep.cells:
    if any(a.startswith("mlp_matched") for a in c.arms) and c.seed == 0:
      config = common.apply_overrides(tiny.get_config(), c.overrides)
      cfg = model.ModelConfig(**config.model)
      counts.append(model.count_params(cfg) - (cfg.vocab_size + cfg.block_size) * cfg.d_model)
  assert max(counts) / min(counts) < 1.05, counts


def test_unknown_sweep_and_scale_are_errors():
  with pytest.raises(ValueError, match="no module experiments/sweeps/nope.py"):
    base.load("nope", "cpu")
  with pytest.raises(ValueError, match="--scale='tpu'"):
    norm_mlp.get_sweep("tpu")

"""The sweep machinery on the micro grid: a vmapped group and single runs, skip on rerun,
divergence, cell files, the report from per-cell files alone; the norm_mlp grid."""

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


def test_cells_run_and_divergence_is_recorded(swept):
  _, workdir, records = swept
  status = {r["path"]: r["status"] for r in records}
  assert status == {"pre-long/lr0.001-s0": "completed", "pre-long/lr0.001-s1": "completed",
                    "pre-long/lr0.01-s0": "completed", "pre-long/lr0.01-s1": "completed",
                    "pre-long/lr1e+30-s0": "diverged",
                    "pre-seed0": "completed", "post-diverge-seed0": "diverged"}
  diverged = json.load(open(os.path.join(workdir, "post-diverge-seed0", "summary.json")))
  assert diverged["exit_code"] == 3 and diverged["diverged_at_step"] >= 1
  member = json.load(open(os.path.join(workdir, "pre-long", "lr1e+30-s0", "summary.json")))
  assert member["exit_code"] == 3 and member["steps"] < 12
  index = json.load(open(os.path.join(workdir, "sweep.json")))
  assert [c["status"] for c in index["cells"]] == [status[c["path"]] for c in index["cells"]]
  for path in ("pre-seed0", "pre-long/lr0.01-s1"):
    diag = [json.loads(l) for l in open(os.path.join(workdir, path, "diagnostics.jsonl"))]
    assert diag[0]["step"] == 0 and len(diag[0]["grad_mlp"]) == 1 and len(diag[0]["residual_norm"]) == 2
    assert any("update_mlp" in row for row in diag)
    cell = json.load(open(os.path.join(workdir, path, "cell.json")))
    assert cell["path"] == path and cell["arms"]


def test_rerun_skips_finished_cells(swept):
  sweep, workdir, _ = swept
  records = sweep_lib.run_sweep(sweep, workdir)
  assert all(r.get("skipped") for r in records)


def test_report_from_per_cell_files_alone(swept, tmp_path):
  _, workdir, _ = swept
  # What a commit keeps: the per-cell files, not checkpoints, logs or sweep.json.
  kept = tmp_path / "study"
  report.write_report(workdir, str(kept), command="python -m experiments.sweep --sweep=micro", copy=True)
  assert not list(kept.glob("**/checkpoints")) and not list(kept.glob("**/*.log"))
  os.remove(kept / "sweep.json")
  path = report.write_report(str(kept), str(tmp_path / "out"), command="python -m experiments.sweep --sweep=micro")
  text = open(path).read()
  assert "python -m experiments.sweep --sweep=micro" in text and "per-cell files of 7 cells" in text
  assert "| norm:pre/long | 0.01 | " in text  # the best of 1e-3, 1e-2 and 1e30 (diverged)
  for verdict in ("post-LN needs warmup", "SwiGLU beats GELU", "parameter-matched"):
    assert verdict in text
  results = json.load(open(tmp_path / "out" / "results.json"))
  arm = results["arms"]["norm:pre/long"]
  assert sorted(arm["rates"]) == ["0.001", "0.01", "1e+30"] and arm["rates"]["1e+30"]["diverged"] == 1
  assert (tmp_path / "out" / "lr_norm.png").stat().st_size > 1000
  assert (tmp_path / "out" / "init_profiles.png").stat().st_size > 1000


def test_report_of_a_study_without_per_cell_files(tmp_path):
  # The first, 300-step study kept only results.json (kept here as a fixture): its report
  # is regenerated from it.
  path = report.write_report(os.path.join(os.path.dirname(__file__), "data", "study-300steps"),
                             str(tmp_path))
  text = open(path).read()
  assert "no per-cell files" in text and "### post-LN needs warmup" in text


def test_norm_mlp_grid_covers_the_issue():
  sweep = norm_mlp.get_sweep("cpu")
  groups = base.groups(sweep.cells)
  arms = {a for c in sweep.cells for a in c.arms}
  for norm in ("pre", "post"):
    for warm in ("none", "short", "long"):
      cells = [c for c in sweep.cells if f"norm:{norm}/{warm}" in c.arms]
      assert len({c.learning_rate for c in cells}) >= 5 and len({c.seed for c in cells}) >= 3
      assert len({c.group for c in cells}) == 1  # the rates and seeds of an arm: one program
  for arm in ("mlp_width:1", "mlp_width:8", "mlp_matched:1", "mlp_matched:8", "swiglu",
              "init:xavier/post", "init:gpt2/pre", "depth:post", "depth:pre"):
    cells = [c for c in sweep.cells if arm in c.arms]
    assert len({c.seed for c in cells}) >= 2, arm
  assert {"mlp_width:4", "mlp_matched:4"} <= arms
  assert all(len(members) > 1 for members in groups.values())
  assert len(groups) == len({tuple(sorted(m[0].shared().items())) for m in groups.values()})
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


def test_groups_must_share_their_shape():
  cells = [base.Cell("a", {"model.d_model": 32, "train.learning_rate": 1e-3}, ("x",), 0, "g"),
           base.Cell("b", {"model.d_model": 64, "train.learning_rate": 1e-3}, ("x",), 1, "g")]
  with pytest.raises(ValueError, match="group 'g'"):
    base.groups(cells)


def test_unknown_sweep_and_scale_are_errors():
  with pytest.raises(ValueError, match="no module experiments/sweeps/nope.py"):
    base.load("nope", "cpu")
  with pytest.raises(ValueError, match="--scale='tpu'"):
    norm_mlp.get_sweep("tpu")

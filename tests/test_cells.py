"""A study's cells: packed into one cells.jsonl, they read back as the same records as the per-cell directories they came from."""

import json
import math
import os

import pytest

from andrea_jax import errors
from research import cells


def jsonl(rows):
  return "".join(json.dumps(r) + "\n" for r in rows)


def write_cell(root, path, lr=1e-3, status="completed", resumed=False, rate_in_config=False):
  """A cell as a sweep leaves it: its four files (and, for a single run, the run's config.json)."""
  d = root / path
  d.mkdir(parents=True)
  overrides = {"model.norm": "pre"} | ({} if rate_in_config else {"train.learning_rate": lr})
  (d / "cell.json").write_text(json.dumps({"name": path, "path": path, "arms": ["norm:pre/long"],
                                           "seed": 0, "group": path.split("/")[0], "round": 1,
                                           "overrides": overrides, "code": {"commit": "a" * 40, "clean": True}}))
  if status is None:  # not started: cell.json alone
    return
  (d / "summary.json").write_text(json.dumps({
      "status": status, "steps": 4, "diverged_at_step": 3 if status == "diverged" else None,
      "final_val_loss": 4.5 if status == "completed" else None, "unigram_val_loss": 6.0,
      "n_params": 1000, "wall_time_s": 2.5, "group_size": 2}))
  metrics = [{"step": 2, "loss": 5.0, "wall_time_s": 1.0}, {"step": 4, "loss": 4.6},
             {"step": 4, "val_loss": 4.5}]
  if resumed:  # a resume re-ran step 2: the newest values win, the first ones are kept in the file
    metrics.insert(1, {"step": 2, "loss": 5.0, "wall_time_s": 9.0})
  (d / "metrics.jsonl").write_text(jsonl(metrics))
  (d / "diagnostics.jsonl").write_text(jsonl([
      {"step": 0, "loss": 7.7, "grad_attn": [1.0, 2.0], "grad_mlp": [1.0, float("nan")],
       "residual_norm": [1.0, 1.5, 2.0], "log_z": 3.0},
      {"step": 1, "update_attn": [0.1, 0.2], "update_mlp": [0.3, 0.4]},
      {"step": 4, "loss": 4.6, "grad_attn": [0.5, 0.5], "grad_mlp": [0.5, 0.5],
       "residual_norm": [1.0, 3.0, 9.0], "attn_logit_max": [4.0, 5.0], "log_z": 4.0}]))
  if rate_in_config:
    (d / "config.json").write_text(json.dumps({"train": {"learning_rate": lr, "steps": 4}}))


@pytest.fixture
def sweep_dir(tmp_path):
  root = tmp_path / "runs" / "sweep"
  write_cell(root, "pre-long/lr0.001-s0")
  write_cell(root, "pre-long/lr0.01-s0", lr=1e-2, resumed=True)
  write_cell(root, "pre-long/lr1e+30-s0", lr=1e30, status="diverged")
  write_cell(root, "pre-long/lr0.1-s0", lr=0.1, status="running")  # unfinished: no record
  write_cell(root, "pre-long/lr1-s0", lr=1.0, status=None)  # not started
  write_cell(root, "pre-seed0", rate_in_config=True)  # a single run: its rate in its config.json
  (root / "pre-seed0" / "checkpoints").mkdir()  # what a commit does not keep
  (root / "sweep.json").write_text(json.dumps({"name": "micro", "scale": "cpu", "description": "d",
                                               "cells": [{"path": "pre-seed0", "seed": 0}]}))
  return root


def same(a, b):
  """Equal as JSON (NaN equal to NaN), every field of every record."""
  return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_packed_cells_read_back_as_the_directorys_records(sweep_dir, tmp_path):
  packed = tmp_path / "results" / "micro-cpu"
  assert cells.pack(str(sweep_dir), str(packed)) == 6
  assert sorted(os.listdir(packed)) == ["cells.jsonl", "sweep.json"]
  assert (packed / "sweep.json").read_bytes() == (sweep_dir / "sweep.json").read_bytes()
  index, records, source = cells.load(str(sweep_dir))
  packed_index, packed_records, packed_source = cells.load(str(packed))
  assert source == "the per-cell files of 6 cells" and packed_source == "the 6 cells of cells.jsonl"
  assert len(records) == 4 and same(packed_records, records) and same(packed_index, index)
  by_name = {r["name"]: r for r in records}
  assert by_name["pre-seed0"]["learning_rate"] == 1e-3  # from its config.json
  assert by_name["pre-long/lr0.01-s0"]["train_curve"] == [[2, 5.0], [4, 4.6]]
  assert same(by_name["pre-long/lr0.001-s0"], cells.record(cells.cell_parts(str(sweep_dir), "pre-long/lr0.001-s0")))
  # One compact line per cell, by path, holding what its four files hold, rows as written.
  lines = [json.loads(l) for l in (packed / "cells.jsonl").read_text().splitlines()]
  assert [l["path"] for l in lines] == sorted(l["path"] for l in lines)
  for line in lines:
    d = sweep_dir / line["path"]
    read = lambda name: json.loads((d / name).read_text()) if (d / name).exists() else None
    rows = lambda name: [json.loads(r) for r in (d / name).read_text().splitlines()] if (d / name).exists() else []
    assert same(line, {"path": line["path"], "cell": read("cell.json"), "summary": read("summary.json"),
                       "metrics": rows("metrics.jsonl"), "diagnostics": rows("diagnostics.jsonl"),
                       **({"config": {"train": {"learning_rate": 1e-3}}} if line["path"] == "pre-seed0" else {})})
  resumed = next(l for l in lines if l["path"] == "pre-long/lr0.01-s0")
  assert [r["wall_time_s"] for r in resumed["metrics"] if r["step"] == 2] == [1.0, 9.0]
  assert math.isnan(resumed["diagnostics"][0]["grad_mlp"][1])
  assert ", " not in (packed / "cells.jsonl").read_text()  # compact separators
  # Packing the packed study again gives the same file.
  again = tmp_path / "again"
  cells.pack(str(packed), str(again))
  assert (again / "cells.jsonl").read_bytes() == (packed / "cells.jsonl").read_bytes()


def test_a_field_dropped_from_a_packed_cell_changes_its_record(sweep_dir, tmp_path):
  # The comparison above sees every field: a packed line that lost one reads back differently.
  packed = tmp_path / "packed"
  cells.pack(str(sweep_dir), str(packed))
  lines = [json.loads(l) for l in (packed / "cells.jsonl").read_text().splitlines()]
  for drop in ("summary.group_size", "diagnostics.attn_logit_max", "cell.code"):
    part, key = drop.split(".")
    changed = json.loads(json.dumps(lines[0]))
    if part == "diagnostics":
      changed[part] = [{k: v for k, v in r.items() if k != key} for r in changed[part]]
    else:
      del changed[part][key]
    (packed / "cells.jsonl").write_text("\n".join(json.dumps(l) for l in [changed, *lines[1:]]) + "\n")
    assert not same(cells.load(str(packed))[1], cells.load(str(sweep_dir))[1]), drop


def test_a_broken_line_names_the_file_and_the_line(sweep_dir, tmp_path):
  packed = tmp_path / "packed"
  cells.pack(str(sweep_dir), str(packed))
  text = (packed / "cells.jsonl").read_text().splitlines()
  (packed / "cells.jsonl").write_text("\n".join([text[0], text[1][:40], *text[2:]]) + "\n")
  with pytest.raises(ValueError, match=r"cells.jsonl, line 2: not valid JSON"):
    cells.load(str(packed))
  (packed / "cells.jsonl").write_text(json.dumps({"path": "a", "cell": {}}) + "\n")
  with pytest.raises(ValueError, match=r"line 1: expected a cell's path, cell, summary"):
    cells.load(str(packed))
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(ValueError, match="holds no cells"):
    cells.pack(str(empty), str(tmp_path / "x"))


def test_packing_into_a_file_is_one_line(tmp_path):
  sweep = tmp_path / "sweep"
  cell = sweep / "g" / "lr0.001-s0"
  cell.mkdir(parents=True)
  (cell / "cell.json").write_text(json.dumps({"name": "c", "arms": ["a"], "seed": 0, "group": "g",
                                              "overrides": {"train.learning_rate": 1e-3}}))
  (cell / "summary.json").write_text(json.dumps({"status": "completed"}))
  target = tmp_path / "a_file"
  target.write_text("x")
  with pytest.raises(errors.ConfigError, match=r"--pack=.*a_file' is a file: pass a directory"):
    cells.pack(str(sweep), str(target))
  assert target.read_text() == "x"


def test_a_cell_not_started_reads_as_unfinished(tmp_path):
  # A sweep run with --only reads back every cell of its sweep, started or not (runner.run_sweep's
  # refine round): one without a cell.json is unfinished, not a crash.
  from research import cells as cells_lib  # pylint: disable=import-outside-toplevel
  assert cells_lib.record(cells_lib.cell_parts(str(tmp_path), "arm-L8/lr0.003-s1")) is None


def test_a_cells_evaluations_read_against_tokens_and_seconds_where_they_logged_them(tmp_path):
  # Rows written since evaluations carry their tokens and clock (issue 70) give the record its
  # loss against tokens and against seconds; older rows give neither (their records, and the
  # committed results.json, stay as they were).
  write_cell(tmp_path, "old")
  assert "val_tokens_curve" not in cells.record(cells.cell_parts(str(tmp_path), "old"))
  write_cell(tmp_path, "new")
  rows = [{"step": 0, "val_loss": 6.0, "tokens": 0, "wall_time_s": 3.0}, {"step": 2, "loss": 5.0, "wall_time_s": 4.0},
          {"step": 2, "val_loss": 5.1, "tokens": 512, "wall_time_s": 4.5}]
  (tmp_path / "new" / "metrics.jsonl").write_text(jsonl(rows))
  rec = cells.record(cells.cell_parts(str(tmp_path), "new"))
  assert rec["val_tokens_curve"] == [[0, 6.0], [512, 5.1]]
  assert rec["val_seconds_curve"] == [[3.0, 6.0], [4.5, 5.1]]  # the evaluation's clock, not the step's row

"""Run a sweep: ``python -m experiments.sweep --sweep=norm_mlp --scale=cpu``.

Every cell is an ordinary ``python -m experiments.run`` in ``<workdir>/<cell>/``. The sweep
is resumable: a cell whose summary says completed or diverged is skipped, an interrupted
one resumes from its checkpoint. Diverged and failed cells are recorded and the sweep goes
on. ``--parallel=N`` runs N cells at once (on GPUs each worker sees one device).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import subprocess
import sys
import time

from absl import flags

from experiments import cli
from experiments.sweeps import base

_SWEEP = flags.DEFINE_string("sweep", "norm_mlp", "module in experiments/sweeps/")
_SCALE = flags.DEFINE_string("scale", "cpu", "sweep scale, e.g. cpu or gpu")
_WORKDIR = flags.DEFINE_string("workdir", None, "default: runs/sweeps/<sweep>-<scale>")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "cells run at once")
_ONLY = flags.DEFINE_string("only", "", "run only cells whose name contains this text")
_GPUS = flags.DEFINE_integer("gpus", 0, "GPUs to spread parallel cells over (0 = no pinning)")

FINISHED = ("completed", "diverged")


def cell_status(cell_dir: str) -> str | None:
  path = os.path.join(cell_dir, "summary.json")
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f).get("status")


def run_cell(sweep: base.Sweep, cell: base.Cell, workdir: str, worker: int, gpus: int) -> dict:
  """Run (or skip) one cell; returns its record for sweep.json."""
  cell_dir = os.path.join(workdir, cell.name)
  record = {**dataclasses.asdict(cell), "workdir": cell_dir}
  if cell_status(cell_dir) in FINISHED:
    return {**record, "status": cell_status(cell_dir), "skipped": True}
  env = dict(os.environ)
  if gpus:
    env["CUDA_VISIBLE_DEVICES"] = str(worker % gpus)
  cmd = [sys.executable, "-m", "experiments.run", f"--config={sweep.base_config}",
         f"--workdir={cell_dir}", *cell.args()]
  os.makedirs(cell_dir, exist_ok=True)
  started = time.time()
  with open(os.path.join(cell_dir, "run.log"), "a", encoding="utf-8") as log:
    code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
  status = cell_status(cell_dir) or "failed"
  return {**record, "status": status if code in (0, 3, 4) else "failed", "exit_code": code,
          "seconds": time.time() - started, "command": " ".join(cmd)}


def run_sweep(sweep: base.Sweep, workdir: str, parallel: int = 1, only: str = "",
              gpus: int = 0) -> list[dict]:
  cells = [c for c in sweep.cells if only in c.name]
  os.makedirs(workdir, exist_ok=True)
  records = {}
  with concurrent.futures.ThreadPoolExecutor(max(parallel, 1)) as pool:
    futures = {pool.submit(run_cell, sweep, c, workdir, i % max(parallel, 1), gpus): c
               for i, c in enumerate(cells)}
    for future in concurrent.futures.as_completed(futures):
      rec = future.result()
      records[rec["name"]] = rec
      print(f"[{len(records)}/{len(cells)}] {rec['name']}: {rec['status']}"
            + (" (skipped)" if rec.get("skipped") else f" in {rec.get('seconds', 0):.0f} s"),
            flush=True)
      write_index(sweep, workdir, records)
  return [records[c.name] for c in cells]


def write_index(sweep: base.Sweep, workdir: str, records: dict) -> None:
  """``sweep.json``: the definition and each cell's status (merged with earlier runs)."""
  path = os.path.join(workdir, "sweep.json")
  old = {}
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      old = {c["name"]: c for c in json.load(f).get("cells", [])}
  old.update(records)
  index = {"name": sweep.name, "scale": sweep.scale, "base_config": sweep.base_config,
           "description": sweep.description,
           "cells": [old.get(c.name, {**dataclasses.asdict(c), "status": "pending"})
                     for c in sweep.cells]}
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(index, f, indent=2)
  os.replace(tmp, path)


def main(argv):
  del argv
  sweep = base.load(_SWEEP.value, _SCALE.value)
  workdir = _WORKDIR.value or os.path.join("runs", "sweeps", f"{sweep.name}-{sweep.scale}")
  records = run_sweep(sweep, workdir, _PARALLEL.value, _ONLY.value, _GPUS.value)
  failed = [r["name"] for r in records if r["status"] == "failed"]
  print(f"{len(records)} cells in {workdir}; diverged: "
        f"{sum(r['status'] == 'diverged' for r in records)}; failed: {failed or 'none'}")
  print(f"report: python -m experiments.report --sweep_dir={workdir}")
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  cli.run(main)

"""Running a study's sweep (``python -m experiments.sweep``): its cells as resumable subprocess jobs, each cell's training code recorded.

A group is one vmapped program (``andrea_jax/multi.py``), a lone cell one ``experiments.run``;
each cell directory gets a ``cell.json``. A cooldown group (``sweep.cooldown_branches``) starts
as a branch of its stable group's checkpoint (``cooldown.branch_cooldown``), after the groups it
branches off. Finished jobs are skipped, interrupted ones resume;
SIGINT/SIGTERM is forwarded once to each running job, which checkpoints and stops. The dry run's
plan and a group's own subprocess (``--run_group``) are ``experiments/sweep.py``'s.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time

from andrea_jax import errors
from andrea_jax import files
from research import cells as cells_lib
from research import identity
from research import provenance
from research import registry
from research import sweep as base

FINISHED = ("completed", "diverged")
NOT_STARTED = "not started"  # the sweep was stopped before the job started


# ----------------------------------------------------------------------------- jobs


@dataclasses.dataclass
class Job:
  """One subprocess: a vmapped group of cells, or a single cell."""
  cells: list[base.Cell]
  directory: str
  command: list[str]


def jobs(sweep: base.Sweep, workdir: str, only: str = "") -> list[Job]:
  cells = [c for c in sweep.cells if only in c.path]
  out = []
  for group, members in base.groups(cells).items():
    d = os.path.join(workdir, group)
    out.append(Job(members, d, [sys.executable, "-m", "experiments.sweep", f"--run_group={d}"]))
  for cell in (c for c in cells if not c.group):
    d = os.path.join(workdir, cell.path)
    overrides = [f"--config.{k}={v}" for k, v in cell.overrides.items()]
    out.append(Job([cell], d, [sys.executable, "-m", "experiments.run", f"--config={sweep.base_config}",
                               f"--workdir={d}", *overrides]))
  return out


def members(cells: list[base.Cell]) -> list[dict]:
  """A group's members as ``group.json`` names them (``multi.Member``'s fields)."""
  return [{"name": c.member, "learning_rate": c.learning_rate, "seed": c.seed, "batch_seed": c.seed}
          for c in cells]


def branch(sweep: base.Sweep, job: Job, workdir: str) -> None:
  """A cooldown group's directory made a branch of its stable group's checkpoint, before the
  sweep writes into it (one made before is kept: ``cooldown.branch_cooldown`` resumes it)."""
  from andrea_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  from andrea_jax import cooldown  # pylint: disable=import-outside-toplevel
  cell = job.cells[0]
  config = config_lib.RunConfig.from_configdict(registry.group_config(sweep.base_config, cell.shared()))
  cooldown.branch_cooldown(os.path.join(workdir, cell.cooldown_from), job.directory, config,
                           cell.trained_steps, cell.cooldown_step, members=members(job.cells))


def prepare_job(sweep: base.Sweep, job: Job, workdir: str, code: dict | None = None) -> None:
  """Write each cell's ``cell.json`` with ``code`` (``provenance.code_version``; earlier code kept in
  ``code_earlier``), and a group's ``group.json`` (read by ``--run_group``); a cooldown group is
  branched first (``branch``)."""
  if job.cells[0].cooldown_from:
    branch(sweep, job, workdir)
  for cell in job.cells:
    path = os.path.join(workdir, cell.path, "cell.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    record = {**dataclasses.asdict(cell), "path": cell.path}
    if code is not None:
      old = files.read_json(path) or {}
      earlier = list(old.get("code_earlier", []))
      if old.get("code") and old["code"] != code:
        earlier.append(old["code"])
      record.update({"code": code, **({"code_earlier": earlier} if earlier else {})})
    files.write_json(path, record)
  if job.cells[0].group:
    files.write_json(os.path.join(job.directory, "group.json"), {
        "base_config": sweep.base_config, "overrides": job.cells[0].shared(),
        "members": members(job.cells)})


class Jobs:
  """The running jobs; ``handle`` (the signal handler) forwards a signal to each and blocks new ones."""

  def __init__(self):
    self.running: set[subprocess.Popen] = set()
    self.lock = threading.Lock()
    self.stopped: int | None = None  # the signal that stopped the sweep

  def call(self, command: list[str], **kwargs) -> int | None:
    """Run ``command`` in its own process group; its exit code (None: stopped before it started)."""
    with self.lock:
      if self.stopped is not None:
        return None
      proc = subprocess.Popen(command, process_group=0, **kwargs)
      self.running.add(proc)
    try:
      return proc.wait()
    finally:
      with self.lock:
        self.running.discard(proc)

  def handle(self, signum: int, frame=None) -> None:
    del frame
    with self.lock:
      self.stopped, running = signum, list(self.running)
    for proc in running:
      proc.send_signal(signum)
    print(f"{signal.Signals(signum).name}: passed on to the {len(running)} running job(s), which "
          f"save a checkpoint and stop; no new job starts. Rerun the same command to resume.",
          flush=True)


def run_job(sweep: base.Sweep, job: Job, workdir: str, worker: int, gpus: int, code: dict,
            running: Jobs) -> list[dict]:
  """Run (or skip) one job; returns its cells' records for sweep.json."""
  record = lambda c, **kw: {**dataclasses.asdict(c), "path": c.path, **kw}
  dirs = [os.path.join(workdir, c.path) for c in job.cells]
  cell_status = lambda d: (files.read_json(os.path.join(d, "summary.json")) or {}).get("status")
  if all(cell_status(d) in FINISHED for d in dirs):
    return [record(c, status=cell_status(d), skipped=True) for c, d in zip(job.cells, dirs)]
  if running.stopped is not None:
    return [record(c, status=NOT_STARTED) for c in job.cells]
  source = job.cells[0].cooldown_from
  if source and any(cell_status(os.path.join(workdir, source, c.member)) not in FINISHED for c in job.cells):
    print(f"{os.path.basename(job.directory)}: not started: the group it branches off, {source}, has not "
          f"finished (rerun the sweep once it has)", flush=True)
    return [record(c, status=NOT_STARTED) for c in job.cells]
  try:
    prepare_job(sweep, job, workdir, code)
  except errors.AndreaError as e:  # a branch its source cannot give (no checkpoint at its step)
    print(f"{os.path.basename(job.directory)}: failed: {e}", flush=True)
    return [record(c, status="failed", error=str(e)) for c in job.cells]
  env = dict(os.environ)
  if gpus:
    env["CUDA_VISIBLE_DEVICES"] = str(worker % gpus)
  started = time.time()
  with open(os.path.join(job.directory, "run.log"), "a", encoding="utf-8") as log:
    exit_code = running.call(job.command, stdout=log, stderr=subprocess.STDOUT, env=env)
  if exit_code is None:
    return [record(c, status=NOT_STARTED) for c in job.cells]
  seconds = time.time() - started
  # Stopped before writing a summary: interrupted.
  stopped = exit_code == errors.EXIT_INTERRUPTED or running.stopped is not None
  status = lambda d: (cell_status(d) if exit_code in (0, 3, 4) else None) or (
      "interrupted" if stopped else "failed")
  return [record(c, status=status(d), exit_code=exit_code, seconds=seconds, command=" ".join(job.command),
                 code=code) for c, d in zip(job.cells, dirs)]


def run_sweep(sweep: base.Sweep, workdir: str, parallel: int = 1, only: str = "",
              gpus: int = 0) -> list[dict]:
  """Run the cells, then up to ``base.REFINE_ROUNDS`` rounds of ``base.refine`` rates (derived
  from finished cells, so a rerun resumes them). Returns the cells' records."""
  os.makedirs(workdir, exist_ok=True)
  records: dict = {}
  code = provenance.code_version()
  write_index(sweep, workdir, records)  # records the rules before a cell trains
  running = Jobs()
  main = threading.current_thread() is threading.main_thread()
  before = {sig: signal.signal(sig, running.handle) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
  try:
    for rnd in range(base.REFINE_ROUNDS + 1):
      if running.stopped is not None:
        break
      if rnd:
        known = {c.path for c in sweep.cells}
        finished = {p: cells_lib.record(cells_lib.cell_parts(workdir, p)) for p in known}  # None: not finished
        runs = {p: cells_lib.to_run(r) for p, r in finished.items() if r is not None}
        new = [c for c in base.refine(sweep.cells, runs, rnd) if c.path not in known and only in c.path]
        if not new:
          break
        print(f"round {rnd}: {len(new)} cells added around the optima", flush=True)
        sweep = dataclasses.replace(sweep, cells=sweep.cells + new)
      todo, done = jobs(sweep, workdir, only), 0
      # Cooldown groups after the groups they branch off.
      for wave in ([j for j in todo if not j.cells[0].cooldown_from], [j for j in todo if j.cells[0].cooldown_from]):
        with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
          futures = [pool.submit(run_job, sweep, j, workdir, todo.index(j) % parallel, gpus, code, running)
                     for j in wave]
          for future in concurrent.futures.as_completed(futures):
            recs, done = future.result(), done + 1
            records.update({r["path"]: r for r in recs})
            if not recs[0].get("skipped"):
              print(f"[{done}/{len(todo)}] {os.path.dirname(recs[0]['path']) or recs[0]['path']} ({len(recs)} "
                    f"cells): {', '.join(sorted({r['status'] for r in recs}))} in {recs[0].get('seconds', 0):.0f} s",
                    flush=True)
            write_index(sweep, workdir, records)
  finally:
    for sig, handler in before.items():
      signal.signal(sig, handler)
  return [records[c.path] for c in sweep.cells if c.path in records]


def write_index(sweep: base.Sweep, workdir: str, records: dict) -> None:
  """``sweep.json``: the definition and each cell's status (merged with earlier runs)."""
  path = os.path.join(workdir, "sweep.json")
  before = files.read_json(path) or {}
  cells = {c.get("path", c["name"]): c for c in before.get("cells", [])} | records
  recorded = before.get("rules") or identity.rules_version(sweep.judged_by)
  files.write_json(path, {"name": sweep.name, "scale": sweep.scale, "base_config": sweep.base_config,
                          "description": sweep.description, "study": sweep.judged_by, "rules": recorded,
                          "cells": [cells.get(c.path) or {**dataclasses.asdict(c), "path": c.path,
                                                          "status": "pending"} for c in sweep.cells]})

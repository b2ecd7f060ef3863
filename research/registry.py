"""Where the studies are: finding a study's definition by name, the study that judges a sweep, and the seeds earlier studies used.

A study is defined under ``experiments/studies/<name>/`` (what it trains, ``grid.py``; its
claims, ``rules.py``; its report page, ``report.py``). ``python -m experiments.sweep
--sweep=<name>`` runs its sweep; ``python -m experiments.report`` gives a sweep the report
of the study that judges it (``study_of``)."""

from __future__ import annotations

import glob
import importlib
import os

from andrea_jax import errors
from andrea_jax.files import read_json
from research import cells as cells_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where the studies are defined (a package each, for now), where their data are committed
# (results/<study>-<scale>/: cells.jsonl, sweep.json, results.json) and their reports
# (docs/studies/<study>-<scale>/: REPORT.md and its plots).
HERE = os.path.join(ROOT, "experiments", "studies")
RESULTS = os.path.join(ROOT, "results")
# The study that judges a sweep naming none of its own: the records of the first study
# (a results.json without sweep.json) are the norm x MLP study's.
DEFAULT = "norm_mlp"


def grid(name: str):
  """The module of ``name``'s sweep definition (``get_sweep(scale)``); unknown names are an error."""
  if not os.path.exists(os.path.join(HERE, name, "grid.py")):
    raise errors.ConfigError(f"--sweep={name!r}: no study experiments/studies/{name}/grid.py")
  return importlib.import_module(f"experiments.studies.{name}.grid")


def load(name: str, scale: str):
  """``name``'s sweep (a ``base.Sweep``) at ``scale``."""
  return grid(name).get_sweep(scale)


def judges(name: str) -> bool:
  """Whether ``name`` is a study with rules and a report of its own."""
  return all(os.path.exists(os.path.join(HERE, name, f)) for f in ("rules.py", "report.py"))


def study_of(index: dict) -> str:
  """The study that reports a sweep from its sweep.json (``index``): the one it recorded,
  else the one its name is, else ``DEFAULT``."""
  for name in (index.get("study"), index.get("name")):
    if name and judges(name):
      return name
  return DEFAULT


def design(name: str) -> str:
  """The line a study's report opens with on how its rules relate to its data
  (``DESIGN`` in its package: exploratory, confirmatory); empty when it states none."""
  try:
    return getattr(importlib.import_module(f"experiments.studies.{name}"), "DESIGN", "")
  except ImportError:
    return ""


def rules(name: str):
  """The module of ``name``'s claims (``judge``, ``RULE_ROOTS``)."""
  return importlib.import_module(f"experiments.studies.{name}.rules")


def report(name: str):
  """The module of ``name``'s report page (``page(index, cells, out)``)."""
  return importlib.import_module(f"experiments.studies.{name}.report")


def used_seeds(but: str, results: str = RESULTS) -> set[int]:
  """Every seed (a cell's seed, ``train.seed``, ``data.shuffle_seed``) that another study's
  grid trains at any of its scales or that a committed cell under ``results`` used, study
  ``but``'s own grid and committed results (``<but>-*``) apart: what a confirmatory study's
  seeds are checked against before it runs."""
  seen = set()
  for name in sorted(os.listdir(HERE)):
    if name == but or not os.path.exists(os.path.join(HERE, name, "grid.py")):
      continue
    module = grid(name)
    for scale in getattr(module, "SCALES", {"cpu": None}):
      for c in module.get_sweep(scale).cells:
        seen |= {c.seed, c.overrides.get("train.seed"), c.overrides.get("data.shuffle_seed")}
  for study in glob.glob(os.path.join(results, "*")):
    if os.path.basename(study).startswith(f"{but}-") or not os.path.isdir(study):
      continue
    found = cells_lib.read_parts(study)
    cells = [p["cell"] for p in found[0]] if found else []
    for index in ("sweep.json", "results.json"):
      cells += (read_json(os.path.join(study, index)) or {}).get("cells", [])
    for c in cells:
      seen |= {c.get("seed"), c.get("overrides", {}).get("train.seed"),
               c.get("overrides", {}).get("data.shuffle_seed")}
  return {s for s in seen if s is not None}

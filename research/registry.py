"""Where the studies are: a study's definition by name, the study that judges a sweep, used seeds, group configs.

A study is ``experiments/studies/<name>.py`` (``STUDY``); a package there with a ``grid.py``
is a sweep judged by such a study (``micro``). The one framework module that reaches into
``experiments/``."""

from __future__ import annotations

import glob
import importlib
import os

from andrea_jax import errors
from andrea_jax.files import read_json
from research import cells as cells_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Study definitions, and committed data (results/<study>-<scale>/).
HERE = os.path.join(ROOT, "experiments", "studies")
RESULTS = os.path.join(ROOT, "results")
# The study judging a sweep that names none (the first study's records predate sweep.json).
DEFAULT = "norm_mlp"


def is_file(name: str) -> bool:
  """Whether ``name`` is a one-file study, ``experiments/studies/<name>.py``."""
  return bool(name) and os.path.exists(os.path.join(HERE, f"{name}.py"))


def study(name: str):
  """The ``Study`` that ``experiments/studies/<name>.py`` defines, its claims' parameters checked."""
  from research import checks  # pylint: disable=import-outside-toplevel
  defined = importlib.import_module(f"experiments.studies.{name}").STUDY
  for claim in defined.claims:
    checks.claim_parameters(claim)
  return defined


def names() -> list[str]:
  """Every study defined: the one-file studies and the packages with a grid.py."""
  return [e.removesuffix(".py") for e in sorted(os.listdir(HERE))
          if (e.endswith(".py") and e != "__init__.py") or os.path.exists(os.path.join(HERE, e, "grid.py"))]


def load(name: str, scale: str):
  """``name``'s sweep at ``scale``: the study file's, else its package's ``grid.py``'s ``get_sweep``."""
  if is_file(name):
    return study(name).sweep(scale)
  if not os.path.exists(os.path.join(HERE, name, "grid.py")):
    raise errors.ConfigError(f"--sweep={name!r}: no study experiments/studies/{name}.py or "
                             f"experiments/studies/{name}/grid.py; studies: {', '.join(names())}")
  return importlib.import_module(f"experiments.studies.{name}.grid").get_sweep(scale)


def is_smoke(name: str, scale: str) -> bool:
  """Whether ``name``'s ``scale`` trains toy models (``Grid.smoke``; a package's sweep does not)."""
  return is_file(name) and study(name).scales[scale].smoke


def study_of(index: dict) -> str:
  """The study that reports a sweep (``index``: sweep.json): recorded, else by name, else ``DEFAULT``."""
  return next((name for name in (index.get("study"), index.get("name")) if is_file(name)), DEFAULT)


def design(name: str) -> str:
  """The study's design line (exploratory or confirmatory); empty when it states none."""
  return f"**{study(name).design}**" if is_file(name) else ""


def outside(name: str, field: str) -> tuple:
  """The tuple ``field`` of the study file beside ``STUDY``, outside the rules' identity (() if none):
  ``SAW_DATA`` (inputs that saw the data: the report is exploratory whatever its design,
  ``guards.header``), ``LIMITS`` (its author's stated limitations), ``POSTHOC`` (its readings),
  ``SUPERSEDED`` (lines the report opens with: the study that replaces it, and why)."""
  return tuple(getattr(importlib.import_module(f"experiments.studies.{name}"), field, ()))


def group_config(base_config: str, overrides: dict):
  """``experiments/configs/<base_config>.py``'s config with ``overrides`` applied."""
  from andrea_jax import configdict  # pylint: disable=import-outside-toplevel
  module = importlib.import_module(f"experiments.configs.{base_config}")
  return configdict.apply_overrides(module.get_config(), overrides)


def used_seeds(but: str) -> set[int]:
  """Every seed (cell seed, ``train.seed``, ``data.shuffle_seed``) other studies' non-smoke grids
  train or committed cells under ``results/`` used, study ``but``'s own apart."""
  cells = []
  for name in (n for n in names() if n != but):
    trained = [s for s, g in study(name).scales.items() if not g.smoke] if is_file(name) else ["cpu"]
    cells += [vars(c) for scale in trained for c in load(name, scale).cells]
  for pack in glob.glob(os.path.join(RESULTS, "*")):
    if os.path.basename(pack).startswith(f"{but}-") or not os.path.isdir(pack):
      continue
    found = cells_lib.read_parts(pack)  # the cells trained (results.json's are some of these)
    cells += [p["cell"] for p in found[0]] if found else []
    cells += (read_json(os.path.join(pack, "sweep.json")) or {}).get("cells", [])  # and planned
  seen = set()
  for c in cells:
    o = c.get("overrides", {})
    seen |= {c.get("seed"), o.get("train.seed"), o.get("data.shuffle_seed")}
  return seen - {None}

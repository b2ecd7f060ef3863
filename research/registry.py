"""Where the studies are: a study's definition by name, the study that judges a sweep, used seeds, group configs.

A study is ``experiments/studies/<name>.py`` (``STUDY``) or a package there (``grid.py``,
``rules.py``, ``report.py``). The one framework module that reaches into ``experiments/``."""

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
  out = []
  for entry in sorted(os.listdir(HERE)):
    name = entry[:-3] if entry.endswith(".py") else entry
    if (entry.endswith(".py") and entry != "__init__.py") or os.path.exists(os.path.join(HERE, entry, "grid.py")):
      out.append(name)
  return out


def grid(name: str):
  """The module of ``name``'s ``grid.py`` (``get_sweep(scale)``); ConfigError if unknown."""
  if not os.path.exists(os.path.join(HERE, name, "grid.py")):
    raise errors.ConfigError(f"--sweep={name!r}: no study experiments/studies/{name}.py or "
                             f"experiments/studies/{name}/grid.py; studies: {', '.join(names())}")
  return importlib.import_module(f"experiments.studies.{name}.grid")


def load(name: str, scale: str):
  return study(name).sweep(scale) if is_file(name) else grid(name).get_sweep(scale)


def is_smoke(name: str, scale: str) -> bool:
  """Whether ``name``'s ``scale`` trains toy models (``Grid.smoke``, or a scale named ``smoke``)."""
  return study(name).scales[scale].smoke if is_file(name) else scale == "smoke"


def scales(name: str) -> list[str]:
  if is_file(name):
    return list(study(name).scales)
  return list(getattr(grid(name), "SCALES", {"cpu": None}))


def plan_lines(name: str, scale: str) -> list[str]:
  """The study's power plan at ``scale`` (printed by ``--dry_run``)."""
  if is_file(name):
    return study(name).plan_lines(scale)
  module = grid(name)
  return module.plan_lines(scale) if hasattr(module, "plan_lines") else []


def judges(name: str) -> bool:
  """Whether ``name`` is a study with rules and a report of its own."""
  return is_file(name) or all(os.path.exists(os.path.join(HERE, name, f))
                              for f in ("rules.py", "report.py"))


def study_of(index: dict) -> str:
  """The study that reports a sweep (``index``: sweep.json): recorded, else by name, else ``DEFAULT``."""
  for name in (index.get("study"), index.get("name")):
    if name and judges(name):
      return name
  return DEFAULT


def design(name: str) -> str:
  """The study's design line (exploratory or confirmatory); empty when it states none."""
  if is_file(name):
    return f"**{study(name).design}**"
  try:
    return getattr(importlib.import_module(f"experiments.studies.{name}"), "DESIGN", "")
  except ImportError:
    return ""


def saw_data(name: str) -> tuple[str, ...]:
  """``SAW_DATA`` in the study file (outside ``STUDY``): inputs that saw the data, which make the
  report exploratory whatever its design (``guards.header``)."""
  if not is_file(name):
    return ()
  return tuple(getattr(importlib.import_module(f"experiments.studies.{name}"), "SAW_DATA", ()))


def limits(name: str) -> tuple[str, ...]:
  """``LIMITS`` in the study file (outside ``STUDY``): its author's stated limitations."""
  if not is_file(name):
    return ()
  return tuple(getattr(importlib.import_module(f"experiments.studies.{name}"), "LIMITS", ()))


def rules(name: str):
  """The module of ``name``'s claims (``judge``, ``RULE_ROOTS``)."""
  return importlib.import_module(f"experiments.studies.{name}.rules")


def report(name: str):
  """What has ``page(index, cells, out)``: its ``STUDY``, or its package's report.py."""
  if is_file(name):
    return study(name)
  return importlib.import_module(f"experiments.studies.{name}.report")


def posthoc(name: str) -> tuple:
  """``POSTHOC`` in the study file (outside ``STUDY``): its post-hoc readings."""
  if not is_file(name):
    return ()
  return tuple(getattr(importlib.import_module(f"experiments.studies.{name}"), "POSTHOC", ()))


def group_config(base_config: str, overrides: dict):
  """``experiments/configs/<base_config>.py``'s config with ``overrides`` applied."""
  from experiments.configs import common  # pylint: disable=import-outside-toplevel
  module = importlib.import_module(f"experiments.configs.{base_config}")
  return common.apply_overrides(module.get_config(), overrides)


def used_seeds(but: str, results: str = RESULTS) -> set[int]:
  """Every seed (cell seed, ``train.seed``, ``data.shuffle_seed``) other studies' non-smoke grids
  train or committed cells under ``results`` used, study ``but``'s own apart."""
  seen = set()
  for name in names():
    if name == but:
      continue
    for scale in (s for s in scales(name) if not is_smoke(name, s)):
      for c in load(name, scale).cells:
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

"""Where the studies are: a study's definition by name, the study that judges a sweep, used seeds, group configs.

The framework imports no study: the commands' package registers its studies once (``register``,
called by ``experiments/__init__.py``), as a package whose modules are one-file studies
(``STUDY``) or packages with a ``grid.py`` (a sweep judged by such a study: ``micro``), with the
builder of a base config by name and the study that judges a sweep that records none.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib
import os
import types
from typing import Any, Callable, Mapping

from andrea_jax import errors
from andrea_jax.files import read_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Committed data (results/<study>-<scale>/).
RESULTS = os.path.join(ROOT, "results")


@dataclasses.dataclass(frozen=True)
class Studies:
  """What ``register`` records: the studies' package, the config builder, the default study."""
  package: types.ModuleType  # one module per study (``STUDY``), or a package with a grid.py
  config: Callable[[str, Mapping[str, Any]], Any]  # (base config name, overrides) -> ConfigDict
  default: str  # the study judging a sweep that names none (the first study's records predate sweep.json)

  @property
  def directory(self) -> str:
    return os.path.dirname(os.path.abspath(self.package.__file__))

  def module(self, dotted: str) -> types.ModuleType:
    return importlib.import_module(f"{self.package.__name__}.{dotted}")


_registered: Studies | None = None  # set once, by the commands' package


def register(package: types.ModuleType, config: Callable[[str, Mapping[str, Any]], Any], default: str) -> None:
  """Make ``package`` the studies this framework finds by name, ``config(base_config, overrides)`` the
  builder of their cells' configs and ``default`` the study judging a sweep that records none; a later
  call replaces an earlier one."""
  global _registered  # pylint: disable=global-statement
  _registered = Studies(package, config, default)


def _studies() -> Studies:
  if _registered is None:
    raise RuntimeError("no studies registered with research.registry: import the commands' package "
                       "(its __init__ calls research.registry.register(package, config, default)) first")
  return _registered


def is_file(name: str) -> bool:
  """Whether ``name`` is a one-file study, ``<name>.py`` in the registered package."""
  return bool(name) and os.path.exists(os.path.join(_studies().directory, f"{name}.py"))


def source(name: str) -> str:
  """The repository-relative path of study ``name``'s file: what its rules' identity reads first."""
  path = os.path.relpath(os.path.join(_studies().directory, f"{name}.py"), ROOT)
  return path.replace(os.sep, "/")


def study(name: str):
  """The ``Study`` that study ``name``'s file defines, its claims' parameters checked."""
  from research import checks  # pylint: disable=import-outside-toplevel
  defined = _studies().module(name).STUDY
  for claim in defined.claims:
    checks.claim_parameters(claim)
  return defined


def names() -> list[str]:
  """Every study defined: the one-file studies and the packages with a grid.py."""
  here = _studies().directory
  return [e.removesuffix(".py") for e in sorted(os.listdir(here))
          if (e.endswith(".py") and e != "__init__.py") or os.path.exists(os.path.join(here, e, "grid.py"))]


def load(name: str, scale: str):
  """``name``'s sweep at ``scale``: the study file's, else its package's ``grid.py``'s ``get_sweep``."""
  if is_file(name):
    return study(name).sweep(scale)
  if not os.path.exists(os.path.join(_studies().directory, name, "grid.py")):
    where = os.path.relpath(_studies().directory, ROOT)
    raise errors.ConfigError(f"--sweep={name!r}: no study {where}/{name}.py or {where}/{name}/grid.py; "
                             f"studies: {', '.join(names())}")
  return _studies().module(f"{name}.grid").get_sweep(scale)


def is_smoke(name: str, scale: str) -> bool:
  """Whether ``name``'s ``scale`` trains toy models (``Grid.smoke``; a package's sweep does not)."""
  return is_file(name) and study(name).scales[scale].smoke


def study_of(index: dict) -> str:
  """The study that reports a sweep (``index``: sweep.json): recorded, else by name, else the default."""
  return next((name for name in (index.get("study"), index.get("name")) if is_file(name)), _studies().default)


def design(name: str) -> str:
  """The study's design line (exploratory or confirmatory); empty when it states none."""
  return f"**{study(name).design}**" if is_file(name) else ""


def outside(name: str, field: str) -> tuple:
  """The tuple ``field`` of the study file beside ``STUDY``, outside the rules' identity (() if none):
  ``SAW_DATA`` (inputs that saw the data: the report is exploratory whatever its design,
  ``guards.header``), ``LIMITS`` (its author's stated limitations), ``POSTHOC`` (its readings),
  ``SUPERSEDED`` (lines the report opens with: the study that replaces it, and why)."""
  return tuple(getattr(_studies().module(name), field, ()))


def group_config(base_config: str, overrides: Mapping[str, Any]):
  """The base config ``base_config`` with ``overrides`` applied, by the registered builder."""
  return _studies().config(base_config, overrides)


def used_seeds(but: str) -> set[int]:
  """Every seed (cell seed, ``train.seed``, ``data.shuffle_seed``) other studies' non-smoke grids
  train or committed cells under ``results/`` used, study ``but``'s own apart."""
  from research import cells as cells_lib  # pylint: disable=import-outside-toplevel
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

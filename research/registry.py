"""Where the studies are: finding a study's definition by name, the study that judges a sweep,
the seeds earlier studies used, and a group's config built from its base config by name.

A study is defined under ``experiments/studies/<name>/`` (what it trains, ``grid.py``; its
claims, ``rules.py``; its report page, ``report.py``). ``python -m experiments.sweep
--sweep=<name>`` runs its sweep; ``python -m experiments.report`` gives a sweep the report
of the study that judges it (``study_of``). This is the one module of the research framework
that reaches into ``experiments/`` (its studies and its configs, by name)."""

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


def is_file(name: str) -> bool:
  """Whether ``name`` is a study of one file, ``experiments/studies/<name>.py`` (``STUDY``)."""
  return bool(name) and os.path.exists(os.path.join(HERE, f"{name}.py"))


def study(name: str):
  """The ``research.study.Study`` that ``experiments/studies/<name>.py`` defines, its claims'
  parameters checked (``research.checks.claim_parameters``)."""
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
  """The module of ``name``'s sweep definition (``get_sweep(scale)``); unknown names are an error."""
  if not os.path.exists(os.path.join(HERE, name, "grid.py")):
    raise errors.ConfigError(f"--sweep={name!r}: no study experiments/studies/{name}.py or "
                             f"experiments/studies/{name}/grid.py; studies: {', '.join(names())}")
  return importlib.import_module(f"experiments.studies.{name}.grid")


def load(name: str, scale: str):
  """``name``'s sweep (a ``research.sweep.Sweep``) at ``scale``."""
  return study(name).sweep(scale) if is_file(name) else grid(name).get_sweep(scale)


def is_smoke(name: str, scale: str) -> bool:
  """Whether ``name``'s ``scale`` trains toy models that prove the pipeline (a one-file
  study's ``Grid.smoke``; a grid.py's scale named ``smoke``)."""
  return study(name).scales[scale].smoke if is_file(name) else scale == "smoke"


def scales(name: str) -> list[str]:
  """The scales ``name`` defines."""
  if is_file(name):
    return list(study(name).scales)
  return list(getattr(grid(name), "SCALES", {"cpu": None}))


def plan_lines(name: str, scale: str) -> list[str]:
  """The study's power plan at ``scale`` (what ``--dry_run`` prints after the groups)."""
  if is_file(name):
    return study(name).plan_lines(scale)
  module = grid(name)
  return module.plan_lines(scale) if hasattr(module, "plan_lines") else []


def judges(name: str) -> bool:
  """Whether ``name`` is a study with rules and a report of its own."""
  return is_file(name) or all(os.path.exists(os.path.join(HERE, name, f))
                              for f in ("rules.py", "report.py"))


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
  if is_file(name):
    return f"**{study(name).design}**"
  try:
    return getattr(importlib.import_module(f"experiments.studies.{name}"), "DESIGN", "")
  except ImportError:
    return ""


def saw_data(name: str) -> tuple[str, ...]:
  """The inputs to ``name``'s headline that saw its data (``SAW_DATA`` in its study file, outside
  ``STUDY`` and so its rules' identity: seeds trained before, an estimator written after a run):
  its report is then exploratory whatever its design says (``research.guards.header``)."""
  if not is_file(name):
    return ()
  return tuple(getattr(importlib.import_module(f"experiments.studies.{name}"), "SAW_DATA", ()))


def limits(name: str) -> tuple[str, ...]:
  """What limits the reading of ``name``'s verdicts, in its author's words (``LIMITS`` in its
  study file, outside ``STUDY``: the report's limitations list gives them first)."""
  if not is_file(name):
    return ()
  return tuple(getattr(importlib.import_module(f"experiments.studies.{name}"), "LIMITS", ()))


def rules(name: str):
  """The module of ``name``'s claims (``judge``, ``RULE_ROOTS``)."""
  return importlib.import_module(f"experiments.studies.{name}.rules")


def report(name: str):
  """What writes ``name``'s report page (``page(index, cells, out)``): its ``STUDY``, or
  its package's report.py."""
  if is_file(name):
    return study(name)
  return importlib.import_module(f"experiments.studies.{name}.report")


def posthoc(name: str) -> tuple:
  """``name``'s post-hoc readings (``POSTHOC`` in its study file, apart from ``STUDY`` and so
  outside its rules' identity; ``research/posthoc.py``); none for a study that has none."""
  if not is_file(name):
    return ()
  return tuple(getattr(importlib.import_module(f"experiments.studies.{name}"), "POSTHOC", ()))


def group_config(base_config: str, overrides: dict):
  """``experiments/configs/<base_config>.py``'s config with ``overrides`` applied: what a
  group's subprocess trains (``runner.run_group``)."""
  from experiments.configs import common  # pylint: disable=import-outside-toplevel
  module = importlib.import_module(f"experiments.configs.{base_config}")
  return common.apply_overrides(module.get_config(), overrides)


def used_seeds(but: str, results: str = RESULTS) -> set[int]:
  """Every seed (a cell's seed, ``train.seed``, ``data.shuffle_seed``) that another study's
  grid trains at any of its scales but a smoke scale (``is_smoke``: toy models whose verdicts
  mean nothing; a smoke scale may reuse its study's seeds) or that a committed cell under
  ``results`` used, study ``but``'s own grid and committed results (``<but>-*``) apart: what
  a confirmatory study's seeds are checked against before it runs."""
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

"""What is checked of a study before any of its cells trains (``--dry_run`` and every sweep), each refusal one line that names the fault.

``claim_parameters`` (text parameters against the values the kind's code reads, so a misspelt
``predict="less"`` is refused, not judged as "higher"), ``cell_configs`` (each run config
builds), ``fresh_seeds`` (a confirmatory study's seeds unused before).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import sys

from andrea_jax import errors
from research import kinds

# A kind that tests one direction takes the other as its else.
OPPOSITES = {"lower": "higher", "higher": "lower", "above": "below", "below": "above",
             "falls": "rises", "rises": "falls"}


def _is_field(node: ast.AST, field: str) -> bool:
  return isinstance(node, ast.Attribute) and node.attr == field and isinstance(node.value, ast.Name) \
      and node.value.id == "self"


def _strings(node: ast.AST) -> set[str]:
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return {node.value}
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    return {s for e in node.elts for s in _strings(e)}
  return set()


@functools.lru_cache(maxsize=None)
def _class_nodes(path: str) -> dict[str, ast.ClassDef]:
  """The top-level classes of the module at ``path``, parsed once (cheaper than ``inspect.getsource``)."""
  with open(path, encoding="utf-8") as f:
    return {n.name: n for n in ast.parse(f.read()).body if isinstance(n, ast.ClassDef)}


@functools.lru_cache(maxsize=None)
def allowed(kind: type, field: str) -> frozenset[str] | None:
  """The values ``kind``'s code reads ``field`` as (None: no fixed set): strings compared with
  ``self.<field>``, their opposites, and keys of a table it indexes (``QUANTITIES[self.quantity]``)."""
  values: set[str] = set()
  for cls in (c for c in kind.__mro__ if issubclass(c, kinds.Claim)):
    module = sys.modules[cls.__module__]
    for node in ast.walk(_class_nodes(inspect.getsourcefile(cls)).get(cls.__name__, ast.Module([], []))):
      if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        if any(_is_field(s, field) for s in sides):
          values |= {v for s in sides for v in _strings(s)}
          values |= {v for s in sides if isinstance(s, ast.Name)  # ``self.of in FITS``
                     for v in getattr(module, s.id, ()) if isinstance(v, str)}
      elif isinstance(node, ast.Subscript) and _is_field(node.slice, field):
        table = getattr(module, node.value.id, None) if isinstance(node.value, ast.Name) else None
        if isinstance(node.value, ast.Dict):  # ``{"higher": ..., "lower": ...}[self.predict]``
          values |= {v for k in node.value.keys if k is not None for v in _strings(k)}
        elif isinstance(table, dict):
          values |= set(table)
  if not values:
    return None
  # The value a kind takes as its else, where its docstring names it (``at="shared"``).
  named = {m for cls in kind.__mro__ for m in re.findall(rf'``{field}="?([a-z_]+)"?``', cls.__doc__ or "")}
  return frozenset(values | {OPPOSITES[v] for v in values if v in OPPOSITES} | named)


def claim_parameters(claim) -> None:
  """Refuse a claim whose text-valued parameter (or a tuple of them) is not one its kind reads."""
  for f in dataclasses.fields(claim):
    value = getattr(claim, f.name)
    given = (value,) if isinstance(value, str) else value if isinstance(value, tuple) else ()
    if f.name == "claim" or not given or not all(isinstance(v, str) for v in given):
      continue
    ok = allowed(type(claim), f.name)
    bad = [v for v in given if ok is not None and v not in ok and v != f.default]  # the kind's default passes
    if bad:
      raise errors.ConfigError(f"claim {claim.claim!r} ({type(claim).__name__}): {f.name}={bad[0]!r} "
                               f"is not one of {sorted(ok)}")


def cell_configs(cells, config_of) -> None:
  """Build every cell's ``RunConfig`` from ``config_of(overrides)``; a refusal names the cell."""
  from andrea_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  first = {}  # each distinct set of overrides, with the first cell that has it
  for c in cells:
    first.setdefault(repr(sorted(c.overrides.items())), c)
  for c in first.values():
    try:
      config_lib.RunConfig.from_configdict(config_of(dict(c.overrides)))
    except errors.ConfigError as e:
      raise errors.ConfigError(f"cell {c.name}: {str(e).splitlines()[0]}") from None


def fresh_seeds(study, scale: str, used: set) -> None:
  """Refuse a confirmatory study whose seeds at ``scale`` an earlier study used (``used``)."""
  if not study.design.lower().lstrip("*").startswith("confirmatory"):
    return
  grid = study.grid(scale)
  mine = {s for a in study.arms_at(scale) for s in grid.arm_seeds.get(a.name, grid.seeds)}
  reused = sorted(mine & used)
  if reused:
    raise errors.ConfigError(f"study {study.name!r} is confirmatory but seeds {reused} were used by an "
                             f"earlier study (registry.used_seeds): choose seeds none used, or call it "
                             f"exploratory")

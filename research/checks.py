"""What is checked of a study before any of its cells trains (``--dry_run`` and every sweep), each refusal one line that names the fault.

``claim_parameters`` (text parameters against the values the kind declares, ``Claim.CHOICES``, so a
misspelt ``predict="less"`` is refused, not judged as "higher"), ``cell_configs`` (each run config
builds), ``fresh_seeds`` (a confirmatory study's seeds unused before).
"""

from __future__ import annotations

import dataclasses

from andrea_jax import errors


def claim_parameters(claim) -> None:
  """Refuse a claim whose text-valued parameter (or a tuple of them) is not one its kind declares
  (``CHOICES``; the field's default passes)."""
  for f in dataclasses.fields(claim):
    value = getattr(claim, f.name)
    given = (value,) if isinstance(value, str) else value if isinstance(value, tuple) else ()
    ok = type(claim).CHOICES.get(f.name)
    if ok is None or not given or not all(isinstance(v, str) for v in given):
      continue
    bad = [v for v in given if v not in ok and v != f.default]
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

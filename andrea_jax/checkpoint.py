"""Checkpoints with orbax: save decisions, retention, atomic writes, and safe restores.

A run's workdir holds ``config.json`` (the experiment config it was started with) and
``checkpoints/<step>/`` written by an orbax ``CheckpointManager``. Orbax writes each step
to a temporary directory and renames it when complete, so a kill at any moment leaves the
newest finished checkpoint intact; ``latest_step`` only sees finished ones.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

# Groups that fix what a checkpoint means; resuming with any of them changed is refused.
FROZEN_GROUPS = ("model", "data")
# Fields that may differ between runs without changing the model or the data it sees.
FREE_FIELDS = {"data.cache_dir", "data.prefetch"}


class CheckpointError(ValueError):
  """A checkpoint that is missing, corrupt, or does not match the config."""


def manager(directory: str, every: int, keep: int) -> ocp.CheckpointManager:
  """A manager that saves every ``every`` steps (or when forced) and keeps the newest ``keep``."""
  policies = ocp.checkpoint_managers
  options = ocp.CheckpointManagerOptions(
      save_decision_policy=policies.FixedIntervalPolicy(every),
      preservation_policy=policies.LatestN(keep),
      enable_async_checkpointing=False)
  return ocp.CheckpointManager(os.path.abspath(directory), options=options)


def save(mngr: ocp.CheckpointManager, step: int, state: Any, force: bool = False) -> bool:
  """Save ``state`` at ``step`` if the policy says so (always when ``force``)."""
  saved = mngr.save(step, args=ocp.args.StandardSave(state), force=force)
  mngr.wait_until_finished()
  return saved


def restore(mngr: ocp.CheckpointManager, abstract_state: Any, step: int | None = None) -> Any:
  """Restore ``step`` (default: the latest) into the structure of ``abstract_state``.

  ``abstract_state`` carries shapes, dtypes and shardings (``jax.eval_shape`` of the
  initialiser); a checkpoint of a different model is refused with the mismatch named.
  """
  step = mngr.latest_step() if step is None else step
  if step is None:
    raise CheckpointError(f"no finished checkpoint in {mngr.directory}")
  target = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract_state)
  try:
    return mngr.restore(step, args=ocp.args.StandardRestore(target))
  except (ValueError, KeyError, TypeError, FileNotFoundError) as e:
    raise CheckpointError(
        f"checkpoint {mngr.directory}/{step} could not be restored into this model's state: "
        f"{type(e).__name__}: {e}. It was written by a different model or it is corrupt; "
        f"use a fresh --workdir, or delete that step directory to fall back to an older one"
    ) from e


# ----------------------------------------------------------------------------- the run's config


def config_path(workdir: str) -> str:
  return os.path.join(workdir, "config.json")


def save_config(workdir: str, config) -> None:
  os.makedirs(workdir, exist_ok=True)
  tmp = config_path(workdir) + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(config.to_json_best_effort(indent=2, sort_keys=True))
  os.replace(tmp, config_path(workdir))


def load_config_dict(workdir: str) -> dict | None:
  path = config_path(workdir)
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{path} is not valid JSON ({e}); restore it or use a fresh --workdir") from e


def config_differences(saved: dict, current: dict) -> list[str]:
  """``group.field: saved -> current`` for every frozen-group field that differs."""
  diffs = []
  for group in FROZEN_GROUPS:
    old, new = saved.get(group, {}), current.get(group, {})
    for field in sorted(set(old) | set(new)):
      if f"{group}.{field}" in FREE_FIELDS:
        continue
      if old.get(field, "<missing>") != new.get(field, "<missing>"):
        diffs.append(f"{group}.{field}: {old.get(field, '<missing>')!r} -> {new.get(field, '<missing>')!r}")
  return diffs


def check_resumable(workdir: str, config) -> None:
  """Refuse to resume a run in ``workdir`` with a config that changes its model or data."""
  saved = load_config_dict(workdir)
  if saved is None:
    return
  diffs = config_differences(saved, json.loads(config.to_json_best_effort()))
  if diffs:
    raise CheckpointError(
        f"{workdir} holds a run whose model or data differ from this config:\n  "
        + "\n  ".join(diffs)
        + "\nUse the original config to resume, or a fresh --workdir for a new run.")

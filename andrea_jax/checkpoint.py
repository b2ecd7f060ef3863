"""Checkpoints with orbax: save decisions, retention, atomic writes, and safe restores.

A run's ``checkpoints/<step>/`` directories are written by an orbax ``CheckpointManager``.
Orbax writes each step to a temporary directory and renames it when complete, so a kill
at any moment leaves the newest finished checkpoint intact; ``latest_step`` only sees
finished ones. ``restore`` brings back the whole training state, ``restore_params`` the
parameters alone (orbax reads only that sub-tree: no optimizer state is built or read).
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from andrea_jax import errors

# Kept for callers that catch ``checkpoint.CheckpointError``: the project's own type.
CheckpointError = errors.CheckpointError


def manager(directory: str, every: int, keep: int) -> ocp.CheckpointManager:
  """A manager that saves every ``every`` steps (or when forced) and keeps the newest ``keep``."""
  policies = ocp.checkpoint_managers
  options = ocp.CheckpointManagerOptions(
      save_decision_policy=policies.FixedIntervalPolicy(every),
      preservation_policy=policies.LatestN(keep),
      enable_async_checkpointing=False)
  # A PyTree handler, named up front, so a checkpoint's metadata (its tree of shapes) can
  # be read before any restore, to say what differs when a restore is refused.
  return ocp.CheckpointManager(os.path.abspath(directory), options=options,
                               item_handlers=ocp.PyTreeCheckpointHandler())


def save(mngr: ocp.CheckpointManager, step: int, state: Any, force: bool = False) -> bool:
  """Save ``state`` at ``step`` if the policy says so (always when ``force``)."""
  saved = mngr.save(step, args=ocp.args.PyTreeSave(state), force=force)
  mngr.wait_until_finished()
  return saved


def check_step(mngr: ocp.CheckpointManager, step: int | None) -> int:
  """``step`` (default: the latest) if a finished checkpoint of it exists, else a clear error."""
  steps = sorted(mngr.all_steps())
  if not steps:
    raise CheckpointError(f"no finished checkpoint in {mngr.directory}: the run saved none yet "
                          f"(checkpoint.every steps, at the end, or on SIGTERM/SIGINT)")
  if step is None:
    return steps[-1]
  if step not in steps:
    raise CheckpointError(f"step {step} does not exist in {mngr.directory}; available steps: "
                          f"{', '.join(map(str, steps))} (pass one of them as --step, or omit "
                          f"--step for the latest)")
  return step


def restore(mngr: ocp.CheckpointManager, abstract_state: Any, step: int | None = None) -> Any:
  """Restore ``step`` (default: the latest) into the structure of ``abstract_state``.

  ``abstract_state`` carries shapes, dtypes and shardings (``jax.eval_shape`` of the
  initialiser, shardings attached); a checkpoint of a different state is refused with
  the differing entries named.
  """
  return _restore(mngr, abstract_state, check_step(mngr, step), partial=False)


def restore_params(mngr: ocp.CheckpointManager, abstract_params: Any,
                   step: int | None = None) -> Any:
  """The parameters alone of ``step`` (default: the latest); the optimizer state is not read."""
  return _restore(mngr, {"params": abstract_params}, check_step(mngr, step),
                  partial=True)["params"]


def _restore(mngr, abstract: Any, step: int, partial: bool) -> Any:
  target = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract)
  where = f"checkpoint {mngr.directory}/{step}"
  fix = ("Resume with the config that wrote it, use a fresh --workdir, or delete that step "
         "directory to fall back to an older one")
  saved = mngr.item_metadata(step)
  # Compared first: a target without shardings would be restored without a shape check.
  if saved is not None and (differences := tree_differences(saved.tree, target, partial)):
    raise CheckpointError(f"{where} does not match this run's state: {'; '.join(differences)}. "
                          f"{fix}")
  args = ocp.args.PyTreeRestore(
      item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
      partial_restore=partial)
  try:
    return mngr.restore(step, args=args)
  except (ValueError, KeyError, TypeError, FileNotFoundError) as e:
    raise CheckpointError(f"{where} could not be read although its names and shapes match "
                          f"this run's state, so its files are damaged ({type(e).__name__}: "
                          f"{str(e)[:300]}). {fix}") from e


def _name(path) -> str:
  """``opt_state/0/mu/wte`` for a key path; namedtuple fields and dict keys read alike."""
  parts = []
  for k in path:
    parts.append(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))))
  return "/".join(parts)


def _leaves(tree) -> dict[str, tuple]:
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {_name(path): tuple(getattr(leaf, "shape", ())) for path, leaf in leaves}


def tree_differences(saved: Any, target: Any, partial: bool = False, limit: int = 4) -> list[str]:
  """What separates a checkpoint's tree (its metadata) from the tree a run wants to restore."""
  old, new = _leaves(saved), _leaves(target)
  order = lambda names: sorted(names, key=lambda n: (not n.startswith("params/"), n))
  shown = lambda names: ", ".join(order(names)[:limit]) + (
      f" (and {len(names) - limit} more)" if len(names) > limit else "")
  out = []
  if not partial and (extra := set(old) - set(new)):
    out.append(f"only in the checkpoint: {shown(extra)}")
  if missing := set(new) - set(old):
    out.append(f"missing from the checkpoint: {shown(missing)}")
  reshaped = [f"{n} {old[n]} in the checkpoint vs {new[n]} here"
              for n in order(set(old) & set(new)) if old[n] != new[n]]
  if reshaped:
    out.append("different shapes: " + "; ".join(reshaped[:limit]))
  return out

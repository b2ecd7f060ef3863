"""Checkpoints with orbax: save decisions, retention, atomic writes, and safe restores.

A run's ``checkpoints/<step>/`` directories are written by an orbax ``CheckpointManager``
(``manager``): every ``checkpoint.every`` steps, and by wall time, ``checkpoint.every_seconds``
after the newest save or the run's start (``SinceStart``, orbax's time policy), and at the
steps ``checkpoint.keep_steps`` names, kept beside the newest ``checkpoint.keep``. Orbax
writes each step to a temporary directory and renames it when complete, so a kill at any
moment leaves the newest finished checkpoint intact; ``latest_step`` only sees finished
ones. ``restore`` brings back the whole training state, ``restore_params`` the
parameters alone (orbax reads only that sub-tree: no optimizer state is built or read).

A finished checkpoint can still be damaged afterwards (files cut short, emptied or
deleted: a full disk, a copy that stopped, a preemption of the file system). This module
is the one place that decides whether a checkpoint *reads whole*: ``restore_newest``
tries the steps newest first and falls back past damaged ones with a note naming the step
skipped and why (``DamagedError`` says which files); an explicit step that is damaged, or
no step that reads, is a ``CheckpointError`` naming the files and the step that still
works. A save that fills the disk is a ``CheckpointError`` too (``save``), after removing
its half-written directory, so the newest finished step stays the newest readable one.
A read or write that fails part-way is drained before orbax closes its event loop
(``_run_and_drain``): the fallback is one note, with no background traceback around it.

The diagnosis of a failed save or restore (a tree that differs, damaged files, a full disk,
memory run out) is ``checkpoint_faults.py``'s; its names are re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import os
import re
import shutil
import time
from typing import Any, Callable, NamedTuple

import jax
from absl import logging as absl_logging
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint._src import asyncio_utils as ocp_asyncio_utils

from andrea_jax import errors
from andrea_jax.checkpoint_faults import (DamagedError, damaged, disk_full, out_of_memory,
                                          tree_differences)

# Kept for callers that catch ``checkpoint.CheckpointError``: the project's own type.
CheckpointError = errors.CheckpointError
# Where a resumed run moves the damaged steps newer than the one it resumed from (beside
# ``checkpoints/``): out of orbax's sight, so the run can save those steps again, and kept.
DAMAGED_DIR = "checkpoints-damaged"


def manager(directory: str, every: int, keep: int, every_seconds: int = 0,
            keep_steps: tuple[int, ...] = ()) -> ocp.CheckpointManager:
  """A manager that saves every ``every`` steps, at each of ``keep_steps``, or once
  ``every_seconds`` (0: never) have passed since its newest save or its creation
  (``SinceStart``), or when forced; it keeps the newest ``keep`` and those of ``keep_steps``."""
  policies = ocp.checkpoint_managers
  decide = [policies.FixedIntervalPolicy(every)]
  decide += [SinceStart(minimum_interval_secs=every_seconds)] if every_seconds else []
  decide += [policies.SpecificStepsPolicy(frozenset(keep_steps))] if keep_steps else []
  preserve = policies.LatestN(keep)
  if keep_steps:
    preserve = policies.AnyPreservationPolicy([preserve, policies.CustomSteps(keep_steps)])
  options = ocp.CheckpointManagerOptions(
      save_decision_policy=decide[0] if len(decide) == 1 else policies.AnySavePolicy(decide),
      preservation_policy=preserve,
      enable_async_checkpointing=False)
  # A PyTree handler, named up front, so a checkpoint's metadata (its tree of shapes) can
  # be read before any restore, to say what differs when a restore is refused.
  return ocp.CheckpointManager(os.path.abspath(directory), options=options,
                               item_handlers=ocp.PyTreeCheckpointHandler())


class _Saved(NamedTuple):  # what orbax's policies read of a save (``PolicyCheckpointInfo``)
  step: int
  time: datetime.datetime
  metrics: dict | None = None


@dataclasses.dataclass(kw_only=True)
class SinceStart(ocp.checkpoint_managers.ContinuousCheckpointingPolicy):
  """Orbax's time-based policy (a save once ``minimum_interval_secs`` have passed since the
  newest save; decided on the primary host for all processes), counted from this policy's
  creation where that is newer: a fresh run does not save its first step at once, and a
  resume counts from its own start, not from a checkpoint written days ago. Whatever a step
  costs (22 minutes for andrea120m on a CPU), a kill loses at most the interval's work."""
  start: datetime.datetime = dataclasses.field(
      default_factory=lambda: datetime.datetime.now(datetime.timezone.utc))

  def should_save(self, step, previous_steps, *, context) -> bool:
    newest = previous_steps[-1].time if previous_steps else None
    # A step read back from disk may carry no time (orbax's naive ``datetime.min``).
    since = newest if newest is not None and newest.tzinfo and newest > self.start else self.start
    return super().should_save(step, [_Saved(-1, since)], context=context)


def saved_at(mngr: ocp.CheckpointManager, step: int) -> float | None:
  """When ``step`` was saved (seconds since the epoch), or None where its metadata says not."""
  try:
    nanoseconds = mngr.metadata(step).commit_timestamp_nsecs
  except Exception:  # pylint: disable=broad-except  (orbax raises bare Exceptions)
    return None
  return nanoseconds / 1e9 if nanoseconds else None


# ----------------------------------------------------------------------------- saving


def save(mngr: ocp.CheckpointManager, step: int, state: Any, force: bool = False) -> bool:
  """Save ``state`` at ``step`` if the policy says so (always when ``force``).

  A full disk is a ``CheckpointError`` saying what was kept and how much space the save
  needs; the half-written step is removed, so it is never taken for a checkpoint.
  """
  _quiet_orphaned_io()
  try:
    saved = mngr.save(step, args=ocp.args.PyTreeSave(state), force=force)
    mngr.wait_until_finished()
  except Exception as e:  # pylint: disable=broad-except  (orbax wraps the OSError)
    if not disk_full(e):
      raise
    directory = str(mngr.directory)
    try:  # let orbax's background writes of the failed save end before cleaning up after them
      mngr.wait_until_finished()
    except Exception:  # pylint: disable=broad-except  (the same failure, raised again)
      pass
    _remove_partial(directory, step)
    kept = sorted(s for s in mngr.all_steps() if s != step)
    raise CheckpointError(
        f"the disk is full: saving checkpoint step {step} to {directory} needs about "
        f"{_megabytes(state_bytes(state))} ({_megabytes(free_bytes(directory))} free); "
        f"{f'kept step {kept[-1]}, the newest checkpoint' if kept else 'no checkpoint was kept'}."
        f" Free space (or move the workdir to a larger disk) and rerun the same command to "
        f"resume{f' from step {kept[-1]}' if kept else ''}") from None
  return saved


def state_bytes(state: Any) -> int:
  """The bytes of the arrays in ``state`` (what a checkpoint of it holds, before metadata)."""
  return sum(int(np.prod(getattr(x, "shape", ()))) * np.dtype(x.dtype).itemsize
             for x in jax.tree.leaves(state) if hasattr(x, "dtype"))


def free_bytes(directory: str) -> int:
  """Free bytes on the file system of ``directory`` (or of its nearest existing parent)."""
  while not os.path.exists(directory) and os.path.dirname(directory) != directory:
    directory = os.path.dirname(directory)
  st = os.statvfs(directory)
  return st.f_bavail * st.f_frsize


def _megabytes(n: int) -> str:
  return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def _remove_partial(directory: str, step: int) -> None:
  """Remove what a failed save of ``step`` left: its temporary directory (and the step's own
  directory if the rename happened but the save did not finish). A writer thread of the
  failed save can still create or fill them after the error, so they are removed until none
  has been seen for three looks in a row, 50 ms apart (for at most about 2 seconds)."""
  final = os.path.join(directory, str(step))
  clean = 0
  for _ in range(40):
    left = [os.path.join(directory, name) for name in
            (os.listdir(directory) if os.path.isdir(directory) else ())
            if re.fullmatch(rf"{step}\.orbax-checkpoint-tmp.*", name)]
    if os.path.isdir(final) and not os.path.exists(os.path.join(final, "commit_success.txt")):
      left.append(final)
    for path in left:
      shutil.rmtree(path, ignore_errors=True)
    clean = 0 if left else clean + 1
    if clean == 3:
      return
    time.sleep(0.05)


# ----------------------------------------------------------------------------- restoring


def check_step(mngr: ocp.CheckpointManager, step: int | None, flag: str = "--step") -> int:
  """``step`` (default: the latest) if a finished checkpoint of it exists, else a clear error
  (``flag``: the option that chose it)."""
  steps = sorted(mngr.all_steps())
  if not steps:
    raise CheckpointError(f"no finished checkpoint in {mngr.directory}: the run saved none yet "
                          f"(checkpoint.every steps, at the end, or on SIGTERM/SIGINT)")
  if step is None:
    return steps[-1]
  if step not in steps:
    raise CheckpointError(f"step {step} does not exist in {mngr.directory}; available steps: "
                          f"{', '.join(map(str, steps))} (pass one of them as {flag}, or omit "
                          f"{flag} for the latest)")
  return step


def restore(mngr: ocp.CheckpointManager, abstract_state: Any, step: int | None = None) -> Any:
  """Restore ``step`` (default: the newest that reads whole) into the structure of
  ``abstract_state``.

  ``abstract_state`` carries shapes, dtypes and shardings (``jax.eval_shape`` of the
  initialiser, shardings attached); a checkpoint of a different state is refused with
  the differing entries named.
  """
  return restore_newest(mngr, abstract_state, step)[1]


def restore_params(mngr: ocp.CheckpointManager, abstract_params: Any,
                   step: int | None = None) -> tuple[int, Any]:
  """``(step, params)``: the parameters alone of ``step`` (default: the newest that reads
  whole); the optimizer state is not read."""
  step, tree = restore_newest(mngr, {"params": abstract_params}, step, partial=True)
  return step, tree["params"]


def restore_newest(mngr: ocp.CheckpointManager, abstract: Any, step: int | None = None,
                   partial: bool = False, set_aside: bool = False,
                   say: Callable[[str], None] = errors.note) -> tuple[int, Any]:
  """``(step, tree)``: ``step`` restored, or by default the newest step that reads whole.

  The default falls back past damaged steps, with a note (``say``) naming each one skipped
  and why; with ``set_aside`` (a run that resumes and will save those steps again) they are
  moved to ``checkpoints-damaged/`` beside ``checkpoints/``. A damaged ``step`` asked for,
  or no step that reads, is a ``CheckpointError`` naming the damaged files and the step that
  still works. ``partial``: ``abstract`` is a sub-tree of the saved state (the parameters).
  """
  chosen = check_step(mngr, step)
  candidates = [chosen] if step is not None else sorted(mngr.all_steps(), reverse=True)
  damaged: list[DamagedError] = []
  for s in candidates:
    try:
      tree = _restore(mngr, abstract, s, partial)
    except DamagedError as e:
      damaged.append(e)
      continue
    for e in damaged:
      moved = _set_aside(mngr, e.step) if set_aside else None
      say(f"{e}; skipped it and restored step {s}, the newest that reads whole" +
          (f" (moved the damaged step to {moved})" if moved else ""))
    if set_aside and damaged:
      mngr.reload()
    return s, tree
  if step is not None:
    others = [s for s in sorted(mngr.all_steps(), reverse=True) if s != step]
    works = next((s for s in others if _reads(mngr, abstract, s, partial)), None)
    hint = (f"--step={works} reads whole (omit --step for the newest step that does)"
            if works is not None else
            f"no other step reads whole either (tried {', '.join(map(str, others))})"
            if others else "it is the only step")
    raise CheckpointError(f"{damaged[0]}. {hint}")
  listed = "; ".join(f"step {e.step} ({e.what()})" for e in damaged)
  raise CheckpointError(f"no checkpoint in {mngr.directory} reads whole, all are damaged: "
                        f"{listed}. No --step works: restore the files from a copy, or pass "
                        f"a fresh --workdir to start again")


def _reads(mngr, abstract: Any, step: int, partial: bool) -> bool:
  try:
    _restore(mngr, abstract, step, partial)
  except DamagedError:
    return False
  return True


def _set_aside(mngr, step: int) -> str:
  """Move step ``step``'s directory to ``checkpoints-damaged/<step>`` (a new name if taken)."""
  source = os.path.join(str(mngr.directory), str(step))
  parent = os.path.join(os.path.dirname(str(mngr.directory)), DAMAGED_DIR)
  os.makedirs(parent, exist_ok=True)
  target, n = os.path.join(parent, str(step)), 1
  while os.path.exists(target):
    target, n = os.path.join(parent, f"{step}.{n}"), n + 1
  os.replace(source, target)
  return target


def _restore(mngr, abstract: Any, step: int, partial: bool) -> Any:
  _quiet_orphaned_io()
  target = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract)
  where = f"checkpoint {mngr.directory}/{step}"
  try:
    with _absl_quiet():  # a missing _METADATA is a warning there; the restore then says more
      saved = mngr.item_metadata(step)
  except Exception as e:  # pylint: disable=broad-except  (orbax raises bare Exceptions)
    if out_of_memory(e):
      raise
    raise damaged(str(mngr.directory), step, e) from e
  # Compared first: a target without shardings would be restored without a shape check.
  if saved is not None and (differences := tree_differences(saved.tree, target, partial)):
    raise CheckpointError(f"{where} does not match this run's state: {'; '.join(differences)}. "
                          f"Resume with the config that wrote it, or use a fresh --workdir")
  args = ocp.args.PyTreeRestore(
      item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
      partial_restore=partial)
  try:
    return mngr.restore(step, args=args)
  except Exception as e:  # pylint: disable=broad-except  (orbax raises bare Exceptions)
    if out_of_memory(e):
      raise
    raise damaged(str(mngr.directory), step, e) from e


@contextlib.contextmanager
def _absl_quiet(level: int = logging.ERROR):
  """Leave out orbax's log records below ``level`` (absl's logger) while in the block."""
  logger = absl_logging.get_absl_logger()
  previous = logger.level
  logger.setLevel(max(level, previous))
  try:
    yield
  finally:
    logger.setLevel(previous)


def _run_and_drain(coro):
  """Orbax's ``asyncio_utils._run_sync_via_new_loop``, and on failure, before the loop is
  closed, the loop's other tasks awaited to their end with their exceptions retrieved.

  When one array of a restore (or save) fails, orbax's ``gather`` raises at once while
  tensorstore still reads or writes the others; orbax closes the loop anyway, so each of
  those later completes into a closed loop (``RuntimeError: Event loop is closed``) or
  dies as a task whose exception was never retrieved: a page of tracebacks around the
  one-line note. Awaiting them first ends each read where it belongs, quietly.
  """
  loop = asyncio.new_event_loop()
  try:
    asyncio.set_event_loop(loop)
    try:
      return loop.run_until_complete(coro)
    except BaseException:
      left = asyncio.all_tasks(loop)
      if left:
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
      raise
  finally:
    asyncio.set_event_loop(None)
    loop.close()


ocp_asyncio_utils._run_sync_via_new_loop = _run_and_drain  # pylint: disable=protected-access


_QUIET = False


def _quiet_orphaned_io() -> None:
  """Leave out orbax's writer threads' log of the error that ``save`` or ``restore`` raises
  anyway (``_SignalingThread.run() raised``: a traceback on stderr around the one-line
  message); other log records pass on. The reads and writes a failure leaves in flight are
  awaited where they run (``_run_and_drain``), so they print nothing."""
  global _QUIET
  if _QUIET:
    return
  _QUIET = True

  def keep(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not ("orbax" in record.pathname and "_SignalingThread.run() raised" in message)

  absl_logging.get_absl_logger().addFilter(keep)

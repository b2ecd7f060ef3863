"""The training loop: steps, periodic evaluation, logging, diagnostics and checkpoints.

``train_loop`` steps ``Models`` (one model, or a group's members: ``train.single_run``,
``multi.group``) from a start step to ``TrainConfig.steps``: each step's batch from
``Batches``, every ``eval_every`` steps (and at the end) ``evaluate`` on the fixed
``EvalSet``, rows to the ``Logger``, a checkpoint when the policy, the end or a signal
asks. The loop reads a step's divergence flag one step late (no host sync per step;
exactly at log, evaluation and checkpoint steps, and at every step where steps are slow),
drops a diverged member from its rows, and stops once no member is left training (a
group's others go on) or on SIGTERM/SIGINT (after saving). No diverged state is saved.

A checkpoint is saved when orbax's policy asks (``checkpoint.every`` steps, or
``checkpoint.every_seconds`` since the newest save: ``checkpoint.manager``), at the end, or
on a signal; the save and the stop are decided at the end of a step, after its rows and
evaluation, so a signal during any of them saves that step. A step slower than
``SLOW_STEP_S`` is waited for before the next starts, so what is saved is the step just
ended, not the one after it.

Every ``train.task_eval_every`` updates (and at the end) the downstream task scores each
member (``tasks.Scorer``: HellaSwag), a row of its own.

The loop's parts live beside it, one job each: what it trains, ``Models`` and
``per_member`` (``members.py``); the validation loss, ``EvalSet``, ``make_eval_set`` and
``evaluate`` (``validation.py``); the rows, the ``Logger`` and its ``Record`` (``logger.py``);
the trace, ``Profiler`` (``profiler.py``). Their names are re-exported here as well.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from andrea_jax import checkpoint as ckpt
from andrea_jax import diagnostics
from andrea_jax import forecast
from andrea_jax import loader as loader_lib
from andrea_jax import sharding
from andrea_jax import signals as signals_lib
from andrea_jax import step as step_lib
from andrea_jax import tasks
from andrea_jax.logger import Logger, Record
from andrea_jax.members import Models, per_member
from andrea_jax.profiler import Profiler
from andrea_jax.validation import EvalSet, evaluate
# Re-exported: what callers of ``loop.X`` used before these moved (module docstring).
from andrea_jax.logger import wandb_run as wandb_run
from andrea_jax.validation import EVAL_LINE_EVERY_S as EVAL_LINE_EVERY_S
from andrea_jax.validation import UNIGRAM_TOKENS as UNIGRAM_TOKENS
from andrea_jax.validation import make_eval_set as make_eval_set
from andrea_jax.validation import unigram_loss as unigram_loss


# ----------------------------------------------------------------------------- batches


class Batches:
  """The next training batch of every member: one prefetching loader per distinct seed."""

  def __init__(self, models: Models, train_paths, t: step_lib.TrainConfig,
               block_size: int, start_step: int, prefetch: int):
    self.models = models
    # This process's rows as A microbatches; the microbatches of all processes together
    # hold the global batch's rows (grouped differently than with one process, which
    # leaves the averaged gradient unchanged: every microbatch has B/A rows).
    self.shape = (t.grad_accum_steps, -1, block_size + 1)
    self.loaders = {seed: loader_lib.Loader(train_paths, t.batch_size, block_size, seed,
                                            start_step=start_step, prefetch=prefetch)
                    for seed in sorted(set(models.batch_seeds))}

  @staticmethod
  def like(models: Models, t: step_lib.TrainConfig, block_size: int) -> jax.Array:
    """A batch of zeros with the shape, dtype and sharding of every batch: what the step
    is compiled for before any data is read."""
    local = np.zeros((t.grad_accum_steps, t.batch_size // jax.process_count() // t.grad_accum_steps,
                      block_size + 1), np.int32)
    return models.place(np.stack([local] * models.n) if models.stacked else local)

  def __next__(self) -> jax.Array:
    rows = {seed: next(loader).reshape(self.shape) for seed, loader in self.loaders.items()}
    seeds = self.models.batch_seeds
    local = np.stack([rows[s] for s in seeds]) if self.models.stacked else rows[seeds[0]]
    return self.models.place(local)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    for loader in self.loaders.values():
      loader.close()

# ----------------------------------------------------------------------------- the loop


@dataclasses.dataclass
class Outputs:
  """Where the loop's results go: rows, checkpoints, (if on) diagnostics, the profiler's
  trace and the downstream task's scores."""
  log: Logger
  checkpoints: Any  # an orbax CheckpointManager (``checkpoint.manager``)
  diagnostics: diagnostics.Recorder | None = None
  profiler: Profiler = dataclasses.field(default_factory=lambda: Profiler(None, ""))
  task: tasks.Scorer | None = None  # ``train.task_eval_every``'s


class Outcome(NamedTuple):
  status: str  # "completed", "diverged" or "interrupted"
  state: Any  # the last state (after a divergence: the last finite one)
  alive: np.ndarray  # alive[i]: member i has not diverged
  record: Record


# A step slower than this (seconds, host wall time) is waited for before the next one is
# started: the host has nothing to overlap with it, and a save by time or a stop then takes
# the step that just ended instead of the one after it (two steps later: 44 minutes for
# andrea120m on a CPU). Faster steps overlap the host's work with the device's.
SLOW_STEP_S = 2.0


def _slow(seconds: float) -> bool:
  """Whether the next step waits for itself (one process: processes must agree on it)."""
  return seconds > SLOW_STEP_S and jax.process_count() == 1


def train_loop(models: Models, state, t: step_lib.TrainConfig, start_step: int,
               batches: Batches, eval_set: EvalSet, out: Outputs,
               compile_s: float = 0.0) -> Outcome:
  """Steps ``start_step + 1 .. t.steps`` (module docstring): ``models``' step and evaluation
  compiled ahead, in ``compile_s`` seconds (``train.compile_checked``).

  The loop stops when no member is left, on a signal (after saving) or at ``t.steps``.
  """
  log, mngr, diag = out.log, out.checkpoints, out.diagnostics
  alive = per_member(state["good"]).copy()
  evaluated = -1  # the step of this segment's newest evaluation

  def evaluation(step):
    nonlocal evaluated
    with log.clock.not_training():  # the rows' train_time_s counts the steps alone
      log.log_eval(step, evaluate(models, state["params"], eval_set, step), alive)
    evaluated = step

  def task_evaluation(step):
    signals_lib.set_phase(f"scoring hellaswag at step {step}")
    with log.clock.not_training():
      log.log_task(step, out.task(state["params"], models.stacked, models.n), alive)

  def settle(flags, step) -> None:
    """Drop the members that diverged by ``step`` (its flags): the host waits for it."""
    alive[:] &= per_member(flags["good"])
    signals.progress(trained=step)

  status, previous = "completed", None
  with signals_lib.StopSignals() as signals:
    signals.progress(trained=start_step, saved=start_step)
    batch = next(batches) if start_step < t.steps else None
    if batch is not None and sharding.is_lead():  # what the run is in for (forecast.py)
      tqdm.write(forecast.estimate(log.flops_per_token * log.tokens_per_step,
                                   log.tokens_per_step, t, models.n_devices, start_step,
                                   compile_s, eval_at_start=start_step == 0 and t.eval_at_start))
    try:
      if start_step == 0:
        if t.eval_at_start:  # train.eval_at_start: the real models skip it on a CPU
          evaluation(0)
        if diag:
          diag.record(0, state["params"], alive=alive)
    except signals_lib.Interrupted:
      status = "interrupted"  # nothing trained yet: nothing to save
    log.restart_clock()
    slow, last = True, time.monotonic()  # the first step of a segment is waited for
    for step in range(start_step + 1, t.steps + 1) if status == "completed" else ():
      signals_lib.set_phase(f"training (step {step})")
      if step > start_step + 1:
        batch = next(batches)
      before = diag.snapshot(state["params"]) if diag and diag.wants_snapshot(step) else None
      out.profiler.before(step, state)
      state, m = out.profiler.step(step, models.step, state, batch)
      out.profiler.after(step, state)
      log.window.append(m)
      logging = step % t.log_every == 0 or step == t.steps
      evaluating = step % t.eval_every == 0 or step == t.steps
      tasking = out.task is not None and (step % t.task_eval_every == 0 or step == t.steps)
      # Divergence, read one step late: the previous step has finished by now, so the host
      # does not wait on this one, except where it waits anyway (logs, evaluations) or where
      # steps are slow (nothing to overlap: a save or a stop then takes the step just done).
      waited = logging or evaluating or tasking or slow
      if waited or previous is not None:
        settle(*((m, step) if waited else (previous, step - 1)))
      previous = m
      if not alive.any():  # nothing left to train; nothing diverged is saved
        status = "diverged"
        break
      slow, last = _slow(time.monotonic() - last), time.monotonic()
      if diag:
        with log.clock.not_training():
          diag.record(step, state["params"], before, alive)
      if logging:
        log.log_train(step, alive)
      log.bar.update(1)
      stop = False
      try:
        if evaluating:
          evaluation(step)
        if tasking:
          task_evaluation(step)
      except signals_lib.Interrupted:  # stopped between its batches: save the step
        stop = True
      # Asked last: a signal during this step's wait, rows or evaluation stops at it, and
      # the time policy (checkpoint.every_seconds) reads the time this step ended.
      stop = stop or signals_lib.stop_requested(signals, step, t.log_every)
      if stop or step == t.steps or mngr.should_save(step):
        if not waited:  # its flags first: no diverged state is saved
          settle(m, step)
          if not alive.any():
            status = "diverged"
            break
        if not logging:  # a checkpoint's step has its row
          log.log_train(step, alive)
        signals_lib.set_phase(f"saving the checkpoint of step {step}")
        with log.clock.not_training():
          ckpt.save(mngr, step, state, force=True)
        signals.progress(saved=step)
      if stop:
        status = "interrupted"
        break
  if status == "completed" and evaluated != t.steps:
    # Finished before, stopped before its summary: evaluate the final state now.
    evaluation(t.steps)
  return Outcome(status, state, alive, log.record)

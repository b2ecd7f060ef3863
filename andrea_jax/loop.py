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

``evaluate`` computes; the ``Logger`` writes and prints: ``metrics.jsonl`` (+ TensorBoard,
and Weights & Biases with ``train.wandb_mode``), the progress bar, a line per row where stdout is not a terminal, and the ``Record`` of
each member's last train loss and evaluations that its summary is built from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import sys
import time
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from andrea_jax import checkpoint as ckpt
from andrea_jax import diagnostics
from andrea_jax import forecast
from andrea_jax import loader as loader_lib
from andrea_jax import metrics as metrics_lib
from andrea_jax import model
from andrea_jax import prepare as prepare_lib
from andrea_jax import progress as progress_lib
from andrea_jax import sharding
from andrea_jax import signals as signals_lib
from andrea_jax import step as step_lib
from andrea_jax import tasks
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax import workdir as workdir_lib
from andrea_jax.model_config import ModelConfig, compute_dtype


@dataclasses.dataclass
class Models:
  """What a run trains: one model (a single run) or a group's members.

  Its functions take and return the state of all of them; with ``stacked`` every leaf of
  the state (and the metrics, evaluations and probes) carries a leading member axis.
  """
  dirs: list[str]  # each member's directory for its metrics and summary (single: the workdir)
  batch_seeds: list[int]  # each member's batch order (``loader.batch_at``'s seed)
  stacked: bool
  abstract: Any  # the state's shapes, dtypes (and shardings): the target of a restore
  init: Callable[[], Any]  # a fresh state
  step: Callable  # jitted, donating: (state, batch) -> (state, {"loss", "grad_norm", "good"})
  eval_loss: Callable  # jitted: (params, [B, T+1] batch) -> mean loss (of each member)
  learning_rate: Callable[[int], np.ndarray]  # the rate of update k (0-based) of each member
  place: Callable[[np.ndarray], jax.Array]  # this process's rows -> the step's batch
  summary_fields: list[dict]  # what each member's summary adds (a group: its rate and seeds)
  tensorboard: bool = True  # TensorBoard event files beside metrics.jsonl
  n_devices: int = 1  # the devices the program runs on (a group: one; a run: its mesh)

  @property
  def n(self) -> int:
    return len(self.dirs)


def per_member(value) -> np.ndarray:
  """A host array with a leading member axis, whether ``value`` is stacked or not."""
  return np.atleast_1d(np.asarray(jax.device_get(value)))


# ----------------------------------------------------------------------------- evaluation


@dataclasses.dataclass
class EvalSet:
  """The fixed validation batches and the baselines they are read against."""
  arrays: list  # this process's rows of each batch, as global arrays
  unigram: float  # the unigram baseline's loss on them (nats/token)
  targets: np.ndarray  # the targets evaluated, all processes' rows (for bits per byte)
  token_bytes: np.ndarray  # bytes per token id
  first_batch: np.ndarray  # the diagnostics probe batch

  def bpb(self, val_loss: float | None) -> float | None:
    if val_loss is None:
      return None
    return metrics_lib.bits_per_byte(val_loss, self.targets, self.token_bytes)


def make_eval_set(t: step_lib.TrainConfig, cfg: ModelConfig,
                  prepared: prepare_lib.PreparedData, mesh) -> EvalSet:
  """``t.eval_batches`` batches of ``t.batch_size`` rows from the validation shard."""
  train_tokens = prepared.stream("train")
  val_tokens = prepared.stream("val")
  eval_set = loader_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                     name=f"the validation shards in {prepared.directory!r}")
  # Each process holds its own rows of every eval batch, like the loader's train batches.
  local = loader_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                  process_index=jax.process_index(),
                                  process_count=jax.process_count())
  batch = sharding.batch_sharding(mesh, batch_dim=0, ndim=2)
  tok = tokenizer_lib.load(prepared.tokenizer_path, cfg.vocab_size)
  return EvalSet(arrays=[sharding.global_batch(b, batch, batch_dim=0) for b in local],
                 unigram=unigram_loss(train_tokens, eval_set, cfg.vocab_size),
                 targets=eval_set[..., 1:],
                 token_bytes=metrics_lib.token_bytes(tok, cfg.vocab_size),
                 first_batch=eval_set[0])


# The unigram baseline counts at most this many training tokens (the first shard's 100 M
# of a large corpus: its frequencies are those of the whole to well under a per cent).
UNIGRAM_TOKENS = 100_000_000


def unigram_loss(train_tokens, eval_set: np.ndarray, vocab_size: int) -> float:
  """Cross-entropy (nats) of the add-one-smoothed token frequencies of the training split
  (its first ``UNIGRAM_TOKENS``: a start reads a bounded share of a large corpus)."""
  head = np.asarray(train_tokens[:min(UNIGRAM_TOKENS, len(train_tokens))])
  counts = np.bincount(head, minlength=vocab_size).astype(np.float64) + 1.0
  log_p = np.log(counts / counts.sum())
  return float(-log_p[eval_set[..., 1:]].mean())


# Seconds between two lines of an evaluation's progress where stdout is not a terminal.
EVAL_LINE_EVERY_S = 10.0


def evaluate(models: Models, params, eval_set: EvalSet, step: int = 0) -> np.ndarray:
  """Each member's mean validation loss over the fixed batches of ``eval_set``.

  With a bar on a terminal, else a line every ``EVAL_LINE_EVERY_S`` (``progress.Progress``:
  batches done and the time left); a SIGINT is read between batches (``signals.check``
  raises ``signals.Interrupted``): one batch is a single jitted call.
  """
  signals_lib.set_phase(f"evaluating step {step}")
  lead = sharding.is_lead()
  if step == 0 and lead:
    tqdm.write(f"step 0: evaluating on {len(eval_set.arrays)} validation batches")
  losses = []
  with progress_lib.Progress(f"eval step {step}", len(eval_set.arrays), unit="batch",
                             every_s=EVAL_LINE_EVERY_S, show=lead, last_line=False) as bar:
    for b in eval_set.arrays:
      losses.append(per_member(models.eval_loss(params, b)))  # waits for the batch
      signals_lib.check()
      bar.update(1)
  return np.mean(losses, axis=0)


# ----------------------------------------------------------------------------- rows


@dataclasses.dataclass
class Record:
  """What a run's rows said of each member, for its summary (``train.summary``)."""
  train_loss: list  # the newest logged train loss (None: none yet)
  initial_val: list  # the validation loss at step 0 (None: not in the rows)
  val: list  # the newest evaluation, (val_loss, step) (None: none yet)

  @classmethod
  def start(cls, dirs: list[str], start_step: int) -> "Record":
    """Empty for a fresh run. A resumed segment starts from the earlier segments' rows up to
    ``start_step``: read back from each member's ``metrics.jsonl`` once, here."""
    record = cls([None] * len(dirs), [None] * len(dirs), [None] * len(dirs))
    for i, d in enumerate(dirs if start_step else ()):
      for r in metrics_lib.read_metrics(d):
        if r["step"] <= start_step:
          record.add(i, r)
    return record

  def add(self, i: int, row: dict) -> None:
    if "loss" in row:
      self.train_loss[i] = row["loss"]
    if "val_loss" in row:
      self.val[i] = (row["val_loss"], row["step"])
      if row["step"] == 0:
        self.initial_val[i] = row["val_loss"]


class Logger:
  """Rows of each member still training: ``metrics.jsonl``, the bar, stdout, the ``Record``."""

  def __init__(self, models: Models, cfg: ModelConfig, t: step_lib.TrainConfig,
               eval_set: EvalSet, start_step: int, clock: workdir_lib.Clock):
    lead = sharding.is_lead()
    self.models, self.eval_set, self.clock, self.steps = models, eval_set, clock, t.steps
    self.writers = [metrics_lib.Writer(d, enabled=lead, tensorboard=models.tensorboard,
                                       wandb=wandb_run(models, i, cfg, t))
                    for i, d in enumerate(models.dirs)]
    self.record = Record.start(models.dirs, start_step)
    self.tokens_per_step = t.batch_size * cfg.block_size
    # The program's FLOPs per token of one member: all members run in it.
    self.flops_per_token = models.n * model.flops_per_token(cfg)
    peak = metrics_lib.device_peak(jax.devices()[0], compute_dtype(cfg))
    # The peak of the devices the program runs on (a group's: one; a CPU's devices share
    # the cores its one peak was measured on).
    per_program = 1 if jax.devices()[0].platform == "cpu" else models.n_devices
    self.peak = peak.flops and peak.flops * per_program
    self.peak_source = peak.source
    self.window, self.last = [], (time.time(), start_step)
    self.measured = False  # the first row of a segment prints the measured speed
    self.bar = tqdm(total=t.steps, initial=start_step, desc="train", unit="step",
                    disable=None if lead else True, dynamic_ncols=True)
    # Where stdout is not a terminal (CI, nohup, a log file) or tqdm shows nothing (its
    # stderr is not one either), print a line per row: the log says how the run goes.
    self.print_rows = lead and (self.bar.disable or not sys.stdout.isatty())

  def _write(self, i: int, step: int, row: dict) -> None:
    self.writers[i].write(step, row)
    self.record.add(i, {"step": step, **row})

  def log_train(self, step: int, alive: np.ndarray) -> None:
    """One row per member still training: the window's mean loss and gradient norm."""
    host = jax.device_get(self.window)
    now = time.time()
    rate = (step - self.last[1]) * self.tokens_per_step / max(now - self.last[0], 1e-9)
    loss = np.mean([per_member(h["loss"]) for h in host], axis=0)
    grad_norm = np.mean([per_member(h["grad_norm"]) for h in host], axis=0)
    z_loss = np.mean([per_member(h["z_loss"]) for h in host], axis=0) if "z_loss" in host[0] else None
    lr = self.models.learning_rate(step - 1)
    mfu = self.peak and metrics_lib.mfu(rate, self.flops_per_token, self.peak)
    for i in np.flatnonzero(alive):
      row = {"loss": float(loss[i]), "lr": float(lr[i]), "grad_norm": float(grad_norm[i]),
             "tokens_per_s": rate, "wall_time_s": self.clock.seconds()}
      if z_loss is not None:  # the z-loss term, apart from the cross-entropy
        row["z_loss"] = float(z_loss[i])
      if self.peak:
        row["mfu"] = mfu
      self._write(i, step, row)
    live = np.flatnonzero(alive)
    self.bar.set_postfix(loss=f"{np.mean(loss[live]):.3f}", tok_s=f"{rate * len(live):,.0f}",
                         **({"mfu": f"{mfu:.1%}"} if self.peak else {}))
    if not self.measured and sharding.is_lead():
      self.measured = True
      per_step = max(now - self.last[0], 1e-9) / max(step - self.last[1], 1)
      line = forecast.measured(per_step, rate * len(live), self.steps - step)
      # MFU beside the step time; an unknown peak says so on a line of its own.
      tqdm.write(f"{line}; MFU {mfu:.2%} of {self.peak_source}" if self.peak else
                 f"{line}\n{self.peak_source}")
    if self.print_rows:
      i = live[0]
      what = (f"loss {loss[i]:.4f}, lr {lr[i]:.3g}, grad_norm {grad_norm[i]:.3f}"
              if self.models.n == 1 else "loss " + ", ".join(
                  f"{os.path.basename(self.models.dirs[j])} {loss[j]:.4f}" for j in live))
      speed = f"{rate * len(live):,.0f} tokens/s" + (f", MFU {mfu:.2%}" if self.peak else "")
      print(f"step {step}/{self.steps}: {what}, {speed}", flush=True)
    self.window, self.last = [], (now, step)

  def log_eval(self, step: int, val: np.ndarray, alive: np.ndarray) -> None:
    """The validation loss (with bits per byte) of each member still training; one line."""
    ev = self.eval_set
    for i in np.flatnonzero(alive):
      self._write(i, step, {"val_loss": float(val[i]), "val_bpb": ev.bpb(float(val[i]))})
    live = np.flatnonzero(alive)
    if self.models.n == 1:
      bpb = ev.bpb(float(val[0]))
      what = f"{val[0]:.4f}" + ("" if bpb is None else f", {bpb:.4f} bits/byte")
    else:
      what = ", ".join(f"{os.path.basename(self.models.dirs[i])} {val[i]:.4f}" for i in live)
    tqdm.write(f"step {step}: val_loss {what} (unigram {ev.unigram:.4f})")

  def log_task(self, step: int, scores: list[dict], alive: np.ndarray) -> None:
    """The downstream task's accuracies of each member still training (``tasks.Scorer``)."""
    for i in np.flatnonzero(alive):
      self._write(i, step, {"hellaswag_acc": scores[i]["acc"],
                            "hellaswag_acc_norm": scores[i]["acc_norm"]})
    live = np.flatnonzero(alive)
    what = (tasks.describe(scores[0]) if self.models.n == 1 else "hellaswag acc_norm " + ", ".join(
        f"{os.path.basename(self.models.dirs[i])} {scores[i]['acc_norm']:.4f}" for i in live))
    tqdm.write(f"step {step}: {what}")

  def restart_clock(self) -> None:
    """The speed is measured from now (not over compilation and the step-0 evaluation)."""
    self.last = (time.time(), self.last[1])

  def close(self) -> None:
    self.bar.close()
    for w in self.writers:
      w.close()


def wandb_run(models: Models, i: int, cfg: ModelConfig, t: step_lib.TrainConfig
              ) -> metrics_lib.WandbRun | None:
  """Member ``i``'s W&B run (None: ``train.wandb_mode="off"``): a single run is named
  ``train.wandb_name`` or its workdir's name; a group's members by their names, in a W&B
  group named so. The W&B config holds the model, the training settings and the member's
  own (its rate and seeds)."""
  if t.wandb_mode == "off":
    return None
  d = os.path.abspath(models.dirs[i])
  name = t.wandb_name or os.path.basename(os.path.dirname(d) if models.stacked else d)
  config = {"model": dataclasses.asdict(cfg), "train": dataclasses.asdict(t),
            **models.summary_fields[i]}
  if models.stacked:
    return metrics_lib.WandbRun(t.wandb_mode, t.wandb_project, os.path.basename(d), name, config)
  return metrics_lib.WandbRun(t.wandb_mode, t.wandb_project, name, config=config)


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


# ----------------------------------------------------------------------------- the profiler


class Profiler:
  """A ``jax.profiler`` trace of updates ``first..last`` (``train.profile_steps``) in
  ``directory``, in the layout TensorBoard's profile plugin reads
  (``plugins/profile/<run>/<host>.xplane.pb``); one line says where and how to open it.

  The trace starts once the update before ``first`` has finished and stops once ``last``
  has (a resumed segment traces what is left of the range); leaving its ``with`` stops a
  trace still running (a stop, a divergence, an error).
  """

  def __init__(self, steps: tuple[int, int] | None, directory: str):
    self.steps, self.directory = steps, directory
    self.running, self.last, self.done = None, None, False  # the first and the last traced

  def before(self, step: int, state) -> None:
    if (self.steps and not self.done and not self.running
        and self.steps[0] <= step <= self.steps[1]):
      jax.block_until_ready(state)  # the updates before it are not in the trace
      jax.profiler.start_trace(self.directory)
      self.running = step

  def annotate(self, step: int):
    """Around update ``step``'s call: TensorBoard's step-time view reads ``train`` steps."""
    if not self.running:
      return contextlib.nullcontext()
    return jax.profiler.StepTraceAnnotation("train", step_num=step)

  def after(self, step: int, state) -> None:
    self.last = step
    if self.running and step == self.steps[1]:
      jax.block_until_ready(state)
      self.stop()

  def stop(self) -> None:
    jax.profiler.stop_trace()
    first, last, self.running, self.done = self.running, self.last, None, True
    runs = sorted(glob.glob(os.path.join(self.directory, "plugins", "profile", "*")),
                  key=os.path.getmtime)
    if sharding.is_lead():
      tqdm.write(f"profile of updates {first}-{last}: {runs[-1] if runs else self.directory}; open "
                 f"it with: tensorboard --logdir {self.directory} (pip install tensorboard "
                 f"tensorboard-plugin-profile), then the Profile tab")

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    if self.running:
      self.stop()


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
               batches: Batches, eval_set: EvalSet, out: Outputs) -> Outcome:
  """Steps ``start_step + 1 .. t.steps`` (module docstring).

  The loop stops when no member is left, on a signal (after saving) or at ``t.steps``.
  """
  log, mngr, diag = out.log, out.checkpoints, out.diagnostics
  alive = per_member(state["good"]).copy()
  evaluated = -1  # the step of this segment's newest evaluation

  def evaluation(step):
    nonlocal evaluated
    log.log_eval(step, evaluate(models, state["params"], eval_set, step), alive)
    evaluated = step

  def task_evaluation(step):
    signals_lib.set_phase(f"scoring hellaswag at step {step}")
    log.log_task(step, out.task(state["params"], models.stacked, models.n), alive)

  def settle(flags, step) -> None:
    """Drop the members that diverged by ``step`` (its flags): the host waits for it."""
    alive[:] &= per_member(flags["good"])
    signals.progress(trained=step)

  status, previous = "completed", None
  with signals_lib.StopSignals() as signals:
    signals.progress(trained=start_step, saved=start_step)
    batch = next(batches) if start_step < t.steps else None
    if batch is not None:  # compiled ahead, then what the run is in for (forecast.py)
      step_fn, eval_fn, seconds = forecast.compile_programs(
          models.step, models.eval_loss, state, batch, eval_set.arrays[0])
      models = dataclasses.replace(models, step=step_fn, eval_loss=eval_fn)
      if sharding.is_lead():
        tqdm.write(forecast.estimate(log.flops_per_token * log.tokens_per_step,
                                     log.tokens_per_step, t, models.n_devices, start_step,
                                     seconds, eval_at_start=start_step == 0 and t.eval_at_start))
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
      with out.profiler.annotate(step):
        state, m = models.step(state, batch)
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
        ckpt.save(mngr, step, state, force=True)
        signals.progress(saved=step)
      if stop:
        status = "interrupted"
        break
  if status == "completed" and evaluated != t.steps:
    # Finished before, stopped before its summary: evaluate the final state now.
    evaluation(t.steps)
  return Outcome(status, state, alive, log.record)

"""The rows of a run's members, as the training loop logs them. The ``Logger`` writes and
prints them: ``metrics.jsonl`` (+ TensorBoard, and Weights & Biases with
``train.wandb_mode``: ``wandb_run``), the progress bar, a line per row where stdout is not a
terminal, and the ``Record`` of each member's last train loss and evaluations that its
summary is built from (``train.summary``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import jax
import numpy as np
from tqdm.auto import tqdm

from andrea_jax import forecast
from andrea_jax import metrics as metrics_lib
from andrea_jax import model
from andrea_jax import sharding
from andrea_jax import step as step_lib
from andrea_jax import tasks
from andrea_jax import workdir as workdir_lib
from andrea_jax.members import Models, per_member
from andrea_jax.validation import EvalSet


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

  def __init__(self, models: Models, cfg: model.ModelConfig, t: step_lib.TrainConfig,
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
    peak = metrics_lib.device_peak(jax.devices()[0], model.compute_dtype(cfg))
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
    # None where there is no peak, or one below what the model just ran at (then ``mfu_text``
    # says so: a utilisation above 100 % is neither printed nor logged).
    mfu, mfu_text = metrics_lib.mfu_reading(rate, self.flops_per_token, self.peak)
    for i in np.flatnonzero(alive):
      row = {"loss": float(loss[i]), "lr": float(lr[i]), "grad_norm": float(grad_norm[i]),
             "tokens_per_s": rate, "wall_time_s": self.clock.seconds(),
             "train_time_s": self.clock.training_seconds()}
      if z_loss is not None:  # the z-loss term, apart from the cross-entropy
        row["z_loss"] = float(z_loss[i])
      if mfu is not None:
        row["mfu"] = mfu
      self._write(i, step, row)
    live = np.flatnonzero(alive)
    self.bar.set_postfix(loss=f"{np.mean(loss[live]):.3f}", tok_s=f"{rate * len(live):,.0f}",
                         **({"mfu": f"{mfu:.1%}"} if mfu is not None else {}))
    if not self.measured and sharding.is_lead():
      self.measured = True
      per_step = max(now - self.last[0], 1e-9) / max(step - self.last[1], 1)
      line = forecast.measured(per_step, rate * len(live), self.steps - step)
      # MFU beside the step time and its peak's source; an unknown peak, or one below the
      # model's measured FLOP/s, says so on a line of its own.
      if mfu is not None:
        tqdm.write(f"{line}; {mfu_text} of {self.peak_source}")
      else:
        tqdm.write(f"{line}\n{mfu_text} ({self.peak_source})" if mfu_text else
                   f"{line}\n{self.peak_source}")
    if self.print_rows:
      i = live[0]
      what = (f"loss {loss[i]:.4f}, lr {lr[i]:.3g}, grad_norm {grad_norm[i]:.3f}"
              if self.models.n == 1 else "loss " + ", ".join(
                  f"{os.path.basename(self.models.dirs[j])} {loss[j]:.4f}" for j in live))
      speed = f"{rate * len(live):,.0f} tokens/s" + (f", {mfu_text}" if mfu is not None else "")
      print(f"step {step}/{self.steps}: {what}, {speed}", flush=True)
    self.window, self.last = [], (now, step)

  def log_eval(self, step: int, val: np.ndarray, alive: np.ndarray) -> None:
    """The validation loss (with bits per byte) of each member still training, with the tokens
    each has trained on and the wall time so far (a loss against tokens and against seconds:
    ``research/kind_base.ToTarget``); one line."""
    ev = self.eval_set
    # The wall time so far, and the training seconds: the steps alone (``workdir.Clock``).
    seconds, trained = self.clock.seconds(), self.clock.training_seconds()
    for i in np.flatnonzero(alive):
      self._write(i, step, {"val_loss": float(val[i]), "val_bpb": ev.bpb(float(val[i])),
                            "tokens": step * self.tokens_per_step, "wall_time_s": seconds,
                            "train_time_s": trained})
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
      self._write(i, step, {f"hellaswag_{name}": scores[i][name]
                            for name in tasks.METRICS[scores[i]["style"]]})
    live = np.flatnonzero(alive)
    what = (tasks.describe(scores[0]) if self.models.n == 1 else "hellaswag acc_norm " + ", ".join(
        f"{os.path.basename(self.models.dirs[i])} {scores[i]['acc_norm']:.4f}" for i in live))
    tqdm.write(f"step {step}: {what}")

  def restart_clock(self) -> None:
    """The speed is measured from now (not over compilation and the step-0 evaluation), and
    the training clock (the rows' ``train_time_s``) starts."""
    self.last = (time.time(), self.last[1])
    self.clock.start_training()

  def close(self) -> None:
    self.bar.close()
    for w in self.writers:
      w.close()


def wandb_run(models: Models, i: int, cfg: model.ModelConfig, t: step_lib.TrainConfig
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

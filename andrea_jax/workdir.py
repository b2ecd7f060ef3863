"""A run's workdir while the run holds it: one run at a time, its wall clock over its
segments, and what the run's end prints and writes there.

A workdir holds ``config.json`` (the config in force), ``data.json``, ``tokenizer.json``
(the run's copy of its tokenizer), ``metrics.jsonl``, ``checkpoints/`` (the train state,
saved and restored with orbax by ``checkpoint.py``), ``summary.json``, ``loss.png``,
``samples.txt`` and ``.lock`` (held by the running process). A workdir is self-contained:
it holds a copy of its tokenizer, and its files name paths absolute, so it reads back from
any directory and after it was moved. This module:

* holds it: one run at a time (``claim``, the lock); a failed start leaves nothing;
* times it: its wall time over all segments (``Clock``);
* ends it: what a run's end prints (``describe``) and the samples it writes
  (``write_samples``; ``check_samples`` refuses at the start what the end could not sample).

The rest of the record lives in its own modules, and their names are re-exported here
(``workdir.load_run``, ``workdir.plan_resume``, ... keep working):

* ``run_record.py``: reading it back: the config in force and its segments, the data it
  trained on, its tokenizer, its summary (``summary.json`` written and read), its newest
  checkpoint, the trained run (``load_run``), and ``ADDED_FIELDS``;
* ``resume.py``: resuming it: the resume rules (``plan_resume``), what a start says first
  (``describe_start``) and records (``record_start``), the same-data checks, the
  learning-rate plans of its segments (``schedule_segments``);
* ``cooldown.py``: a cooldown branched off a run (``branch_cooldown``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from typing import Iterator

import jax

from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import metrics
from andrea_jax import model
from andrea_jax import tokenizer as tokenizer_lib
# The rest of the record, re-exported from its homes (the module docstring).
from andrea_jax.cooldown import COOLDOWN_FIELDS, branch_cooldown, cooldown_step  # noqa: F401
from andrea_jax.resume import (  # noqa: F401
    FREE_FIELDS, FREE_GROUPS, FROZEN_GROUPS, MUON_RULES, MUP_RULES, PATH_FIELDS,
    TRAJECTORY_FIELDS, ResumePlan, absolute_paths, check_same_data, check_same_tokenizer,
    config_changes, describe_changes, describe_start, diverged_advice, field_kind, plan_resume,
    record_start, schedule_segments)
from andrea_jax.run_record import (  # noqa: F401
    ADDED_FIELDS, TOKENIZER, config_history, config_segments, latest_checkpoint,
    load_config_dict, load_run, load_run_with_step, read_data, read_summary, run_config,
    tokenizer_file, with_added_fields, write_summary)

# Held by the running process (``claim``).
LOCK = ".lock"


class Claim:
  """Marks the moment a run is known to start; before it, a failure removes a new workdir."""

  def __init__(self):
    self.is_started = False

  def started(self) -> None:
    self.is_started = True


@contextlib.contextmanager
def claim(workdir: str, enabled: bool = True) -> Iterator[Claim]:
  """Hold ``<workdir>/.lock`` for the run (one run per workdir at a time).

  A second run of the same workdir is refused while the first holds it. If the start
  fails (bad config, data or checkpoint) in a workdir this call created, the workdir is
  removed again: a failed start leaves nothing behind.
  """
  c = Claim()
  if not enabled:  # processes other than 0 write nothing
    yield c
    return
  created = not os.path.exists(workdir)
  files.make_directory(workdir, "--workdir", "for the run (a new one, or a run's workdir)")
  fd = os.open(os.path.join(workdir, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
    os.close(fd)
    raise errors.CheckpointError(
        f"{workdir} is in use by another run (process {holder}): wait for it to finish, or "
        f"pass a different --workdir") from None
  os.ftruncate(fd, 0)
  os.write(fd, str(os.getpid()).encode())
  try:
    yield c
  except BaseException:
    if created and not c.is_started:
      shutil.rmtree(workdir, ignore_errors=True)
    raise
  finally:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


# ------------------------------------------------------------------------ the clock and the report


class Clock:
  """A run's wall time over all its segments: what earlier segments recorded (their
  summaries and metrics rows, the newest of them) plus this segment's, from its start.

  Beside it, the run's training time (``training_seconds``, the rows' ``train_time_s``): the
  wall seconds of its steps alone, from ``start_training`` (the loop calls it once the step is
  compiled and the step-0 evaluation is done) on, the stretches inside ``not_training``
  (evaluations, task scoring, checkpoint saves, diagnostics probes) left out, added to what
  earlier segments recorded. What a seconds-to-target reading counts (modded-nanogpt's
  ``training_time_ms`` stops its clock for validation the same way: benchmarks/speedrun.py).
  """

  def __init__(self, workdir: str, dirs=(), start: float | None = None):
    earlier, trained = [0.0], [0.0]
    for d in (workdir, *dirs):
      rows = [read_summary(d) or {}, *metrics.read_metrics(d)]
      earlier += [r["wall_time_s"] for r in rows if r.get("wall_time_s") is not None]
      trained += [r["train_time_s"] for r in rows if r.get("train_time_s") is not None]
    self.earlier, self.start = max(earlier), time.time() if start is None else start
    # Training seconds: earlier segments', this segment's banked ones, the running stretch's start.
    self.trained_earlier, self.trained, self.since = max(trained), 0.0, None

  def seconds(self) -> float:
    return self.earlier + time.time() - self.start

  def start_training(self) -> None:
    """The training clock runs from now (if it is not running already)."""
    if self.since is None:
      self.since = time.perf_counter()

  def training_seconds(self) -> float:
    running = time.perf_counter() - self.since if self.since is not None else 0.0
    return self.trained_earlier + self.trained + running

  @contextlib.contextmanager
  def not_training(self):
    """The training clock stands still inside (an evaluation, a save): it resumes after."""
    running = self.since is not None
    if running:
      self.trained += time.perf_counter() - self.since
      self.since = None
    try:
      yield
    finally:
      if running:
        self.start_training()


def describe(summary: dict, workdir: str) -> str:
  """What a run's end prints: the outcome, the losses and what they mean, where files are."""
  s = summary
  lines = [f"{s['status']}: {s['steps']} steps, {s['wall_time_s']:.0f} s; workdir {workdir}"]
  val, uni = s.get("final_val_loss"), s.get("unigram_val_loss")
  if val is not None and uni is not None:
    bpb = f" = {s['val_bpb']:.3f} bits/byte" if s.get("val_bpb") is not None else ""
    verdict = (f"{uni - val:.3f} nats/token better than token frequencies alone"
               if val < uni else "no better than token frequencies alone: nothing learned "
               "beyond them yet")
    lines.append(f"validation loss {val:.3f} nats/token{bpb}; unigram baseline {uni:.3f} "
                 f"(the loss of predicting each token from its training frequency): {verdict}."
                 f" Lower is better.")
  for name, what in (("summary.json", "summary"), ("loss.png", "loss curve"),
                     ("samples.txt", "samples"), ("metrics.jsonl", "metrics")):
    if os.path.exists(os.path.join(workdir, name)):
      lines.append(f"  {what}: {os.path.join(workdir, name)}")
  return "\n".join(lines)


# ------------------------------------------------------------------------ the samples at the end


def check_samples(cfg: model.ModelConfig, tokenizer_path: str, s: config_lib.SampleConfig) -> None:
  """Refuse, at a run's start, ``sample`` settings that its end could not sample with."""
  from andrea_jax import sample  # pylint: disable=import-outside-toplevel
  tok = tokenizer_lib.load(tokenizer_path, cfg.vocab_size)
  try:
    sample.check_text_request(cfg, tok, s.prompt, s.max_new_tokens, temperature=s.temperature,
                              top_k=s.top_k, top_p=s.top_p)
  except errors.InputError as e:
    raise errors.ConfigError(
        f"the samples this run ends with: {e}; set --config.sample.max_new_tokens or "
        f"--config.sample.prompt (or --config.sample.num_samples=0 for none)") from None


def write_samples(params, cfg: model.ModelConfig, tokenizer_path: str,
                  s: config_lib.SampleConfig, workdir: str, seed: int) -> list[str]:
  """A few samples from the trained model, printed and saved to ``samples.txt``."""
  from andrea_jax import sample  # pylint: disable=import-outside-toplevel
  from tqdm.auto import tqdm  # pylint: disable=import-outside-toplevel
  tok = tokenizer_lib.load(tokenizer_path, cfg.vocab_size)
  keys = jax.random.split(jax.random.key(seed), s.num_samples)
  texts = [s.prompt + sample.generate_text(params, cfg, tok, s.prompt, s.max_new_tokens, key,
                                           temperature=s.temperature, top_k=s.top_k,
                                           top_p=s.top_p) for key in keys]
  with open(os.path.join(workdir, "samples.txt"), "w", encoding="utf-8") as f:
    f.write("\n\n-----\n\n".join(texts) + "\n")
  for text in texts:
    tqdm.write(f"--- sample ---\n{text}")
  return texts

"""A run's workdir and its record: the lock, the resume rules, the config history, the
clock, the summary, and the trained run read back.

A workdir holds ``config.json`` (the config in force), ``data.json``, ``tokenizer.json``
(the run's copy of its tokenizer), ``metrics.jsonl``, ``checkpoints/`` (the train state,
saved and restored with orbax by ``checkpoint.py``), ``summary.json``, ``loss.png``,
``samples.txt`` and ``.lock`` (held by the running process). A workdir is self-contained:
it holds a copy of its tokenizer, and its files name paths absolute, so it reads back from
any directory and after it was moved. This module is the one home of that record:

* holding it: one run at a time (``claim``, the lock); a failed start leaves nothing;
* resuming it: what a resume may change (``plan_resume``, the rules below), what a start
  says first (``describe_start``: resuming from which step, or why at step 0), and what a
  start records (``record_start``: ``config.json``, its segments in
  ``config_history.json``, ``data.json`` and the tokenizer's copy);
* reading it back: the config in force and its segments, the data it trained on, its
  tokenizer, its summary (``summary.json`` written and read); its wall time over all
  segments (``Clock``) and what a run's end prints (``describe``);
* the trained run read back: its model, config and tokenizer (``load_run``, to sample,
  inspect or export it), and the samples its end writes (``write_samples``).

Resume rules (README, Training, "Resume"):

* ``FREE`` fields may change on any resume (where caches live, logging, checkpoint and
  sample settings, the device mesh, recompute settings);
* the other ``model`` and ``data`` fields fix what the parameters are and which text they
  see: changing them is always refused;
* every other field (``train.*``: learning rate, schedule, batch, optimizer, clipping,
  seeds; the compute dtype, attention kernel and dropout; the batch-order seed) moves the
  training trajectory: a resume that changes them is refused unless the caller allows it
  (``--allow_resume_changes``); then each segment's config and the step it started at are
  kept in ``config_history.json`` and listed in ``summary.json``.

A workdir saved before a field existed (``ADDED_FIELDS``) resumes as if it held that
field at its default: the value the run trained with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import glob
import json
import os
import shutil
import time
from typing import Iterator

import jax

from andrea_jax import checkpoint as ckpt
from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import forecast
from andrea_jax import init
from andrea_jax import metrics
from andrea_jax import schedule as schedule_lib
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax.model_config import ModelConfig, resolve_auto

# The run's copy of its tokenizer (``record_start``): a workdir reads back without
# the data cache, from anywhere.
TOKENIZER = "tokenizer.json"
# What to do about a workdir file that is not valid JSON.
_FIX = "restore it or use a fresh --workdir"
# Held by the running process (``claim``).
LOCK = ".lock"
# Groups and fields that may change on a resume: they do not move the trajectory.
FREE_GROUPS = ("checkpoint", "sample", "diagnostics", "mesh", "distributed")
FREE_FIELDS = {"data.cache_dir", "data.prefetch", "data.workers", "train.log_every",
               "train.eval_every", "train.eval_at_start", "train.wandb_mode",
               "train.wandb_project", "train.wandb_name", "train.profile_steps",
               "train.task_eval_every", "train.task_file", "train.task_examples",
               "model.remat_policy", "model.scan_unroll"}
# Groups whose fields fix the parameters' meaning or the text: never changed on a resume ...
FROZEN_GROUPS = ("model", "data")
# ... except these, which change only how the same model trains (allowed when opted in).
TRAJECTORY_FIELDS = {"model.compute_dtype", "model.attention_impl", "model.attention_block",
                     "model.dropout", "data.shuffle_seed"}
# Fields that name files or directories: stored in config.json and compared on a resume as
# absolute paths, so a run resumes from any directory (``absolute_paths``).
PATH_FIELDS = ("data.path", "data.shards", "data.hf_dataset", "data.tokenizer_path",
               "train.init_from", "train.task_file")
# Fields added after workdirs were saved: a saved config.json without one ran with the value
# it had before the field existed, given here. For most that is the field's default
# (experiments/configs/common.py); two muP rules changed their default when they became
# fields (mup.py): the saved run keeps the rule it trained with, and a resume under the new
# default is refused as a change of the trajectory.
ADDED_FIELDS = {"model.qk_norm": False, "model.parametrization": "sp", "model.base_width": 0,
                "train.z_loss": 0.0, "model.readout_multiplier": 1.0,
                "model.attention_multiplier": 1.0, "model.embedding_multiplier": 1.0,
                "model.mup_attention": "inverse", "model.mup_decay": "with_rate",
                "model.zero_query_init": False, "train.eval_at_start": True,
                "model.base_n_head": 0, "model.depth_rule": "none", "model.base_depth": 0,
                "model.dropout": 0.0, "train.wandb_mode": "off",
                "train.wandb_project": "andrea_jax", "train.wandb_name": "",
                "checkpoint.every_seconds": 0, "train.optimizer": "adamw",
                "train.adam_lr_ratio": 1.0, "train.muon_momentum": 0.95,
                "train.muon_consistent_rms": 0.2, "train.schedule": "cosine",
                "train.decay_shape": "1-sqrt", "train.decay_fraction": 0.2,
                "train.profile_steps": "", "train.task_eval_every": 0, "train.task_file": "",
                "train.task_examples": 0,
                "model.position": "learned", "model.rope_base": 10000.0, "model.bias": True,
                "model.norm_type": "layernorm", "model.dyt_alpha_init": 0.5,
                "model.mix_post_fraction": 0.25, "model.norm_depth_scaling": False}


# Fields that only a muP model reads (mup.py).
MUP_RULES = frozenset({"model.mup_attention", "model.mup_decay"})


# ----------------------------------------------------------------------------- reading the record


def _read(workdir: str, name: str):
  return files.read_json(os.path.join(workdir, name), _FIX, errors.CheckpointError)


def load_config_dict(workdir: str) -> dict | None:
  """The config in force (``config.json``), or None in a fresh workdir."""
  return _read(workdir, "config.json")


def run_config(workdir: str) -> config_lib.RunConfig:
  """A run's config in force, typed (``ADDED_FIELDS`` at the values the run had)."""
  return config_lib.RunConfig.from_dict(_saved_config(workdir))


def _saved_config(workdir: str) -> dict:
  """A run's ``config.json`` with ``ADDED_FIELDS`` filled in; a directory that is not a
  run's is one line."""
  if not os.path.isdir(workdir):
    what = "is a file" if os.path.exists(workdir) else "does not exist"
    raise errors.CheckpointError(f"run directory {workdir!r} {what}: pass the --workdir of a run "
                                 f"of python -m experiments.run")
  saved = load_config_dict(workdir)
  if saved is None:
    raise errors.CheckpointError(f"{workdir} has no config.json: is it a run directory of "
                                 f"python -m experiments.run?")
  return with_added_fields(saved)


def config_history(workdir: str) -> list[dict] | None:
  """The segments of a resumed-with-changes run: ``[{start_step, changes, config}, ...]``."""
  return _read(workdir, "config_history.json")


def config_segments(workdir: str) -> list[dict]:
  """``[{start_step, changes}]`` for the summary: one segment unless a resume changed settings
  (a cooldown's last segment names where it branched off: ``cooldown_from``)."""
  history = config_history(workdir) or [{"start_step": 0, "changes": []}]
  return [{"start_step": s["start_step"], "changes": s["changes"],
           **({"cooldown_from": s["cooldown_from"]} if "cooldown_from" in s else {})}
          for s in history]


def read_data(workdir: str) -> dict | None:
  """What the run trained on (``data.json``: its tokenizer, shards and their sizes)."""
  return _read(workdir, "data.json")


def tokenizer_file(workdir: str) -> str:
  """The run's tokenizer: its copy in the workdir (``tokenizer.json``), else (a workdir
  written before the copy) the path ``data.json`` names, absolute or relative to the
  directory the run started in."""
  copy = os.path.join(workdir, TOKENIZER)
  if os.path.isfile(copy):
    return copy
  data = read_data(workdir)
  if data is None:
    raise errors.CheckpointError(f"{workdir} has neither {TOKENIZER} nor data.json (which "
                                 f"names the run's tokenizer): is it a run directory of "
                                 f"python -m experiments.run?")
  named = data["tokenizer_path"]
  if os.path.isfile(named):
    return named
  where = ("" if os.path.isabs(named) else
           f", relative to the directory the run was started in (not {os.getcwd()})")
  raise errors.CheckpointError(
      f"{workdir} holds no copy of its tokenizer ({TOKENIZER}: written by runs since it was "
      f"added) and its data.json names {named!r}{where}, which does not exist: run the "
      f"command from the directory the run was started in, or copy that tokenizer.json "
      f"into {workdir}")


def read_summary(workdir: str) -> dict | None:
  return _read(workdir, "summary.json")


def write_summary(workdir: str, summary: dict) -> None:
  files.write_json(os.path.join(workdir, "summary.json"), summary)


# -------------------------------------------------------------------------- holding and resuming it


def with_added_fields(saved: dict) -> dict:
  """A saved config (nested dicts) with each missing ``ADDED_FIELDS`` entry at the value the
  run trained with: what rebuilds its model (``load_run``)."""
  out = {group: dict(fields) if isinstance(fields, dict) else fields
         for group, fields in saved.items()}
  for name, value in ADDED_FIELDS.items():
    group, field = name.split(".")
    if isinstance(out.get(group), dict):
      out[group].setdefault(field, value)
  return out


def latest_checkpoint(workdir: str) -> int | None:
  """The newest finished checkpoint step, without creating anything in ``workdir``."""
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    return None
  mngr = ckpt.manager(directory, 1, 1)
  try:
    return mngr.latest_step()
  finally:
    mngr.close()


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


def field_kind(name: str) -> str:
  """``"free"``, ``"frozen"`` or ``"trajectory"`` for a dotted config field (module docstring)."""
  group = name.split(".", 1)[0]
  if group in FREE_GROUPS or name in FREE_FIELDS:
    return "free"
  if name in TRAJECTORY_FIELDS:
    return "trajectory"
  return "frozen" if group in FROZEN_GROUPS else "trajectory"


def _flat(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flat(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def config_changes(saved: dict, current: dict) -> dict[str, list[dict]]:
  """``{kind: [{field, old, new}]}`` for every field that differs (``<missing>`` if absent).

  A field of ``ADDED_FIELDS`` that the saved config lacks counts as its value there. muP's
  own rules (``MUP_RULES``) do not count between two sp configs: the sp model ignores them.
  """
  old, new = _flat(saved), _flat(current)
  for name, default in ADDED_FIELDS.items():
    if name in new:
      old.setdefault(name, default)
  both_sp = old.get("model.parametrization") == new.get("model.parametrization") == "sp"
  out: dict[str, list[dict]] = {"free": [], "frozen": [], "trajectory": []}
  for name in sorted(set(old) | set(new)):
    a, b = old.get(name, "<missing>"), new.get(name, "<missing>")
    if a != b and not (both_sp and name in MUP_RULES):
      out[field_kind(name)].append({"field": name, "old": a, "new": b})
  return out


def _lines(changes: list[dict]) -> str:
  return "".join(f"\n  {c['field']}: {c['old']!r} -> {c['new']!r}" for c in changes)


@dataclasses.dataclass
class ResumePlan:
  """What a workdir holds and what this start will do with it."""
  saved: dict | None  # the config in force so far (None: a fresh workdir)
  start_step: int  # the checkpoint step to resume from (0: a fresh run)
  changes: list[dict]  # accepted trajectory changes (recorded as a new segment)
  complete: bool  # the run already finished at train.steps: nothing to do
  summary: dict | None

  @property
  def diverged(self) -> bool:
    """The run diverged and this start changes no training setting: it would again."""
    return bool(self.summary and self.summary.get("status") == "diverged" and not self.changes)


def absolute_paths(config_dict: dict) -> dict:
  """``config_dict`` with the ``PATH_FIELDS`` that name an existing file, directory or glob
  (relative to this directory) made absolute; other values (a hub name, a URL) as they are."""
  out = json.loads(json.dumps(config_dict))
  for name in PATH_FIELDS:
    group, field = name.split(".")
    value = out.get(group, {}).get(field)
    if isinstance(value, str) and value and "://" not in value and (
        os.path.exists(value) or glob.glob(value)):
      out[group][field] = os.path.abspath(value)
  return out


def plan_resume(workdir: str, config: config_lib.RunConfig,
                allow_changes: bool = False) -> ResumePlan:
  """Check ``config`` against the run in ``workdir``; refuse changes the rules forbid."""
  current = absolute_paths(config.to_dict())
  saved, step = load_config_dict(workdir), latest_checkpoint(workdir)
  if saved is None:
    if step is not None:
      raise errors.CheckpointError(f"{workdir} holds checkpoints but no config.json: restore "
                                   f"it, or pass a fresh --workdir")
    return ResumePlan(None, 0, [], False, None)
  changes = config_changes(absolute_paths(saved), current)
  if changes["frozen"]:
    raise errors.CheckpointError(
        f"{workdir} holds a run whose model or data differ from this config:"
        f"{_lines(changes['frozen'])}\nResume with the original config, or pass a new "
        f"--workdir for a new run.")
  if changes["trajectory"] and not allow_changes:
    raise errors.ConfigError(
        f"{workdir} holds a run started with other training settings:"
        f"{_lines(changes['trajectory'])}\nResuming with them would change the run's "
        f"trajectory. Resume with the original settings, pass --allow_resume_changes to "
        f"continue with the new ones (each segment is recorded in config_history.json and "
        f"summary.json), or pass a new --workdir for a new run.")
  _check_optimizer_structure(saved, current)
  step = step or 0
  steps = config.train.steps
  if step > steps:
    raise errors.ConfigError(f"{workdir} holds a checkpoint at step {step}, beyond "
                             f"train.steps={steps}: set train.steps >= {step} (with "
                             f"--allow_resume_changes), or pass a new --workdir")
  summary = read_summary(workdir)
  complete = (step == steps and summary is not None and summary.get("status") == "completed"
              and summary.get("steps") == steps)
  return ResumePlan(saved, step, changes["trajectory"], complete, summary)


def _check_optimizer_structure(saved: dict, current: dict) -> None:
  """Clipping on/off changes the optimizer state's tree: a checkpoint cannot restore into it."""
  old = saved.get("train", {}).get("grad_clip", 0)
  new = current.get("train", {}).get("grad_clip", 0)
  if (old > 0) != (new > 0):
    keep = "off (0)" if new > 0 else "on (any value > 0)"
    raise errors.ConfigError(
        f"train.grad_clip: {old!r} -> {new!r} switches gradient clipping "
        f"{'on' if new > 0 else 'off'}, which changes the optimizer state's structure "
        f"(optax.chain adds or drops the clipping state), so the checkpoint's optimizer "
        f"state cannot be restored into it: keep clipping {keep}, or pass a new --workdir")


def check_same_data(workdir: str, fingerprint: str, tokenizer_sha256: str | None = None) -> None:
  """Refuse to resume a run on other text, or with another tokenizer, than it trained on.

  ``data.json`` records the corpus fingerprint (sha256 of the documents) and the
  tokenizer's sha256 of the run's first start; a workdir without a checkpoint has trained
  nothing yet, and takes any data. Called before any tokenizer is trained
  (``prepare.prepare``'s ``check``), then with the prepared tokenizer.
  """
  if load_config_dict(workdir) is None or latest_checkpoint(workdir) is None:
    return
  data = read_data(workdir) or {}
  new_run = (f"restore what the run trained on to resume it, or pass a new --workdir to "
             f"train on this data (the checkpoint's weights would read other token ids)")
  old = data.get("fingerprint")
  if old and old != fingerprint:
    raise errors.DataError(
        f"{workdir} trained on other text than the data now holds (corpus fingerprint "
        f"{old[:12]}, now {fingerprint[:12]}: the files under data.path were edited, added "
        f"or removed); {new_run}")
  if tokenizer_sha256:
    check_same_tokenizer(workdir, tokenizer_sha256, "data.tokenizer_path's file changed",
                         new_run)


def check_same_tokenizer(workdir: str, tokenizer_sha256: str, which: str, fix: str) -> None:
  """Refuse token ids made by another tokenizer than the run's (``which`` says whose they
  are): the checkpoint's weights would read them as other text. The run's tokenizer is the
  one ``data.json`` records, else (an older record) its copy in the workdir."""
  old = (read_data(workdir) or {}).get("tokenizer_sha256")
  if old is None and os.path.isfile(os.path.join(workdir, TOKENIZER)):
    old = files.sha256(os.path.join(workdir, TOKENIZER))
  if old and old != tokenizer_sha256:
    raise errors.DataError(f"{workdir} trained with another tokenizer (sha256 {old[:12]}, now "
                           f"{tokenizer_sha256[:12]}: {which}); {fix}")


def diverged_advice(plan: ResumePlan, workdir: str, learning_rate: float) -> str:
  """What a rerun of a diverged workdir says: where it diverged, how to go on."""
  at = plan.summary.get("diverged_at_step")
  return (f"{workdir} diverged at step {at if at is not None else '?'} (a non-finite loss, "
          f"gradient or parameter); rerunning it with the same settings would diverge again "
          f"at the same step. Its last finite checkpoint is step {plan.start_step}: to "
          f"continue from there with other settings, rerun with e.g. "
          f"--config.train.learning_rate={learning_rate / 2:g} --allow_resume_changes (a "
          f"lower peak learning rate; or a longer train.warmup_steps, or train.grad_clip), or "
          f"pass a new --workdir to start over")


def describe_start(workdir: str, plan: ResumePlan) -> str:
  """What a start says first: that it resumes and from where, or why it starts at step 0."""
  if plan.saved is None:
    return f"starting a new run in {workdir}"
  if plan.start_step:
    mngr = ckpt.manager(os.path.join(workdir, "checkpoints"), 1, 1)
    try:
      saved = ckpt.saved_at(mngr, plan.start_step)
    finally:
      mngr.close()
    ago = "" if saved is None else f" (checkpoint saved {forecast.duration(time.time() - saved)} ago)"
    return f"resuming {workdir} from step {plan.start_step}{ago}"
  logged = max((r["step"] for r in metrics.read_metrics(workdir) if "loss" in r), default=0)
  why = (f"after step {logged} (its newest row in metrics.jsonl) before its first save"
         if logged else "before training")
  return f"starting {workdir} at step 0: no checkpoint in it yet, the previous run stopped {why}"


def describe_changes(plan: ResumePlan) -> str:
  """What a resume with ``--allow_resume_changes`` changes, a line per field."""
  return (f"resuming at step {plan.start_step} with changed training settings (a new "
          f"segment in config_history.json):{_lines(plan.changes)}")


def schedule_segments(workdir: str, config: config_lib.RunConfig
                      ) -> list[tuple[int, schedule_lib.Shape]]:
  """``[(start_step, Shape), ...]``: the learning-rate plans of the run in ``workdir``
  continued by ``config`` (what ``schedule.learning_rate`` keeps and extends).

  The segments of ``config_history.json`` (or the saved config as the one segment), and
  ``config``'s own from the newest checkpoint on when its ``train`` group differs from
  the last one's.
  """
  current = config.to_dict()["train"]
  segments_ = config_history(workdir)
  saved = load_config_dict(workdir)
  if segments_:
    segments = [(s["start_step"], with_added_fields(s["config"])["train"]) for s in segments_]
  elif saved is not None:
    segments = [(0, with_added_fields(saved)["train"])]
  else:
    segments = [(0, current)]
  if segments[-1][1] != current:
    segments.append((latest_checkpoint(workdir) or 0, current))
  if segments[-1][0] == 0:  # nothing trained before: the current plan alone
    segments = [(0, current)]
  return [(start, schedule_lib.Shape.of(train)) for start, train in segments]


def record_start(workdir: str, config: config_lib.RunConfig, plan: ResumePlan,
                 data: dict) -> None:
  """Write ``config.json``, ``data.json``, the run's copy of its tokenizer and, for accepted
  changes, a new history segment.

  The workdir is self-contained and can move: the tokenizer is copied into it
  (``TOKENIZER``), and the paths in ``config.json`` and ``data.json`` are absolute.
  """
  current = absolute_paths(config.to_dict())
  if plan.changes:
    segments = (config_history(workdir)
                or [{"start_step": 0, "changes": [], "config": plan.saved}])
    segments.append({"start_step": plan.start_step, "changes": plan.changes, "config": current})
    files.write_json(os.path.join(workdir, "config_history.json"), segments)
  files.write_json(os.path.join(workdir, "config.json"), current)
  with open(data["tokenizer_path"], "rb") as f:
    files.atomic_write(os.path.join(workdir, TOKENIZER), f.read())
  paths = {k: os.path.abspath(data[k]) for k in ("directory", "tokenizer_path") if k in data}
  paths.update({k: [os.path.abspath(p) for p in data[k]] for k in ("train_paths", "val_paths")
                if k in data})
  files.write_json(os.path.join(workdir, "data.json"), {**data, **paths})


# ------------------------------------------------------------------------ a cooldown, branched off

# The fields a cooldown sets or chooses (``branch_cooldown``): the decay it appends to its
# source's schedule. Any other trajectory change is a resume's (``--allow_resume_changes``).
COOLDOWN_FIELDS = ("train.steps", "train.schedule", "train.decay_fraction", "train.decay_shape",
                   "train.min_lr_ratio")


def cooldown_step(source: str, step: int | None = None) -> int:
  """The checkpoint step of ``source`` a cooldown branches from (default: its newest)."""
  _saved_config(source)  # a directory that is not a run's is one line
  directory = os.path.join(source, "checkpoints")
  if not os.path.isdir(directory):
    raise errors.CheckpointError(f"{source} has no checkpoints/ directory: the run saved none "
                                 f"to cool down from")
  mngr = ckpt.manager(directory, 1, 1)
  try:
    return ckpt.check_step(mngr, step, flag="--cooldown_step")
  finally:
    mngr.close()


def branch_cooldown(source: str, dest: str, config: config_lib.RunConfig, steps: int,
                    step: int | None = None, allow_changes: bool = False
                    ) -> config_lib.RunConfig:
  """The config of a cooldown of ``steps`` updates from checkpoint ``step`` of ``source``
  (default: its newest), with ``dest`` made its workdir; ``source`` is only read.

  The cooldown is a WSD segment (``schedule.py``) of the source's run: its rates up to
  ``step`` and then ``config``'s decay (``train.decay_shape`` to ``train.min_lr_ratio``) over
  ``steps`` updates: ``train.steps = step + steps`` and ``train.decay_fraction =
  steps / train.steps``. A cooldown of a WSD run's stable phase is thus the WSD run of that
  shorter budget, update for update. ``dest`` gets the source's checkpoint of ``step``, its
  data record, tokenizer and metrics up to ``step``, and a ``config_history.json`` whose
  last segment starts at ``step`` with ``cooldown_from`` naming the source and step; then
  the run resumes there as any run does. ``config`` must be the source's run as a resume
  would see it (the ``COOLDOWN_FIELDS`` aside). A ``dest`` that already holds this
  cooldown is left as it is: rerunning the command resumes it.
  """
  if not steps > 0:
    raise errors.ConfigError(f"--cooldown_steps={steps}: expected a positive number of updates")
  history = config_history(dest) if os.path.isdir(dest) else None
  made = history[-1].get("cooldown_from") if history else None
  if (made and made["workdir"] == os.path.abspath(source) and made["steps"] == steps
      and step in (None, made["step"])):
    step = made["step"]  # an earlier start's branch (its source may have trained on since)
  else:
    step, made = cooldown_step(source, step), None
  if os.path.abspath(dest) == os.path.abspath(source):
    raise errors.ConfigError(f"--workdir={dest} is the run to cool down from, which a cooldown "
                             f"never modifies: pass a new --workdir for the cooldown")
  segments = [s for s in config_history(source) or [{"start_step": 0, "changes": [],
                                                       "config": load_config_dict(source)}]
              if s["start_step"] < step]  # the plans that trained the steps up to ``step``
  before = with_added_fields(segments[-1]["config"])
  if step < before["train"]["warmup_steps"]:
    raise errors.ConfigError(
        f"step {step} of {source} is inside its warmup (train.warmup_steps="
        f"{before['train']['warmup_steps']}): cool down from a checkpoint at or after it")
  cooled = absolute_paths(config.to_dict())
  cooled["train"].update(steps=step + steps, schedule="wsd", decay_fraction=steps / (step + steps))
  cooled_config = config_lib.RunConfig.from_dict(cooled)  # its checks, e.g. of the decay
  origin = {"workdir": os.path.abspath(source), "step": step, "steps": steps}
  if made == origin:
    return cooled_config  # made by an earlier start: resume it
  files.check_directory(dest, "--workdir", "for the cooldown (a new one)")
  if os.path.isdir(dest) and os.listdir(dest):
    raise errors.CheckpointError(f"{dest} already holds files that are not this cooldown of "
                                 f"{source} at step {step}: pass a new --workdir")
  changes = config_changes(absolute_paths(before), cooled)
  if changes["frozen"]:
    raise errors.CheckpointError(
        f"{source} holds a run whose model or data differ from this config:"
        f"{_lines(changes['frozen'])}\nCool down with the run's own config.")
  moved = [c for c in changes["trajectory"] if c["field"] not in COOLDOWN_FIELDS]
  if moved and not allow_changes:
    raise errors.CheckpointError(
        f"this cooldown of {source} changes training settings besides its decay:"
        f"{_lines(moved)}\nUse the run's own settings, or pass --allow_resume_changes.")
  segments.append({"start_step": step, "changes": changes["trajectory"],
                   "cooldown_from": origin, "config": cooled})
  _make_branch(source, dest, step, cooled, segments)
  return cooled_config


def _make_branch(source: str, dest: str, step: int, config: dict, segments: list) -> None:
  """``dest`` as a run stopped at ``step``: built beside it, then renamed into place."""
  partial = f"{os.path.abspath(dest).rstrip(os.sep)}.partial-{os.getpid()}"
  shutil.rmtree(partial, ignore_errors=True)
  shutil.copytree(os.path.join(source, "checkpoints", str(step)),
                  os.path.join(partial, "checkpoints", str(step)))
  for name in (TOKENIZER, "data.json"):
    if os.path.exists(os.path.join(source, name)):
      shutil.copy2(os.path.join(source, name), os.path.join(partial, name))
  rows = [r for r in metrics.read_rows(os.path.join(source, "metrics.jsonl")) if r["step"] <= step]
  files.atomic_write(os.path.join(partial, "metrics.jsonl"),
                     *(json.dumps(r).encode() + b"\n" for r in rows))
  files.write_json(os.path.join(partial, "config_history.json"), segments)
  files.write_json(os.path.join(partial, "config.json"), config)
  if os.path.isdir(dest):
    os.rmdir(dest)  # empty (checked)
  os.rename(partial, dest)


# ------------------------------------------------------------------------ the clock and the summary


class Clock:
  """A run's wall time over all its segments: what earlier segments recorded (their
  summaries and metrics rows, the newest of them) plus this segment's, from its start."""

  def __init__(self, workdir: str, dirs=(), start: float | None = None):
    earlier = [0.0]
    for d in (workdir, *dirs):
      rows = [read_summary(d) or {}, *metrics.read_metrics(d)]
      earlier += [r["wall_time_s"] for r in rows if r.get("wall_time_s") is not None]
    self.earlier, self.start = max(earlier), time.time() if start is None else start

  def seconds(self) -> float:
    return self.earlier + time.time() - self.start


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


# ------------------------------------------------------------------------ the trained run read back


def check_samples(cfg: ModelConfig, tokenizer_path: str, s: config_lib.SampleConfig) -> None:
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


def write_samples(params, cfg: ModelConfig, tokenizer_path: str,
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


def load_run(workdir: str, step: int | None = None):
  """A finished or stopped run's ``(params, ModelConfig, tokenizer, RunConfig)`` from its
  workdir. The RunConfig is None for a ``config.json`` recorded before one of today's
  fields outside ``ADDED_FIELDS`` existed: such a run still reads back (its model is
  complete), and its ``config.json`` says what it ran with.

  Only the parameters are read from the checkpoint (orbax restores that sub-tree), onto
  this process's first device, whichever mesh wrote them; no optimizer state is built.
  By default the newest checkpoint that reads whole (a damaged newer one is skipped with a
  note); from any directory, and after the workdir was moved.
  """
  return load_run_with_step(workdir, step)[1:]


def load_run_with_step(workdir: str, step: int | None = None):
  """``(step, params, ModelConfig, tokenizer, RunConfig)``: ``load_run``'s, with the step it
  restored (the default: the newest that reads whole)."""
  saved = _saved_config(workdir)
  cfg = resolve_auto(ModelConfig(**saved["model"]), verbose=False)
  abstract = jax.eval_shape(lambda key: init.init_params(cfg, key), jax.random.key(0))
  one_device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=one_device),
                          abstract)
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    raise errors.CheckpointError(f"{workdir} has no checkpoints/ directory: the run saved none")
  mngr = ckpt.manager(directory, saved["checkpoint"]["every"], saved["checkpoint"]["keep"])
  try:
    step, params = ckpt.restore_params(mngr, abstract, step)
  finally:
    mngr.close()
  try:
    config = config_lib.RunConfig.from_dict(saved)
  except errors.ConfigError:  # a field missing from an older record (the docstring)
    config = None
  path = tokenizer_file(workdir)
  fix = (f"restore it, or delete it to read the one {workdir}/data.json names"
         if path == os.path.join(workdir, TOKENIZER) else None)
  return step, params, cfg, tokenizer_lib.load(path, cfg.vocab_size, fix=fix), config

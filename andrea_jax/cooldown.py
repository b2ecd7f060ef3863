"""A cooldown branched off a run: a new workdir that resumes from one of the run's
checkpoints with a decay appended to its schedule (``branch_cooldown``; docs/training.md,
"Cooldown"). The run it branches off is only read. A group of models (``multi.py``) branches
as a whole, into a group of the same members: what a sweep does for a study's horizons
(``research/runner.py``).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil

from andrea_jax import checkpoint as ckpt
from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import metrics
from andrea_jax.resume import absolute_paths, change_lines, config_changes
from andrea_jax.run_record import (TOKENIZER, config_history, load_config_dict, saved_config,
                                   with_added_fields)

# The fields a cooldown sets or chooses (``branch_cooldown``): the decay it appends to its
# source's schedule. Any other trajectory change is a resume's (``--allow_resume_changes``).
COOLDOWN_FIELDS = ("train.steps", "train.schedule", "train.decay_fraction", "train.decay_shape",
                   "train.min_lr_ratio")
# A group's members (``multi.train_members`` writes it): a group branches as a whole.
MEMBERS = "members.json"


def cooldown_step(source: str, step: int | None = None) -> int:
  """The checkpoint step of ``source`` a cooldown branches from (default: its newest)."""
  saved_config(source)  # a directory that is not a run's is one line
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
                    step: int | None = None, allow_changes: bool = False,
                    members: list[dict] | None = None) -> config_lib.RunConfig:
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
  cooldown is left as it is: rerunning the command resumes it. ``members``: a group's
  (``multi.Member`` as dicts), which must be the source group's (its ``members.json``): each
  member's metrics up to ``step`` come along; None: ``source`` is a single run.
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
  held = files.read_json(os.path.join(source, MEMBERS))
  if held != members:
    what = lambda group: f"a group of {len(group)} models" if group else "a single run"
    raise errors.ConfigError(
        f"{source} holds {what(held)} and this cooldown is {what(members)}"
        f"{' of other members' if held and members else ''}: a cooldown continues the same models "
        f"(a group's branch as a whole, as python -m experiments.sweep branches a study's horizons)")
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
        f"{change_lines(changes['frozen'])}\nCool down with the run's own config.")
  moved = [c for c in changes["trajectory"] if c["field"] not in COOLDOWN_FIELDS]
  if moved and not allow_changes:
    raise errors.CheckpointError(
        f"this cooldown of {source} changes training settings besides its decay:"
        f"{change_lines(moved)}\nUse the run's own settings, or pass --allow_resume_changes.")
  segments.append({"start_step": step, "changes": changes["trajectory"],
                   "cooldown_from": origin, "config": cooled})
  _make_branch(source, dest, step, cooled, segments, [m["name"] for m in members or ()])
  return cooled_config


def _make_branch(source: str, dest: str, step: int, config: dict, segments: list,
                 members: list[str]) -> None:
  """``dest`` as a run stopped at ``step`` (each of a group's ``members``, in its directory):
  built beside it, then renamed into place."""
  partial = f"{os.path.abspath(dest).rstrip(os.sep)}.partial-{os.getpid()}"
  shutil.rmtree(partial, ignore_errors=True)
  shutil.copytree(os.path.join(source, "checkpoints", str(step)),
                  os.path.join(partial, "checkpoints", str(step)))
  for name in (TOKENIZER, "data.json"):
    if os.path.exists(os.path.join(source, name)):
      shutil.copy2(os.path.join(source, name), os.path.join(partial, name))
  for name, log in itertools.product(members or [""], ("metrics.jsonl", "diagnostics.jsonl")):
    if os.path.exists(os.path.join(source, name, log)):
      rows = [r for r in metrics.read_rows(os.path.join(source, name, log)) if r["step"] <= step]
      os.makedirs(os.path.join(partial, name), exist_ok=True)
      files.atomic_write(os.path.join(partial, name, log),
                         *(json.dumps(r).encode() + b"\n" for r in rows))
  files.write_json(os.path.join(partial, "config_history.json"), segments)
  files.write_json(os.path.join(partial, "config.json"), config)
  if os.path.isdir(dest):
    os.rmdir(dest)  # empty (checked)
  os.rename(partial, dest)


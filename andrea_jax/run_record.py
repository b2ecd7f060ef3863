"""A run's workdir read back: the files of its record, and the trained run they describe.

A workdir holds ``config.json`` (the config in force), ``config_history.json`` (the segments
of a run resumed with changes), ``data.json``, ``tokenizer.json`` (the run's copy of its
tokenizer), ``metrics.jsonl``, ``checkpoints/`` (``checkpoint.py``) and ``summary.json``.
This module reads them back: the config in force and its segments, the data it trained on,
its tokenizer, its summary (``summary.json`` written and read), its newest checkpoint step;
and the trained run itself: its model, config and tokenizer (``load_run``, to sample,
inspect or export it). A workdir saved before a field existed (``ADDED_FIELDS``) reads back
as if it held that field at the value the run trained with.

What a start records and what a resume may change: ``resume.py``; a cooldown branched off a
run: ``cooldown.py``; the lock, the clock and a run's end: ``workdir.py``.
"""

from __future__ import annotations

import os

import jax

from andrea_jax import checkpoint as ckpt
from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import model
from andrea_jax import tokenizer as tokenizer_lib

# The run's copy of its tokenizer (``record_start``): a workdir reads back without
# the data cache, from anywhere.
TOKENIZER = "tokenizer.json"
# What to do about a workdir file that is not valid JSON.
_FIX = "restore it or use a fresh --workdir"
# Fields added after workdirs were saved: a saved config.json without one ran with the value
# it had before the field existed, given here. For most that is the field's default
# (experiments/configs/common.py); two muP rules changed their default when they became
# fields (mup.py), and two Muon rules (step.py: Q, K and V apart, the Adam branch's decay):
# the saved run keeps the rule it trained with, and a resume under the new default is
# refused as a change of the trajectory.
ADDED_FIELDS = {"model.qk_norm": False, "model.parametrization": "sp", "model.base_width": 0,
                "train.z_loss": 0.0, "model.readout_multiplier": 1.0,
                "model.attention_multiplier": 1.0, "model.embedding_multiplier": 1.0,
                "model.mup_attention": "inverse", "model.mup_decay": "with_rate",
                "model.zero_query_init": False, "train.eval_at_start": True,
                "model.base_n_head": 0, "model.depth_rule": "none", "model.base_depth": 0,
                "model.dropout": 0.0, "train.wandb_mode": "off",
                "train.wandb_project": "andrea_jax", "train.wandb_name": "",
                "checkpoint.every_seconds": 0, "checkpoint.keep_steps": "", "train.optimizer": "adamw",
                "train.adam_lr_ratio": 1.0, "train.muon_momentum": 0.95,
                "train.muon_consistent_rms": 0.2, "train.schedule": "cosine",
                "train.decay_shape": "1-sqrt", "train.decay_fraction": 0.2,
                "train.profile_steps": "", "train.task_eval_every": 0, "train.task_file": "",
                "train.task_examples": 0, "train.task_style": "lmeval",
                "model.position": "learned", "model.rope_base": 10000.0, "model.bias": True,
                "model.norm_type": "layernorm", "model.dyt_alpha_init": 0.5,
                "model.mix_post_fraction": 0.25, "model.norm_depth_scaling": False,
                "model.dyt_alpha_attn_init": 0.0, "model.dyt_alpha_final_init": 0.0,
                "model.embedding_norm": False, "model.final_norm_type": "",
                "model.embedding_init_std": 0.02, "model.head_init_std": 0.02,
                "train.muon_split_qkv": False, "train.muon_adam_decay": False}


# ----------------------------------------------------------------------------- reading the record


def _read(workdir: str, name: str):
  return files.read_json(os.path.join(workdir, name), _FIX, errors.CheckpointError)


def load_config_dict(workdir: str) -> dict | None:
  """The config in force (``config.json``), or None in a fresh workdir."""
  return _read(workdir, "config.json")


def run_config(workdir: str) -> config_lib.RunConfig:
  """A run's config in force, typed (``ADDED_FIELDS`` at the values the run had)."""
  return config_lib.RunConfig.from_dict(saved_config(workdir))


def saved_config(workdir: str) -> dict:
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


# ------------------------------------------------------------------------ the trained run read back


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
  saved = saved_config(workdir)
  cfg = model.resolve_auto(model.ModelConfig(**saved["model"]), verbose=False)
  abstract = jax.eval_shape(lambda key: model.init_params(cfg, key), jax.random.key(0))
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

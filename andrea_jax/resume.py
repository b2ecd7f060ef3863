"""Resuming a run in its workdir: what a resume may change, what a start says and records.

``plan_resume`` checks a config against the run a workdir holds, by the rules below, and
says where the start resumes; ``check_same_data`` and ``check_same_tokenizer`` refuse other
text, or another tokenizer, than the run trained on. What a start says first
(``describe_start``: resuming from which step, or why at step 0; ``describe_changes``;
``diverged_advice``), what it records (``record_start``: ``config.json``, its segments in
``config_history.json``, ``data.json`` and the tokenizer's copy), and the learning-rate
plans of a run's segments (``schedule_segments``).

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

A workdir saved before a field existed (``run_record.ADDED_FIELDS``) resumes as if it held
that field at its default: the value the run trained with.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import time

from andrea_jax import checkpoint as ckpt
from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import forecast
from andrea_jax import metrics
from andrea_jax import schedule as schedule_lib
from andrea_jax.model_config import resolve_init
from andrea_jax.run_record import (ADDED_FIELDS, TOKENIZER, config_history, latest_checkpoint,
                                   load_config_dict, read_data, read_summary, with_added_fields)

# Groups and fields that may change on a resume: they do not move the trajectory.
FREE_GROUPS = ("checkpoint", "sample", "diagnostics", "mesh", "distributed")
FREE_FIELDS = {"data.cache_dir", "data.prefetch", "data.workers", "train.log_every",
               "train.eval_every", "train.eval_at_start", "train.wandb_mode",
               "train.wandb_project", "train.wandb_name", "train.profile_steps",
               "train.task_eval_every", "train.task_file", "train.task_examples",
               "train.task_style",
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
# Fields that only a muP model reads (mup.py).
MUP_RULES = frozenset({"model.mup_attention", "model.mup_decay"})
# Fields that only a Muon run reads (step.muon) whose default is not what older runs ran with.
MUON_RULES = frozenset({"train.muon_split_qkv", "train.muon_adam_decay"})


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

  A field of ``ADDED_FIELDS`` that the saved config lacks counts as its value there;
  ``model.init`` is compared as the scheme it resolves to (a run saved with ``"gpt2"``
  resumes under the default ``"auto"`` unless ``"auto"`` means Xavier there). muP's
  own rules (``MUP_RULES``) do not count between two sp configs: the sp model ignores them;
  nor do Muon's (``MUON_RULES``) between two AdamW configs.
  """
  old, new = _flat(saved), _flat(current)
  for name, default in ADDED_FIELDS.items():
    if name in new:
      old.setdefault(name, default)
  for flat in (old, new):  # "auto" and the scheme it resolves to are one init (resolve_init)
    if "model.init" in flat:
      flat["model.init"] = resolve_init(flat["model.init"], flat.get("model.norm", "pre"))
  both_sp = old.get("model.parametrization") == new.get("model.parametrization") == "sp"
  both_adamw = old.get("train.optimizer") == new.get("train.optimizer") == "adamw"
  ignored = (MUP_RULES if both_sp else frozenset()) | (MUON_RULES if both_adamw else frozenset())
  out: dict[str, list[dict]] = {"free": [], "frozen": [], "trajectory": []}
  for name in sorted(set(old) | set(new)):
    a, b = old.get(name, "<missing>"), new.get(name, "<missing>")
    if a != b and name not in ignored:
      out[field_kind(name)].append({"field": name, "old": a, "new": b})
  return out


def change_lines(changes: list[dict]) -> str:
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
        f"{change_lines(changes['frozen'])}\nResume with the original config, or pass a new "
        f"--workdir for a new run.")
  if changes["trajectory"] and not allow_changes:
    raise errors.ConfigError(
        f"{workdir} holds a run started with other training settings:"
        f"{change_lines(changes['trajectory'])}\nResuming with them would change the run's "
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
  """Clipping on/off, or the decay of Muon's Adam branch on/off, changes the optimizer
  state's tree: a checkpoint cannot restore into it."""
  old_train, new_train = with_added_fields(saved).get("train", {}), current.get("train", {})
  if old_train.get("optimizer") == new_train.get("optimizer") == "muon" and (
      old_train.get("muon_adam_decay") != new_train.get("muon_adam_decay")):
    old_decay = old_train.get("muon_adam_decay")
    raise errors.ConfigError(
        f"train.muon_adam_decay: {old_decay!r} -> {new_train.get('muon_adam_decay')!r} changes "
        f"the optimizer state's structure (the Adam branch's decay keeps a step count of its "
        f"own), so the checkpoint's optimizer state cannot be restored into it: keep "
        f"--config.train.muon_adam_decay={old_decay}, or pass a new --workdir")
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
  new_run = ("restore what the run trained on to resume it, or pass a new --workdir to "
             "train on this data (the checkpoint's weights would read other token ids)")
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
          f"segment in config_history.json):{change_lines(plan.changes)}")


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


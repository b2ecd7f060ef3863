"""A saved run, scored: a checkpoint on its own evaluation or another prepared data's validation split (``evaluate_run``), or on HellaSwag (``evaluate_task``); ``python -m experiments.evaluate`` runs them. Nothing is written into the workdir."""

from __future__ import annotations

import dataclasses
import os

import jax

from andrea_jax import errors
from andrea_jax import files
from andrea_jax import prepared as prepared_lib
from andrea_jax import resume as resume_lib
from andrea_jax import run_record
from andrea_jax import tasks
from andrea_jax import validation
from andrea_jax.train import check_config, prepare_data, single_run


def evaluate_run(workdir: str, step: int | None = None, data: str | None = None,
                 eval_batches: int | None = None) -> dict:
  """A saved checkpoint of the run in ``workdir`` scored as the run scores itself: its own
  evaluation (``single_run``'s ``eval_loss`` through ``validation.evaluate``) over fixed batches
  of ``train.batch_size`` x ``block_size`` (``validation.make_eval_set``), ``eval_batches`` of
  them (default: the run's). ``step``: default the newest that reads whole.

  The batches are the run's own validation set (its data found as a resume finds it,
  ``prepare_data``), or the validation split of ``data``: a prepared data directory
  (``python -m experiments.prepare`` prints it) or another run's workdir, tokenized with
  this run's tokenizer (another is refused: ``resume.check_same_tokenizer``). Writes
  nothing into the workdir.
  """
  step, params, _, _, config = run_record.load_run_with_step(workdir, step)
  if config is None:
    config = run_record.run_config(workdir)  # the ConfigError naming the field it lacks
  if eval_batches is not None:
    config = dataclasses.replace(
        config, train=dataclasses.replace(config.train, eval_batches=eval_batches))
  prepared = prepare_data(config, workdir=workdir) if data is None else eval_data(data, workdir)
  cfg, t, mesh = check_config(config)
  models = single_run(config, cfg, t, mesh, workdir)
  params = jax.device_put(params, jax.tree.map(lambda a: a.sharding, models.abstract["params"]))
  eval_set = validation.make_eval_set(t, cfg, prepared, mesh)
  val_loss = float(validation.evaluate(models, params, eval_set, step)[0])
  return {"workdir": workdir, "step": step, "data": prepared.directory,
          "corpus_fingerprint": prepared.fingerprint, "eval_batches": t.eval_batches,
          "batch_size": t.batch_size, "block_size": cfg.block_size,
          "tokens": int(eval_set.targets.size), "val_loss": val_loss,
          "val_bpb": eval_set.bpb(val_loss), "unigram_val_loss": eval_set.unigram}


def evaluate_task(workdir: str, task_file: str, step: int | None = None, examples: int = 0,
                  style: str = "lmeval") -> dict:
  """HellaSwag's accuracies (``tasks.py``, scored in ``style``) of a saved checkpoint of the
  run in ``workdir`` (``step``: default the newest that reads whole), on the first
  ``examples`` (0: all) of ``task_file``, encoded with the run's tokenizer. Writes nothing."""
  step, params, cfg, tok, _ = run_record.load_run_with_step(workdir, step)
  encoded = tasks.encode(tasks.read_hellaswag(task_file, examples, style), tok, cfg.block_size,
                         style)
  return {"workdir": workdir, "step": step, "task": "hellaswag", "task_file": task_file,
          "block_size": cfg.block_size, **tasks.hellaswag(params, cfg, encoded)}


def eval_data(data: str, workdir: str) -> prepared_lib.PreparedData:
  """The prepared data ``data`` names (a prepared data directory, or a run's workdir: the
  data it trained on), refused unless tokenized with the tokenizer of the run in ``workdir``."""
  if os.path.isfile(os.path.join(data, "manifest.json")):
    prepared = prepared_lib.load_prepared(data)
    if prepared is None:
      raise errors.DataError(f"--data={data!r} holds a partial preparation (shards missing or cut "
                             f"short): run the python -m experiments.prepare command that made "
                             f"it again to finish it")
  elif os.path.isfile(os.path.join(data, "config.json")):
    prepared = prepare_data(run_record.run_config(data), workdir=data)
  else:
    raise errors.DataError(
        f"--data={data!r} is neither a prepared data directory (with manifest.json: the one "
        f"python -m experiments.prepare prints) nor a run's workdir; to score text of your own, "
        f"prepare it with this run's tokenizer: {prepare_command(workdir, '<your text>')}")
  resume_lib.check_same_tokenizer(
      workdir, files.sha256(prepared.tokenizer_path), f"the one --data={data} was prepared with",
      f"its token ids would be other text to this model; prepare the text with this run's "
      f"tokenizer: {prepare_command(workdir, '<its text>')}")
  return prepared


def prepare_command(workdir: str, text: str) -> str:
  """The command that prepares ``text`` with the tokenizer of the run in ``workdir``."""
  vocab_size = run_record.load_config_dict(workdir)["model"]["vocab_size"]
  return (f"python -m experiments.prepare --config=tiny --config.data.path={text} "
          f"--config.data.tokenizer_path={run_record.tokenizer_file(workdir)} "
          f"--config.model.vocab_size={vocab_size}")

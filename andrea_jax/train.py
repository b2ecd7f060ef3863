"""The run lifecycle: one engine for a single run and for a group of runs (``multi.py``).

``run``: check the config (a ``config.RunConfig``, built once from the experiment's
ConfigDict by ``train_and_evaluate``; ``check_config``: its ``model.ModelConfig`` with
``"auto"`` resolved, its ``step.TrainConfig`` and the device mesh), claim the workdir,
plan the resume (``resume.py``), prepare the data and the evaluation set, restore or
initialise the state, then ``loop.train_loop`` and each member's summary, loss plot (and
a single model's samples). It trains ``members.Models``: one model (``single_run``) or a
group's members (``multi.group``), each with its own directory. A single run is
``train_and_evaluate`` (the README's entry point). A saved checkpoint is scored by
``scoring.py`` (``python -m experiments.evaluate``).

Divergence (``step.train_step``) means one thing for a run and for each member of a group:
the loop stops once no member is left training (a group's others go on). The summary says
``diverged``, with ``diverged_at_step``; ``final_val_loss`` is None, and the last
evaluation before the divergence is ``last_val_loss`` at ``last_val_loss_step``. No
diverged state is saved (a group's later checkpoints hold a diverged member at its last
finite state). ``wall_time_s`` (summary and metrics rows) counts every resumed segment.

Exit codes of a run (``RunResult.exit_code``, returned by ``python -m experiments.run``):
0 completed (or already complete), 3 diverged, 4 interrupted by SIGTERM/SIGINT (a
checkpoint was saved; rerun the same command to resume).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import re
import time
from typing import Any, Callable

import jax
import numpy as np
from tqdm.auto import tqdm

from andrea_jax import allocator
from andrea_jax import checkpoint as ckpt
from andrea_jax import checkpoint_faults
from andrea_jax import config as config_lib
from andrea_jax import diagnostics
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import loader as loader_lib
from andrea_jax import logger as logger_lib
from andrea_jax import forecast
from andrea_jax import loop
from andrea_jax import memory
from andrea_jax import members as members_lib
from andrea_jax import metrics
from andrea_jax import model
from andrea_jax import plots
from andrea_jax import prepare as prepare_lib
from andrea_jax import prepared as prepared_lib
from andrea_jax import profiler as profiler_lib
from andrea_jax import resume as resume_lib
from andrea_jax import run_record
from andrea_jax import schedule as schedule_lib
from andrea_jax import sharding
from andrea_jax import signals as signals_lib
from andrea_jax import step as step_lib
from andrea_jax import tasks
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax import validation
from andrea_jax import workdir as workdir_lib

EXIT_COMPLETED, EXIT_DIVERGED, EXIT_INTERRUPTED = (
    errors.EXIT_COMPLETED, errors.EXIT_DIVERGED, errors.EXIT_INTERRUPTED)
EXIT_CODES = {"completed": EXIT_COMPLETED, "diverged": EXIT_DIVERGED,
              "interrupted": EXIT_INTERRUPTED}


# ----------------------------------------------------------------------------- what a run trains


def single_run(config: config_lib.RunConfig, cfg: model.ModelConfig, t: step_lib.TrainConfig, mesh,
               workdir: str) -> members_lib.Models:
  """One model on ``mesh``: state, steps and batches sharded, checkpoints on any mesh."""
  # One schedule for the optimizer and the logs; a resume keeps what was planned.
  schedule = schedule_lib.learning_rate(t.learning_rate,
                                        resume_lib.schedule_segments(workdir, config))
  optimizer = step_lib.make_optimizer(t, cfg, schedule)
  abstract = step_lib.abstract_state(cfg, optimizer, t.seed)
  shardings = sharding.state_shardings(abstract, mesh)
  # Explicit shardings in and out; XLA's partitioner inserts the collectives. Batches are
  # [A, B/A, T+1] (train; the rows of each microbatch are split) and [B, T+1] (eval).
  replicated = sharding.replicated(mesh)
  train_batch = sharding.batch_sharding(mesh, batch_dim=1, ndim=3)
  eval_batch = sharding.batch_sharding(mesh, batch_dim=0, ndim=2)
  step = jax.jit(functools.partial(step_lib.train_step, cfg=cfg, optimizer=optimizer,
                                   z_loss=t.z_loss, seed=t.seed),
                 in_shardings=(shardings, train_batch), out_shardings=(shardings, replicated),
                 donate_argnums=0)
  eval_loss = jax.jit(functools.partial(step_lib.eval_loss, cfg=cfg),
                      in_shardings=(shardings["params"], eval_batch), out_shardings=replicated)
  return members_lib.Models(
      dirs=[workdir], batch_seeds=[config.data.shuffle_seed], stacked=False,
      abstract=sharding.with_shardings(abstract, shardings),
      init=lambda: _init_single(config, cfg, t, optimizer, shardings), step=step,
      eval_loss=eval_loss, learning_rate=lambda k: np.array([float(schedule(k))]),
      place=lambda local: sharding.global_batch(local, train_batch, batch_dim=1),
      summary_fields=[{}], n_devices=mesh.size)


def _init_single(config: config_lib.RunConfig, cfg: model.ModelConfig,
                 t: step_lib.TrainConfig, optimizer, shardings) -> dict:
  init = jax.jit(step_lib.init_state, static_argnums=(0, 1), out_shardings=shardings)
  state = init(cfg, optimizer, jax.random.key(t.seed))
  if t.init_from:  # fine-tune a Hugging Face GPT-2 directory (README, interop)
    from andrea_jax.interop import hf_gpt2  # pylint: disable=import-outside-toplevel
    params = sharding.put(hf_gpt2.init_from(config), shardings["params"])
    opt_state = jax.jit(optimizer.init, out_shardings=shardings["opt_state"])(params)
    state = {**state, "params": params, "opt_state": opt_state}
    print(f"initialised the parameters from {t.init_from}")
  return state


# ----------------------------------------------------------------------------- the run


@dataclasses.dataclass
class RunResult:
  status: str
  summary: dict  # a single run's summary; a group's own (its members' are in ``members``)
  # The final training state (after a divergence: the last finite one, as it was before the
  # diverging step); for a run found already complete, its step and params only.
  state: Any = None
  # True when the workdir already held the finished (or diverged) run, rerun with the same
  # settings: nothing was trained or written.
  already_complete: bool = False
  members: list[dict] = dataclasses.field(default_factory=list)  # each member's summary

  @property
  def exit_code(self) -> int:
    return EXIT_CODES[self.status]


def check_config(config: config_lib.RunConfig, devices=None
                 ) -> tuple[model.ModelConfig, step_lib.TrainConfig, Any]:
  """The model config (``"auto"`` resolved), training config and device mesh of ``config``,
  or a ConfigError naming what is wrong."""
  cfg = model.resolve_auto(config.model)
  t = config.train
  if t.optimizer == "muon" and cfg.parametrization == "mup":
    raise errors.ConfigError(
        "train.optimizer='muon' with model.parametrization='mup': muP's per-parameter rates "
        "are Adam's; set --config.model.parametrization=sp (Muon's update RMS, "
        "train.muon_consistent_rms, is its own width rule)")
  tasks.check_style(t.task_style, "train.task_style")  # its names' home: tasks.STYLES
  mesh = sharding.make_mesh(config.mesh, devices)
  sharding.check_batch(t.batch_size, t.grad_accum_steps, mesh)
  if t.wandb_mode != "off" and sharding.is_lead():
    metrics.require_wandb(t.wandb_mode)  # before anything is prepared: one line, nothing lost
  if config.diagnostics.enabled and jax.process_count() > 1:
    raise errors.ConfigError(
        f"diagnostics.enabled=True runs in one process only (this run has "
        f"{jax.process_count()}); set --config.diagnostics.enabled=False")
  return cfg, t, mesh


def prepare_data(config: config_lib.RunConfig, fit_vocab: bool = False,
                 workdir: str | None = None) -> prepared_lib.PreparedData:
  """Process 0 prepares (or finds) the cached data first; the others then read its cache.

  With ``workdir``, the text and the tokenizer must be those its run trained on
  (``resume.check_same_data``): other text is refused before a tokenizer is trained. A
  run that recorded its prepared data (``data.json``) reads it where it lies, from any
  directory and whatever ``data.cache_dir`` says (a moved or copied workdir): nothing is
  prepared again (``prepare.reuse_recorded``; given shards, ``data.shards``, are read where
  the config names them).
  """
  check = None if workdir is None else functools.partial(resume_lib.check_same_data, workdir)
  record = None if workdir is None or config.data.shards else run_record.read_data(workdir)
  find = lambda: (prepare_lib.prepare(config, fit_vocab, check=check) if record is None else
                  prepare_lib.reuse_recorded(config, record, fit_vocab, check,
                                             verbose=sharding.is_lead()))
  if sharding.is_lead():
    prepared = find()
  sharding.barrier("andrea_jax: data prepared")
  if not sharding.is_lead():
    prepared = find()
  if workdir is not None:
    resume_lib.check_same_data(workdir, prepared.fingerprint,
                               files.sha256(prepared.tokenizer_path))
  return prepared


def restore_or_init(models: members_lib.Models, mngr, start_step: int) -> tuple[Any, int]:
  """``(state, step)``: the newest checkpoint that reads whole on this run's devices (damaged
  newer ones are set aside, with a note: ``checkpoint.restore_newest``), or a fresh state."""
  if not start_step:
    return models.init(), 0
  # Straight onto this run's mesh, whichever mesh wrote the checkpoint.
  step, state = ckpt.restore_newest(mngr, models.abstract, set_aside=sharding.is_lead())
  sharding.barrier("andrea_jax: restored")  # damaged steps are set aside before anyone saves
  return state, step


def run(config: config_lib.RunConfig, workdir: str,
        build: Callable[[model.ModelConfig, step_lib.TrainConfig, Any], members_lib.Models],
        allow_resume_changes: bool = False, devices=None) -> RunResult:
  """The lifecycle of a run in ``workdir``: train ``build(cfg, t, mesh)``'s models, resuming.

  A resume that changes training settings is refused unless ``allow_resume_changes``
  (``resume.py``); a workdir whose run already finished is left untouched. Each member's
  summary and loss plot are written to its directory (a single model's samples too).
  """
  cfg, t, mesh = check_config(config, devices)
  lead = sharding.is_lead()  # every process trains; process 0 alone writes the run's files
  with signals_lib.StopSignals() as signals, workdir_lib.claim(workdir, enabled=lead) as claim:
    plan = resume_lib.plan_resume(workdir, config, allow_resume_changes)
    signals.progress(saved=plan.start_step)  # a stop before the first step loses nothing
    if plan.changes and lead:
      print(resume_lib.describe_changes(plan), flush=True)
    if plan.complete:
      print(f"already complete at step {plan.start_step}: {workdir} is left as it is. To "
            f"train again, pass a new --workdir (or raise train.steps with "
            f"--allow_resume_changes to continue this run)")
      return RunResult("completed", plan.summary, already_complete=True)
    if plan.diverged:  # the same settings would diverge again, at the same step
      if lead:
        print(resume_lib.diverged_advice(plan, workdir, t.learning_rate), flush=True)
      return RunResult("diverged", plan.summary, already_complete=True)
    if lead:
      print(resume_lib.describe_start(workdir, plan), flush=True)
      print(step_lib.describe_training(t), flush=True)
    started = time.time()
    if lead and allocator.note():
      print(allocator.note(), flush=True)
    # The downstream task's file first: offline, one line, before anything is prepared.
    task_path = (tasks.hellaswag_file(t.task_file, name="train.task_file")
                 if t.task_eval_every else None)
    signals_lib.set_phase("preparing data")
    prepared = prepare_data(config, workdir=workdir)
    signals_lib.check()
    signals_lib.set_phase("preparing the evaluation and the model")
    # Before the workdir is the run's: a batch too large for the data leaves nothing behind.
    check_data_fits(config, cfg, t, mesh, prepared)
    eval_set = validation.make_eval_set(t, cfg, prepared, mesh)
    task = task_path and task_scorer(task_path, t, cfg, prepared.tokenizer_path)
    models = build(cfg, t, mesh)
    if config.sample.num_samples > 0 and not models.stacked:  # not found at the end, lost
      workdir_lib.check_samples(cfg, prepared.tokenizer_path, config.sample)
    models, compile_s = compile_checked(models, cfg, t, eval_set)
    clock = workdir_lib.Clock(workdir, models.dirs, started)
    mngr = ckpt.manager(f"{workdir}/checkpoints", config.checkpoint.every, config.checkpoint.keep,
                        config.checkpoint.every_seconds, config.checkpoint.kept_steps)
    try:
      state, plan.start_step = restore_or_init(models, mngr, plan.start_step)
      signals_lib.check()
    except BaseException:
      mngr.close()
      raise
    claim.started()  # from here on the workdir is the run's, whatever happens
    if lead:
      resume_lib.record_start(workdir, config, plan, {
          **dataclasses.asdict(prepared),
          "tokenizer_sha256": files.sha256(prepared.tokenizer_path)})
    out = loop.Outputs(logger_lib.Logger(models, cfg, t, eval_set, plan.start_step, clock), mngr,
                       profiler=profiler_lib.Profiler(t.profile_range,
                                                      os.path.join(workdir, "profile")), task=task)
    if config.diagnostics.enabled:
      out.diagnostics = diagnostics.Recorder(config.diagnostics, cfg, eval_set.first_batch,
                                             models.dirs, models.stacked, last_step=t.steps)
    with loop.Batches(models, prepared.train_paths, t, cfg.block_size, plan.start_step,
                      config.data.prefetch) as batches, out_of_memory_advice(t), out.profiler:
      outcome = loop.train_loop(models, state, t, plan.start_step, batches, eval_set, out,
                                compile_s)
    out.log.close()
    mngr.close()
    if out.diagnostics:
      out.diagnostics.close()
    state, latest = outcome.state, run_record.latest_checkpoint(workdir)
    steps = members_lib.per_member(state["step"])
    if outcome.status == "diverged" and lead:
      tqdm.write(f"diverged: non-finite loss, gradient or parameters at update "
                 f"{int(steps.max()) + 1}; kept the last good checkpoint (step {latest})")
    shared = {"wall_time_s": clock.seconds(), "n_params": model.count_params(cfg),
              "tokens_per_step": t.batch_size * cfg.block_size,
              "corpus_fingerprint": prepared.fingerprint, "latest_checkpoint": latest,
              "config_segments": run_record.config_segments(workdir)}
    members = [{**summary(outcome, i, eval_set, steps[i]), **shared, **models.summary_fields[i]}
               for i in range(models.n)]
    if outcome.status == "completed" and config.sample.num_samples > 0 and not models.stacked:
      params = sharding.gather(state["params"])  # every process takes part in the gather
      if lead:  # (a group's members write none: a sweep compares their losses)
        members[0]["samples"] = workdir_lib.write_samples(params, cfg, prepared.tokenizer_path,
                                                   config.sample, workdir, t.seed)
    if lead:
      for d, member in zip(models.dirs, members):
        plots.plot_losses(d, eval_set.unigram)
        run_record.write_summary(d, member)
    own = members[0] if not models.stacked else group_summary(models, outcome.status, members,
                                                              latest, shared["wall_time_s"])
    return RunResult(outcome.status, own, state, members=members)


def compile_checked(models: members_lib.Models, cfg: model.ModelConfig, t: step_lib.TrainConfig,
                    eval_set: validation.EvalSet) -> tuple[members_lib.Models, float]:
  """``models`` with its step and evaluation compiled ahead, before the state exists
  (``forecast.compile_programs``), and the seconds it took. The compiled step's memory is
  checked against what the machine has free (``memory.check``): a run that would not fit
  stops here in one line (exit 2), before its state is allocated or its workdir is its own,
  rather than being killed by the kernel partway through a step."""
  batch = loop.Batches.like(models, t, cfg.block_size)
  step, evaluate, seconds, compiled = forecast.compile_programs(
      models.step, models.eval_loss, models.abstract, batch, eval_set.arrays[0])
  line = memory.check(memory.Estimate.of(cfg, t, models.abstract, compiled, models.n), cfg, t)
  if sharding.is_lead():
    print(line, flush=True)
  return dataclasses.replace(models, step=step, eval_loss=evaluate), seconds


def check_data_fits(config: config_lib.RunConfig, cfg: model.ModelConfig, t: step_lib.TrainConfig,
                    mesh, prepared: prepared_lib.PreparedData) -> None:
  """Refuse data too small for the batch, the block or the samples, with settings that pass
  all of them at once (``loader.check_fits``)."""
  s = config.sample
  prompt = (len(tokenizer_lib.encode(tokenizer_lib.load(prepared.tokenizer_path, cfg.vocab_size),
                                     s.prompt)) or 1) if s.num_samples > 0 else 0
  loader_lib.check_fits(len(prepared.stream("train")), len(prepared.stream("val")), t.batch_size,
                        cfg.block_size, f"the shards in {prepared.directory!r}",
                        multiple=t.grad_accum_steps * sharding.batch_devices(mesh), prompt=prompt,
                        new_tokens=s.max_new_tokens if s.num_samples > 0 else 0)


def task_scorer(path: str, t: step_lib.TrainConfig, cfg: model.ModelConfig,
                tokenizer_path: str) -> tasks.Scorer:
  """HellaSwag's first ``train.task_examples`` examples of ``path``, encoded with the run's
  tokenizer, as the loop scores them every ``train.task_eval_every`` updates."""
  examples = tasks.read_hellaswag(path, t.task_examples, t.task_style)
  tok = tokenizer_lib.load(tokenizer_path, cfg.vocab_size)
  return tasks.Scorer(cfg, tasks.encode(examples, tok, cfg.block_size, t.task_style))


def group_summary(models: members_lib.Models, status: str, members: list[dict], latest: int | None,
                  wall_time_s: float) -> dict:
  """A group's own ``summary.json``: its outcome, its newest checkpoint, each member's status."""
  return {"status": status, "exit_code": EXIT_CODES[status],
          "steps": latest,  # the group's newest checkpoint
          "members": {os.path.basename(d): s["status"] for d, s in zip(models.dirs, members)},
          "wall_time_s": wall_time_s, "group_size": models.n}


def summary(outcome: loop.Outcome, i: int, eval_set: validation.EvalSet, steps: int) -> dict:
  """Member i's own fields of its ``summary.json`` (README, Training, "What a run writes"),
  from the loop's record; the fields every member shares are ``run``'s."""
  member = outcome.status if outcome.alive[i] else "diverged"
  record = outcome.record
  last, last_step = record.val[i] if record.val[i] is not None else (None, None)
  final = last if member == "completed" else None
  initial = record.initial_val[i]
  return {
      "status": member, "exit_code": EXIT_CODES[member], "steps": int(steps),
      "diverged_at_step": int(steps) + 1 if member == "diverged" else None,
      "final_train_loss": record.train_loss[i],
      "final_val_loss": final, "last_val_loss": last, "last_val_loss_step": last_step,
      "initial_val_loss": None if initial is None else float(initial),
      "unigram_val_loss": eval_set.unigram, "val_bpb": eval_set.bpb(final),
      "val_gain_over_unigram": None if final is None else eval_set.unigram - final}


@contextlib.contextmanager
def out_of_memory_advice(t: step_lib.TrainConfig):
  """A device out of memory in training becomes one line with the numbers and the fix:
  microbatches (``train.grad_accum_steps``: the same batch, a fraction of the activations),
  else a smaller batch or context. The checkpoints saved before it are kept."""
  try:
    yield
  except jax.errors.JaxRuntimeError as e:
    if not checkpoint_faults.out_of_memory(e):
      raise
    found = re.search(r"allocating (\d+) bytes", str(e))
    need = int(found.group(1)) if found else 0
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if jax.default_backend() == "cpu" else 0
    # One buffer at half the machine's memory at most: the step holds others beside it.
    fold = 2 ** max(1, math.ceil(math.log2(need / (have / 2)))) if have and need else 2
    accum = t.grad_accum_steps * fold
    while t.batch_size % accum and accum > t.grad_accum_steps:
      accum //= 2
    fix = (f"split each batch into microbatches: --config.train.grad_accum_steps={accum} (the "
           f"same batch of {t.batch_size}, about 1/{accum // t.grad_accum_steps} of the "
           f"activations)" if accum > t.grad_accum_steps else
           "lower --config.train.batch_size or --config.model.block_size")
    raise errors.ConfigError(
        "out of memory in training" + (f": a buffer of {need / 2**30:.1f} GiB" if need else "")
        + (f" on a machine with {have / 2**30:.1f} GiB" if have else " on the device")
        + f" at train.batch_size={t.batch_size}, train.grad_accum_steps={t.grad_accum_steps}; "
        f"{fix}. The checkpoints saved before it are kept.") from None


def train_and_evaluate(config, workdir: str, allow_resume_changes: bool = False) -> RunResult:
  """Train ``config`` in ``workdir``; resume if it holds a checkpoint (``run``).

  ``config``: an experiment's ConfigDict (converted here, the boundary) or a ``RunConfig``.
  """
  config = config_lib.run_config(config)
  result = run(config, workdir, lambda cfg, t, mesh: single_run(config, cfg, t, mesh, workdir),
               allow_resume_changes)
  if result.already_complete:
    params = run_record.load_run(workdir)[0]  # read only: callers may sample from the result
    result.state = {"step": result.summary["steps"], "params": params}
  return result

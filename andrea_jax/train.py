"""Training: one engine for a single run and for a group of runs (``multi.py``).

The step core, ``train_step``: the loss averaged over gradient-accumulation microbatches,
the global gradient norm (the clipping reuses it), the optimizer (AdamW with its warmup-
cosine schedule, through optax), and the skip of a step that diverges. A group runs the
same function over its members under ``jax.vmap`` or ``lax.map``; a member's own peak
learning rate is one more optimizer stage (``multi.make_optimizer``).

The run lifecycle, ``run``: check the config, claim the workdir, plan the resume
(``resume.py``), prepare the data and the evaluation, restore or initialise the state, then
``train_loop`` (signals, logging, evaluation, diagnostics, checkpoints) and ``summaries``.
It trains ``Models``: one model (``single_run``) or a group's members (``multi.group``),
each member with its own directory of metrics, diagnostics, summary and loss plot. A
single run is ``train_and_evaluate`` (the README's entry point).

Divergence means one thing for a run and for each member of a group. A step diverges when
its loss or gradient norm is not finite, or when the parameters it would make are not:
it is not applied (the state stays bit-identical to the one before it) and ``good`` turns
False for ever, so every later step is skipped too. The loop reads the flag one step late
(no host sync per step; exactly at log, evaluation and checkpoint steps) and stops once no
member is left training (a group's others go on). The summary says ``diverged``, with
``diverged_at_step``; ``final_val_loss`` is None, and the last evaluation before the
divergence is ``last_val_loss`` at ``last_val_loss_step``. No diverged state is saved:
what is kept is the newest checkpoint, saved before the divergence, all of it finite (a
group's later checkpoints hold a diverged member at its last finite state).

``wall_time_s`` (summary and metrics rows) counts every segment of a resumed run.

Exit codes of a run (``RunResult.exit_code``, returned by ``python -m experiments.run``):
0 completed (or already complete), 3 diverged, 4 interrupted by SIGTERM/SIGINT (a
checkpoint was saved; rerun the same command to resume).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
import types
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from andrea_jax import checkpoint as ckpt
from andrea_jax import diagnostics
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import forecast
from andrea_jax import history
from andrea_jax import loader as loader_lib
from andrea_jax import metrics as metrics_lib
from andrea_jax import model
from andrea_jax import mup
from andrea_jax import plots
from andrea_jax import prepare as prepare_lib
from andrea_jax import resume
from andrea_jax import runs
from andrea_jax import sharding
from andrea_jax import shards
from andrea_jax import signals as signals_lib
from andrea_jax import tokenizer as tokenizer_lib

EXIT_COMPLETED, EXIT_DIVERGED, EXIT_INTERRUPTED = (
    errors.EXIT_COMPLETED, errors.EXIT_DIVERGED, errors.EXIT_INTERRUPTED)
EXIT_CODES = {"completed": EXIT_COMPLETED, "diverged": EXIT_DIVERGED,
              "interrupted": EXIT_INTERRUPTED}

# Leaves that get weight decay: the weight matrices and both embeddings (as in GPT-2 and
# nanoGPT: wte is also the tied output head). Biases and LayerNorm parameters get none.
DECAYED = frozenset({"wte", "wpe", "lm_head", "w_qkv", "w_out", "w_in"})


# ----------------------------------------------------------------------------- optimizer


def check_train_config(t) -> None:
  """Reject a bad ``train`` group before anything is computed."""
  positive = ("steps", "batch_size", "grad_accum_steps", "learning_rate", "log_every",
              "eval_every", "eval_batches")
  for name in positive:
    if not t[name] > 0:
      raise errors.ConfigError(f"train.{name}={t[name]!r}: expected a positive value")
  if t.batch_size % t.grad_accum_steps:
    raise errors.ConfigError(
        f"train.batch_size={t.batch_size} is not divisible by train.grad_accum_steps="
        f"{t.grad_accum_steps}: choose a batch size that is a multiple of it")
  if not 0 <= t.warmup_steps < t.steps:
    raise errors.ConfigError(f"train.warmup_steps={t.warmup_steps}: expected 0 <= warmup_steps "
                             f"< train.steps={t.steps}; set --config.train.warmup_steps="
                             f"{t.steps // 10} (a tenth of the run)")
  if not 0 <= t.min_lr_ratio <= 1:
    raise errors.ConfigError(f"train.min_lr_ratio={t.min_lr_ratio}: expected a value in [0, 1]")
  if not t.z_loss >= 0:
    raise errors.ConfigError(f"train.z_loss={t.z_loss!r}: expected 0 (off) or a positive weight "
                             f"such as 1e-4")


def make_schedule(t, segments: list | None = None) -> optax.Schedule:
  """Linear warmup to the peak, then cosine decay to ``learning_rate * min_lr_ratio``.

  Update ``k`` (0, 1, ...) of the warmup uses ``peak * (k + 1) / (warmup_steps + 1)``, as
  nanoGPT does: the first update already moves the parameters, and update ``warmup_steps``
  is the first at the peak. (optax's linear warmup from ``peak / (warmup + 1)`` is exactly
  this line.)

  ``segments`` (``resume.schedule_segments``: ``[(start_step, train), ...]``, the last one
  ``t``'s) is a run resumed with other settings. Resuming never changes the schedule of
  the steps already planned: each segment keeps its predecessor's shape up to its start
  (or up to the end of the warmup, when it starts inside it), then decays by a cosine from
  the value the saved schedule gives there to its own ``min_lr_ratio`` at its own
  ``steps``. So a run continued to more steps extends its decay without a jump at the
  seam; a changed peak ``learning_rate`` scales the whole shape from the seam on.
  """
  shapes = [tuple(seg[k] for k in SHAPE_FIELDS) for _, seg in segments or ()]
  if len(set(shapes)) <= 1:  # one plan (its peak may have changed): optax's schedule
    peak = t.learning_rate
    return optax.warmup_cosine_decay_schedule(
        init_value=peak / (t.warmup_steps + 1), peak_value=peak, warmup_steps=t.warmup_steps,
        decay_steps=t.steps, end_value=peak * t.min_lr_ratio)
  shape = make_schedule(_unit_peak(segments[0][1]))  # the first start's plan, at a peak of 1
  for (start, seg), old, new in zip(segments[1:], shapes, shapes[1:]):
    if new != old:
      at = max(int(start), int(seg["warmup_steps"]))
      shape = _continue(shape, at, float(shape(at)), seg["min_lr_ratio"],
                        max(seg["steps"], at + 1))
  return lambda count: t.learning_rate * shape(count)


# The fields that shape the schedule (the peak only scales it).
SHAPE_FIELDS = ("warmup_steps", "steps", "min_lr_ratio")


def _unit_peak(t) -> types.SimpleNamespace:
  return types.SimpleNamespace(**{**dict(t), "learning_rate": 1.0})


def _continue(before: optax.Schedule, at: int, value: float, end: float,
              steps: int) -> optax.Schedule:
  """``before`` up to update ``at``, then a cosine from ``value`` to ``end`` at ``steps``."""

  def schedule(count):
    done = jnp.clip((count - at) / (steps - at), 0.0, 1.0)
    after = end + (value - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * done))
    return jnp.where(count < at, before(count), after)

  return schedule


def decay_mask(params) -> Any:
  return jax.tree_util.tree_map_with_path(lambda path, _: path[-1].key in DECAYED, params)


def make_optimizer(t, cfg: model.ModelConfig | None = None,
                   segments: list | None = None) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW with decoupled decay on matrices and embeddings.

  Under muP (``cfg.parametrization == "mup"``) AdamW's updates then get the per-parameter
  learning-rate factors of ``mup.scale_learning_rates``.
  """
  adamw = optax.adamw(make_schedule(t, segments), b1=t.b1, b2=t.b2, eps=t.eps,
                      weight_decay=t.weight_decay, mask=decay_mask)
  if cfg is not None and cfg.parametrization == "mup":
    adamw = optax.chain(adamw, mup.scale_learning_rates(cfg))
  return optax.chain(clip_by_global_norm(t.grad_clip), adamw) if t.grad_clip > 0 else adamw


# ----------------------------------------------------------------------------- state and steps


def init_state(cfg: model.ModelConfig, optimizer, key: jax.Array) -> dict:
  """The whole training state as one pytree (what a checkpoint holds).

  ``good`` turns False at the first step that diverges and stays False (module docstring).
  """
  params = model.init_params(cfg, key)
  return {"step": jnp.zeros((), jnp.int32), "params": params,
          "opt_state": optimizer.init(params), "good": jnp.ones((), bool)}


def train_step(state: dict, batch_ABT: jax.Array, cfg: model.ModelConfig, optimizer,
               z_loss: float = 0.0) -> tuple[dict, dict]:
  """One optimizer update from ``A`` microbatches ``[A, B/A, T+1]`` (gradients averaged).

  The objective is the cross-entropy plus ``z_loss * log(Z)^2`` (``model.loss_terms``); the
  metrics report them apart: ``loss`` is the cross-entropy, ``z_loss`` the auxiliary term
  (only when ``z_loss > 0``).

  Lean on purpose (docs/performance.md): one microbatch is a plain ``value_and_grad``;
  more are summed by a ``lax.scan`` whose carry starts at the first one's gradients. The
  gradient norm is computed once and handed to the clipping (``clip_by_global_norm``). A
  non-finite loss or norm skips the update in a ``lax.cond`` (no work on the state); an
  update that would make a parameter non-finite is discarded by a select fused into the
  update. Either way the state is left as it was, with ``good`` False for ever. Returns
  the new state and ``{"loss", "grad_norm", "good"}`` (``good``: after this step; and
  ``z_loss`` when it is on).
  """
  (_, terms), grads = _mean_loss_and_grads(state["params"], batch_ABT, cfg, z_loss)
  loss = terms["nll"]
  grad_norm = optax.tree.norm(grads)

  def update(state):
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"],
                                          grad_norm=grad_norm)
    params = optax.apply_updates(state["params"], updates)
    finite = _all_finite(params)
    old = (state["params"], state["opt_state"])
    params, opt_state = jax.tree.map(lambda n, o: jnp.where(finite, n, o), (params, opt_state), old)
    return {"step": state["step"] + finite.astype(jnp.int32), "params": params,
            "opt_state": opt_state, "good": finite}

  def skip(state):
    return {**state, "good": jnp.zeros((), bool)}

  ok = state["good"] & jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  new_state = jax.lax.cond(ok, update, skip, state)
  metrics = {"loss": loss, "grad_norm": grad_norm, "good": new_state["good"],
             **({"z_loss": terms["z_loss"]} if z_loss else {})}
  return new_state, metrics


def _all_finite(tree) -> jax.Array:
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(tree)]))


def _mean_loss_and_grads(params, batch_ABT: jax.Array, cfg: model.ModelConfig, z_loss: float):
  """``((objective, terms), gradients)`` averaged over the ``A`` microbatches of ``batch_ABT``."""
  grad_fn = jax.value_and_grad(functools.partial(model.loss_terms, z_loss=z_loss), has_aux=True)
  first = grad_fn(params, batch_ABT[0, :, :-1], batch_ABT[0, :, 1:], cfg)
  A = batch_ABT.shape[0]
  if A == 1:
    return first

  def accumulate(carry, micro_BT):
    loss_grads = grad_fn(params, micro_BT[:, :-1], micro_BT[:, 1:], cfg)
    return jax.tree.map(jnp.add, carry, loss_grads), None

  total, _ = jax.lax.scan(accumulate, first, batch_ABT[1:])
  return jax.tree.map(lambda a: a / A, total)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformationExtraArgs:
  """``optax.clip_by_global_norm`` (same math, same empty state) that reuses a given norm.

  ``update(..., grad_norm=n)`` clips with ``n`` instead of computing the norm again: the
  train step has it already. Without ``grad_norm`` it computes it, as optax does.
  """

  def update_fn(updates, state, params=None, *, grad_norm=None, **extra_args):
    del params, extra_args
    norm = optax.tree.norm(updates) if grad_norm is None else grad_norm
    trigger = norm < max_norm
    return jax.tree.map(lambda g: jax.lax.select(trigger, g, (g / norm.astype(g.dtype)) * max_norm),
                        updates), state

  return optax.GradientTransformationExtraArgs(optax.init_empty_state, update_fn)


def eval_step(params, batch_BT: jax.Array, cfg: model.ModelConfig) -> jax.Array:
  return model.loss_fn(params, batch_BT[:, :-1], batch_BT[:, 1:], cfg)


def unigram_loss(train_tokens: np.ndarray, eval_set: np.ndarray, vocab_size: int) -> float:
  """Cross-entropy (nats) of the add-one-smoothed token frequencies of the training split."""
  counts = np.bincount(np.asarray(train_tokens), minlength=vocab_size).astype(np.float64) + 1.0
  log_p = np.log(counts / counts.sum())
  return float(-log_p[eval_set[..., 1:]].mean())


def abstract_state(cfg: model.ModelConfig, optimizer, seed: int) -> Any:
  """Shapes and dtypes of ``init_state`` (nothing computed): the target of a restore."""
  return jax.eval_shape(lambda k: init_state(cfg, optimizer, k), jax.random.key(seed))


# ----------------------------------------------------------------------------- what a run trains


@dataclasses.dataclass
class Models:
  """What the lifecycle trains: one model (a single run) or a group's members.

  Its functions take and return the state of all of them; with ``stacked`` every leaf of
  the state (and the metrics, evaluations and probes) carries a leading member axis.
  """
  dirs: list[str]  # each member's directory for its metrics and summary (single: the workdir)
  batch_seeds: list[int]  # each member's batch order (``loader.batch_at``'s seed)
  stacked: bool
  abstract: Any  # the state's shapes, dtypes (and shardings): the target of a restore
  init: Callable[[], Any]  # a fresh state
  step: Callable  # jitted, donating: (state, batch) -> (state, {"loss", "grad_norm", "good"})
  evaluate: Callable  # jitted: (params, [B, T+1] batch) -> mean loss (of each member)
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


def single_run(config, cfg: model.ModelConfig, mesh, workdir: str) -> Models:
  """One model on ``mesh``: state, steps and batches sharded, checkpoints on any mesh."""
  t = config.train
  segments = resume.schedule_segments(workdir, config)  # a resume keeps what was planned
  optimizer, schedule = make_optimizer(t, cfg, segments), make_schedule(t, segments)
  abstract = abstract_state(cfg, optimizer, t.seed)
  shardings = sharding.state_shardings(abstract, mesh)
  # Explicit shardings in and out; XLA's partitioner inserts the collectives. Batches are
  # [A, B/A, T+1] (train; the rows of each microbatch are split) and [B, T+1] (eval).
  replicated = sharding.replicated(mesh)
  train_batch = sharding.batch_sharding(mesh, batch_dim=1, ndim=3)
  eval_batch = sharding.batch_sharding(mesh, batch_dim=0, ndim=2)
  step = jax.jit(functools.partial(train_step, cfg=cfg, optimizer=optimizer, z_loss=t.z_loss),
                 in_shardings=(shardings, train_batch), out_shardings=(shardings, replicated),
                 donate_argnums=0)
  evaluate = jax.jit(functools.partial(eval_step, cfg=cfg),
                     in_shardings=(shardings["params"], eval_batch), out_shardings=replicated)
  return Models(
      dirs=[workdir], batch_seeds=[config.data.shuffle_seed], stacked=False,
      abstract=sharding.with_shardings(abstract, shardings),
      init=lambda: _init_single(config, cfg, optimizer, shardings), step=step,
      evaluate=evaluate, learning_rate=lambda k: np.array([float(schedule(k))]),
      place=lambda local: sharding.global_batch(local, train_batch, batch_dim=1),
      summary_fields=[{}], n_devices=mesh.devices.size)


def _init_single(config, cfg: model.ModelConfig, optimizer, shardings) -> dict:
  init = jax.jit(init_state, static_argnums=(0, 1), out_shardings=shardings)
  state = init(cfg, optimizer, jax.random.key(config.train.seed))
  if config.train.get("init_from"):  # fine-tune a Hugging Face GPT-2 directory (README, interop)
    from andrea_jax.interop import hf_gpt2  # pylint: disable=import-outside-toplevel
    params = sharding.put(hf_gpt2.init_from(config), shardings["params"])
    opt_state = jax.jit(optimizer.init, out_shardings=shardings["opt_state"])(params)
    state = {**state, "params": params, "opt_state": opt_state}
    print(f"initialised the parameters from {config.train.init_from}")
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


@dataclasses.dataclass
class Eval:
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


def check_config(config, devices=None) -> tuple[model.ModelConfig, Any]:
  """The model config and device mesh of ``config``, or a ConfigError naming what is wrong."""
  cfg = model.resolve_auto(model.ModelConfig(**config.model))
  t = config.train
  check_train_config(t)
  mesh = sharding.make_mesh(config.mesh, devices)
  sharding.check_batch(t.batch_size, t.grad_accum_steps, mesh)
  if config.diagnostics.enabled and jax.process_count() > 1:
    raise errors.ConfigError(
        f"diagnostics.enabled=True runs in one process only (this run has "
        f"{jax.process_count()}); set --config.diagnostics.enabled=False")
  return cfg, mesh


def prepare_data(config, fit_vocab: bool = False,
                 workdir: str | None = None) -> prepare_lib.PreparedData:
  """Process 0 prepares (or finds) the cached data first; the others then read its cache.

  With ``workdir``, the text and the tokenizer must be those its run trained on
  (``resume.check_same_data``): other text is refused before a tokenizer is trained.
  """
  check = None if workdir is None else functools.partial(resume.check_same_data, workdir)
  if sharding.is_lead():
    prepared = prepare_lib.prepare(config, fit_vocab, check=check)
  sharding.barrier("andrea_jax: data prepared")
  if not sharding.is_lead():
    prepared = prepare_lib.prepare(config, fit_vocab, check=check)
  if workdir is not None:
    resume.check_same_data(workdir, prepared.fingerprint, files.sha256(prepared.tokenizer_path))
  return prepared


def make_eval(config, cfg: model.ModelConfig, prepared: prepare_lib.PreparedData, mesh) -> Eval:
  t = config.train
  train_tokens = shards.read_shard(prepared.train_path)
  val_tokens = shards.read_shard(prepared.val_path)
  eval_set = loader_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                   name=f"validation shard {prepared.val_path!r}")
  # Each process holds its own rows of every eval batch, like the loader's train batches.
  local = loader_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                process_index=jax.process_index(),
                                process_count=jax.process_count())
  batch = sharding.batch_sharding(mesh, batch_dim=0, ndim=2)
  tok = tokenizer_lib.load(prepared.tokenizer_path, cfg.vocab_size)
  return Eval(arrays=[sharding.global_batch(b, batch, batch_dim=0) for b in local],
              unigram=unigram_loss(train_tokens, eval_set, cfg.vocab_size),
              targets=eval_set[..., 1:], token_bytes=metrics_lib.token_bytes(tok, cfg.vocab_size),
              first_batch=eval_set[0])


def restore_or_init(config, models: Models, workdir: str, start_step: int) -> Any:
  """The checkpoint of ``start_step`` (the newest) on this run's devices, or a fresh state."""
  if not start_step:
    return models.init()
  mngr = ckpt.manager(f"{workdir}/checkpoints", config.checkpoint.every, config.checkpoint.keep)
  try:  # straight onto this run's mesh, whichever mesh wrote the checkpoint
    state = ckpt.restore(mngr, models.abstract)
  finally:
    mngr.close()
  print(f"resumed {workdir} from step {start_step}")
  return state


def run(config, workdir: str, build: Callable[[model.ModelConfig, Any], Models],
        allow_resume_changes: bool = False, devices=None) -> RunResult:
  """The lifecycle of a run in ``workdir``: train ``build(cfg, mesh)``'s models, resuming.

  A resume that changes training settings is refused unless ``allow_resume_changes``
  (``resume.py``); a workdir whose run already finished is left untouched. Each member's
  summary and loss plot are written to its directory (a single model's samples too).
  """
  cfg, mesh = check_config(config, devices)
  lead = sharding.is_lead()  # every process trains; process 0 alone writes the run's files
  with signals_lib.StopSignals(), resume.claim(workdir, enabled=lead) as claim:
    plan = resume.plan_resume(workdir, config, allow_resume_changes)
    if plan.changes and lead:
      print(resume.describe_changes(plan), flush=True)
    if plan.complete:
      print(f"already complete at step {plan.start_step}: {workdir} is left as it is. To "
            f"train again, pass a new --workdir (or raise train.steps with "
            f"--allow_resume_changes to continue this run)")
      return RunResult("completed", plan.summary, already_complete=True)
    if plan.diverged:  # the same settings would diverge again, at the same step
      if lead:
        print(resume.diverged_advice(plan, workdir, config.train.learning_rate), flush=True)
      return RunResult("diverged", plan.summary, already_complete=True)
    started = time.time()
    signals_lib.set_phase("preparing data")
    prepared = prepare_data(config, workdir=workdir)
    signals_lib.check()
    signals_lib.set_phase("preparing the evaluation and the model")
    ev = make_eval(config, cfg, prepared, mesh)
    models = build(cfg, mesh)
    clock = history.Clock(workdir, models.dirs, started)
    state = restore_or_init(config, models, workdir, plan.start_step)
    signals_lib.check()
    claim.started()  # from here on the workdir is the run's, whatever happens
    if lead:
      resume.record_start(workdir, config, plan, {
          **dataclasses.asdict(prepared),
          "tokenizer_sha256": files.sha256(prepared.tokenizer_path)})
    status, state, alive, evals = train_loop(config, cfg, models, state, ev, prepared,
                                             workdir, plan.start_step, clock)
    members = summaries(config, cfg, models, status, state, alive, evals, ev, prepared,
                        workdir, clock)
    if status == "completed" and config.sample.num_samples > 0 and not models.stacked:
      params = sharding.gather(state["params"])  # every process takes part in the gather
      if lead:  # (a group's members write none: a sweep compares their losses)
        members[0]["samples"] = runs.write_samples(params, cfg, prepared.tokenizer_path,
                                                   config.sample, workdir, config.train.seed)
    if lead:
      for d, summary in zip(models.dirs, members):
        plots.plot_losses(d, ev.unigram)
        history.write_summary(d, summary)
    return RunResult(status, members[0], state, members=members)


def train_and_evaluate(config, workdir: str, allow_resume_changes: bool = False) -> RunResult:
  """Train ``config`` in ``workdir``; resume if it holds a checkpoint (``run``)."""
  result = run(config, workdir, lambda cfg, mesh: single_run(config, cfg, mesh, workdir),
               allow_resume_changes)
  if result.already_complete:
    params = runs.load_run(workdir)[0]  # read only: callers may sample from the result
    result.state = {"step": result.summary["steps"], "params": params}
  return result


# ----------------------------------------------------------------------------- the loop


class Logger:
  """Turns the step metrics of a log window into a row per member: metrics.jsonl, the bar,
  stdout."""

  def __init__(self, config, cfg: model.ModelConfig, models: Models, start_step: int,
               clock: history.Clock):
    t, lead = config.train, sharding.is_lead()
    self.models, self.clock, self.steps = models, clock, t.steps
    self.writers = [metrics_lib.Writer(d, enabled=lead, tensorboard=models.tensorboard)
                    for d in models.dirs]
    self.tokens_per_step = t.batch_size * cfg.block_size
    # The program's FLOPs per token of one member: all members run in it.
    self.flops_per_token = models.n * model.flops_per_token(cfg)
    peak = metrics_lib.peak_flops(jax.devices()[0])
    # The peak of the devices the program runs on (a group's: one): MFU is per device.
    self.peak = peak and peak * models.n_devices
    self.window, self.last = [], (time.time(), start_step)
    self.measured = False  # the first row of a segment prints the measured speed
    self.bar = tqdm(total=t.steps, initial=start_step, desc="train", unit="step",
                    disable=None if lead else True, dynamic_ncols=True)
    # Where stdout is not a terminal (CI, nohup, a log file) or tqdm shows nothing (its
    # stderr is not one either), print a line per row: the log says how the run goes.
    self.print_rows = lead and (self.bar.disable or not sys.stdout.isatty())

  def log(self, step: int, alive: np.ndarray) -> None:
    """One row per member still training: the window's mean loss and gradient norm."""
    host = jax.device_get(self.window)
    now = time.time()
    rate = (step - self.last[1]) * self.tokens_per_step / max(now - self.last[0], 1e-9)
    loss = np.mean([per_member(h["loss"]) for h in host], axis=0)
    grad_norm = np.mean([per_member(h["grad_norm"]) for h in host], axis=0)
    z_loss = np.mean([per_member(h["z_loss"]) for h in host], axis=0) if "z_loss" in host[0] else None
    lr = self.models.learning_rate(step - 1)
    for i in np.flatnonzero(alive):
      row = {"loss": float(loss[i]), "lr": float(lr[i]), "grad_norm": float(grad_norm[i]),
             "tokens_per_s": rate, "wall_time_s": self.clock.seconds()}
      if z_loss is not None:  # the z-loss term, apart from the cross-entropy
        row["z_loss"] = float(z_loss[i])
      if self.peak:
        row["mfu"] = metrics_lib.mfu(rate, self.flops_per_token, self.peak)
      self.writers[i].write(step, row)
    live = np.flatnonzero(alive)
    self.bar.set_postfix(loss=f"{np.mean(loss[live]):.3f}", tok_s=f"{rate * len(live):,.0f}")
    if not self.measured and sharding.is_lead():
      self.measured = True
      per_step = max(now - self.last[0], 1e-9) / max(step - self.last[1], 1)
      tqdm.write(forecast.measured(per_step, rate * len(live), self.steps - step))
    if self.print_rows:
      i = live[0]
      what = (f"loss {loss[i]:.4f}, lr {lr[i]:.3g}, grad_norm {grad_norm[i]:.3f}"
              if self.models.n == 1 else "loss " + ", ".join(
                  f"{os.path.basename(self.models.dirs[j])} {loss[j]:.4f}" for j in live))
      print(f"step {step}/{self.steps}: {what}, {rate * len(live):,.0f} tokens/s", flush=True)
    self.window, self.last = [], (now, step)

  def restart_clock(self) -> None:
    """The speed is measured from now (not over compilation and the step-0 evaluation)."""
    self.last = (time.time(), self.last[1])

  def close(self) -> None:
    self.bar.close()
    for w in self.writers:
      w.close()


@dataclasses.dataclass
class Evals:
  """Each member's evaluations in this segment: the first (step 0) and the newest."""
  initial: np.ndarray | None
  last: np.ndarray  # val loss (nan: none yet)
  last_step: np.ndarray  # its step (-1: none yet)

  @classmethod
  def empty(cls, n: int) -> "Evals":
    return cls(None, np.full(n, np.nan), np.full(n, -1))


def train_loop(config, cfg, models: Models, state, ev: Eval, prepared, workdir: str,
               start_step: int, clock: history.Clock) -> tuple:
  """Steps ``start_step + 1 .. train.steps``: ``(status, state, alive, evals)``.

  ``alive[i]``: member i has not diverged. The loop stops when none is left, on a signal
  (after saving) or at ``train.steps``.
  """
  t = config.train
  mngr = ckpt.manager(f"{workdir}/checkpoints", config.checkpoint.every, config.checkpoint.keep)
  log = Logger(config, cfg, models, start_step, clock)
  alive = per_member(state["good"]).copy()
  evals = Evals.empty(models.n)
  diag = None
  if config.diagnostics.enabled:
    diag = diagnostics.Recorder(config.diagnostics, cfg, ev.first_batch, models.dirs,
                                models.stacked, last_step=t.steps)
  status, previous = "completed", None
  with signals_lib.StopSignals() as signals, Batches(config, cfg, prepared, models,
                                                     start_step) as batches:
    batch = next(batches) if start_step < t.steps else None
    if batch is not None:
      step_fn, eval_fn, seconds = forecast.compile_programs(models.step, models.evaluate, state,
                                                            batch, ev.arrays[0])
      models = dataclasses.replace(models, step=step_fn, evaluate=eval_fn)
      if sharding.is_lead():
        tqdm.write(forecast.estimate(cfg, t, models.n, models.n_devices, start_step, seconds,
                                     eval_at_start=start_step == 0))
    try:
      if start_step == 0:
        evals.initial = evaluate(models, state["params"], ev, log.writers, 0, alive, evals)
        if diag:
          diag.record(0, state["params"], alive=alive)
    except signals_lib.Interrupted:
      status = "interrupted"  # nothing trained yet: nothing to save
    log.restart_clock()
    for step in range(start_step + 1, t.steps + 1) if status == "completed" else ():
      signals_lib.set_phase(f"training (step {step})")
      if step > start_step + 1:
        batch = next(batches)
      before = diag.snapshot(state["params"]) if diag and diag.wants_snapshot(step) else None
      state, m = models.step(state, batch)
      log.window.append(m)
      stop = signals_lib.stop_requested(signals, step, t.log_every)
      saving = step == t.steps or stop or mngr.should_save(step)
      logging = step % t.log_every == 0 or saving
      evaluating = step % t.eval_every == 0 or step == t.steps
      # Divergence, read one step late: the previous step has finished by now, so the host
      # does not wait on this one, except where it waits anyway (logs, evaluations, saves).
      flags = m if logging or evaluating else previous
      if flags is not None:
        alive &= per_member(flags["good"])
      previous = m
      if not alive.any():  # nothing left to train; nothing diverged is saved
        status = "diverged"
        break
      if diag:
        diag.record(step, state["params"], before, alive)
      if logging:
        log.log(step, alive)
      log.bar.update(1)
      if evaluating:
        try:
          evaluate(models, state["params"], ev, log.writers, step, alive, evals)
        except signals_lib.Interrupted:  # stopped between its batches: save the step
          stop = saving = True
      if saving:
        signals_lib.set_phase(f"saving the checkpoint of step {step}")
        ckpt.save(mngr, step, state, force=True)
      if stop:
        status = "interrupted"
        break
  if status == "completed" and (evals.last_step[alive] != t.steps).any():
    # Finished before, stopped before its summary: evaluate the final state now.
    evaluate(models, state["params"], ev, log.writers, t.steps, alive, evals)
  log.close()
  mngr.close()
  if diag:
    diag.close()
  return status, state, alive, evals


class Batches:
  """The next training batch of every member: one prefetching loader per distinct seed."""

  def __init__(self, config, cfg: model.ModelConfig, prepared, models: Models,
               start_step: int):
    t = config.train
    self.models = models
    # This process's rows as A microbatches; the microbatches of all processes together
    # hold the global batch's rows (grouped differently than with one process, which
    # leaves the averaged gradient unchanged: every microbatch has B/A rows).
    self.shape = (t.grad_accum_steps, -1, cfg.block_size + 1)
    self.loaders = {seed: loader_lib.Loader(prepared.train_path, t.batch_size, cfg.block_size,
                                          seed, start_step=start_step,
                                          prefetch=config.data.prefetch)
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


def evaluate(models: Models, params, ev: Eval, writers, step: int, alive: np.ndarray,
             evals: Evals) -> np.ndarray:
  """Each member's mean validation loss over the fixed batches; logged (with bits per byte)
  and recorded in ``evals`` for the members still training."""
  signals_lib.set_phase(f"evaluating step {step}")
  lead = sharding.is_lead()
  if step == 0 and lead:
    tqdm.write(f"step 0: evaluating on {len(ev.arrays)} validation batches")
  losses = []
  # A SIGINT is read between batches (one batch is a single jitted call).
  for b in tqdm(ev.arrays, desc=f"eval step {step}", unit="batch", leave=False,
                disable=None if lead else True, dynamic_ncols=True):
    losses.append(per_member(models.evaluate(params, b)))
    signals_lib.check()
  val = np.mean(losses, axis=0)
  for i in np.flatnonzero(alive):
    writers[i].write(step, {"val_loss": float(val[i]), "val_bpb": ev.bpb(float(val[i]))})
  evals.last[alive], evals.last_step[alive] = val[alive], step
  live = np.flatnonzero(alive)
  if models.n == 1:
    bpb = ev.bpb(float(val[0]))
    what = f"{val[0]:.4f}" + ("" if bpb is None else f", {bpb:.4f} bits/byte")
  else:
    what = ", ".join(f"{os.path.basename(models.dirs[i])} {val[i]:.4f}" for i in live)
  tqdm.write(f"step {step}: val_loss {what} (unigram {ev.unigram:.4f})")
  return val


# ----------------------------------------------------------------------------- the end of a run


def summaries(config, cfg, models: Models, status: str, state, alive: np.ndarray,
              evals: Evals, ev: Eval, prepared, workdir: str, clock: history.Clock) -> list[dict]:
  """Each member's ``summary.json`` (README, Training, "What a run writes")."""
  steps = per_member(state["step"])
  latest, segments = resume.latest_checkpoint(workdir), history.config_segments(workdir)
  if status == "diverged" and sharding.is_lead():
    tqdm.write(f"diverged: non-finite loss, gradient or parameters at update "
               f"{int(steps.max()) + 1}; kept the last good checkpoint (step {latest})")
  out = []
  for i, d in enumerate(models.dirs):
    member = status if alive[i] else "diverged"
    rows = metrics_lib.read_metrics(d)
    last, last_step = _last_eval(rows, evals, i, int(steps[i]))
    final = last if member == "completed" else None
    initial = evals.initial[i] if evals.initial is not None else next(
        (r["val_loss"] for r in rows if r["step"] == 0 and "val_loss" in r), None)
    train_losses = [r["loss"] for r in rows if "loss" in r]
    out.append({
        "status": member, "exit_code": EXIT_CODES[member], "steps": int(steps[i]),
        "diverged_at_step": int(steps[i]) + 1 if member == "diverged" else None,
        "final_train_loss": train_losses[-1] if train_losses else None,
        "final_val_loss": final, "last_val_loss": last, "last_val_loss_step": last_step,
        "initial_val_loss": None if initial is None else float(initial),
        "unigram_val_loss": ev.unigram, "val_bpb": ev.bpb(final),
        "val_gain_over_unigram": None if final is None else ev.unigram - final,
        "wall_time_s": clock.seconds(), "n_params": model.count_params(cfg),
        "tokens_per_step": config.train.batch_size * cfg.block_size,
        "corpus_fingerprint": prepared.fingerprint, "latest_checkpoint": latest,
        "config_segments": segments, **models.summary_fields[i]})
  return out


def _last_eval(rows: list[dict], evals: Evals, i: int, steps: int) -> tuple:
  """Member i's newest evaluation before it stopped: this segment's, or an earlier one's."""
  if evals.last_step[i] >= 0:
    return float(evals.last[i]), int(evals.last_step[i])
  earlier = [r for r in rows if "val_loss" in r and r["step"] <= steps]
  return (earlier[-1]["val_loss"], earlier[-1]["step"]) if earlier else (None, None)

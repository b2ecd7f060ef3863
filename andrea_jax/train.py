"""Training: the optimizer, the jitted train and eval steps, and ``train_and_evaluate``.

``train_and_evaluate`` reads top to bottom: start the run (check the config, claim the
workdir, prepare the data, restore or initialise the state), make the step functions,
run the loop (log a row, evaluate, checkpoint, stop on divergence or signal), and finish
the run (summary, plot, samples). The run directory's rules (resume, history, lock) are
in ``runs.py``, metrics in ``metrics.py``, signals in ``signals.py``, the plot in ``plots.py``.

Exit codes of a run (``RunResult.exit_code``, returned by ``python -m experiments.run``):
0 completed (or already complete), 3 diverged (non-finite loss or gradient; the last good
checkpoint is kept), 4 interrupted by SIGTERM/SIGINT (a checkpoint was saved; rerun the
same command to resume).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from andrea_jax import checkpoint as ckpt
from andrea_jax import data as data_lib
from andrea_jax import diagnostics
from andrea_jax import errors
from andrea_jax import metrics as metrics_lib
from andrea_jax import model
from andrea_jax import mup
from andrea_jax import plots
from andrea_jax import runs
from andrea_jax import sharding
from andrea_jax import signals as signals_lib
from andrea_jax import tokenizer as tokenizer_lib
# Kept importable from here (notebooks, experiments and tests use these names).
from andrea_jax.metrics import peak_flops, read_metrics  # pylint: disable=unused-import
from andrea_jax.runs import load_run, write_samples  # pylint: disable=unused-import

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
                             f"< train.steps={t.steps}")
  if not 0 <= t.min_lr_ratio <= 1:
    raise errors.ConfigError(f"train.min_lr_ratio={t.min_lr_ratio}: expected a value in [0, 1]")
  if not t.z_loss >= 0:
    raise errors.ConfigError(f"train.z_loss={t.z_loss!r}: expected 0 (off) or a positive weight "
                             f"such as 1e-4")


def make_schedule(t) -> optax.Schedule:
  """Linear warmup to the peak, then cosine decay to ``learning_rate * min_lr_ratio``.

  Update ``k`` (0, 1, ...) of the warmup uses ``peak * (k + 1) / (warmup_steps + 1)``, as
  nanoGPT does: the first update already moves the parameters, and update ``warmup_steps``
  is the first at the peak. (optax's linear warmup from ``peak / (warmup + 1)`` is exactly
  this line.)
  """
  peak = t.learning_rate
  return optax.warmup_cosine_decay_schedule(
      init_value=peak / (t.warmup_steps + 1), peak_value=peak, warmup_steps=t.warmup_steps,
      decay_steps=t.steps, end_value=peak * t.min_lr_ratio)


def decay_mask(params) -> Any:
  return jax.tree_util.tree_map_with_path(lambda path, _: path[-1].key in DECAYED, params)


def make_optimizer(t, cfg: model.ModelConfig | None = None) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW with decoupled decay on matrices and embeddings.

  Under muP (``cfg.parametrization == "mup"``) AdamW's updates then get the per-parameter
  learning-rate factors of ``mup.scale_learning_rates``.
  """
  adamw = optax.adamw(make_schedule(t), b1=t.b1, b2=t.b2, eps=t.eps,
                      weight_decay=t.weight_decay, mask=decay_mask)
  if cfg is not None and cfg.parametrization == "mup":
    adamw = optax.chain(adamw, mup.scale_learning_rates(cfg))
  return optax.chain(clip_by_global_norm(t.grad_clip), adamw) if t.grad_clip > 0 else adamw


# ----------------------------------------------------------------------------- state and steps


def init_state(cfg: model.ModelConfig, optimizer, key: jax.Array) -> dict:
  """The whole training state as one pytree (what a checkpoint holds).

  ``good`` turns False at the first non-finite loss or gradient and stays False: from
  then on updates are skipped, so the state holds the last good parameters.
  """
  params = model.init_params(cfg, key)
  return {"step": jnp.zeros((), jnp.int32), "params": params,
          "opt_state": optimizer.init(params), "good": jnp.ones((), bool)}


def train_step(state: dict, batch_ABT: jax.Array, cfg: model.ModelConfig, optimizer,
               schedule, z_loss: float = 0.0) -> tuple[dict, dict]:
  """One optimizer update from ``A`` microbatches ``[A, B/A, T+1]`` (gradients averaged).

  The objective is the cross-entropy plus ``z_loss * log(Z)^2`` (``model.loss_terms``); the
  metrics report them apart: ``loss`` is the cross-entropy, ``z_loss`` the auxiliary term
  (only when ``z_loss > 0``).

  Lean on purpose (docs/performance.md): one microbatch is a plain ``value_and_grad``;
  more are summed by a ``lax.scan`` whose carry starts at the first one's gradients. The
  gradient norm is computed once and handed to the clipping (``clip_by_global_norm``). A
  non-finite loss or norm skips the update in a ``lax.cond``: the state is left as it was
  (``good`` turns False for ever) without a select over every leaf of the state.
  """
  (_, terms), grads = _mean_loss_and_grads(state["params"], batch_ABT, cfg, z_loss)
  loss = terms["nll"]
  grad_norm = optax.tree.norm(grads)
  ok = state["good"] & jnp.isfinite(loss) & jnp.isfinite(grad_norm)

  def update(state):
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"],
                                          grad_norm=grad_norm)
    return {"step": state["step"] + 1, "params": optax.apply_updates(state["params"], updates),
            "opt_state": opt_state, "good": jnp.ones((), bool)}

  def skip(state):
    return {**state, "good": jnp.zeros((), bool)}

  new_state = jax.lax.cond(ok, update, skip, state)
  metrics = {"loss": loss, "grad_norm": grad_norm, "lr": schedule(state["step"]),
             **({"z_loss": terms["z_loss"]} if z_loss else {})}
  return new_state, metrics


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


# ----------------------------------------------------------------------------- the run


@dataclasses.dataclass
class RunResult:
  status: str
  summary: dict
  # The final training state; for a run found already complete, its step and params only.
  state: Any = None
  # True when the workdir already held the finished run: nothing was trained or written.
  already_complete: bool = False

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


def check_config(config) -> tuple[model.ModelConfig, Any]:
  """The model config and device mesh of ``config``, or a ConfigError naming what is wrong."""
  cfg = model.resolve_auto(model.ModelConfig(**config.model))
  t = config.train
  check_train_config(t)
  mesh = sharding.make_mesh(config.mesh)
  sharding.check_batch(t.batch_size, t.grad_accum_steps, mesh)
  if config.diagnostics.enabled and jax.process_count() > 1:
    raise errors.ConfigError(
        f"diagnostics.enabled=True runs in one process only (this run has "
        f"{jax.process_count()}); set --config.diagnostics.enabled=False")
  return cfg, mesh


def prepare_data(config) -> data_lib.PreparedData:
  """Process 0 prepares (or finds) the cached data first; the others then read its cache."""
  if sharding.is_lead():
    prepared = data_lib.prepare(config)
  sharding.barrier("andrea_jax: data prepared")
  return prepared if sharding.is_lead() else data_lib.prepare(config)


def make_eval(config, cfg: model.ModelConfig, prepared: data_lib.PreparedData, mesh) -> Eval:
  t = config.train
  train_tokens = data_lib.read_shard(prepared.train_path)
  val_tokens = data_lib.read_shard(prepared.val_path)
  eval_set = data_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                   name=f"validation shard {prepared.val_path!r}")
  # Each process holds its own rows of every eval batch, like the loader's train batches.
  local = data_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                process_index=jax.process_index(),
                                process_count=jax.process_count())
  batch = sharding.batch_sharding(mesh, batch_dim=0, ndim=2)
  tok = tokenizer_lib.load(prepared.tokenizer_path, cfg.vocab_size)
  return Eval(arrays=[sharding.global_batch(b, batch, batch_dim=0) for b in local],
              unigram=unigram_loss(train_tokens, eval_set, cfg.vocab_size),
              targets=eval_set[..., 1:], token_bytes=metrics_lib.token_bytes(tok, cfg.vocab_size),
              first_batch=eval_set[0])


def restore_or_init(config, cfg: model.ModelConfig, mesh, optimizer, workdir: str,
                    resuming: bool) -> dict:
  """The latest checkpoint of ``workdir`` on this run's mesh, or a fresh state."""
  abstract = abstract_state(cfg, optimizer, config.train.seed)
  shardings = sharding.state_shardings(abstract, mesh)
  if resuming:
    mngr = ckpt.manager(f"{workdir}/checkpoints", config.checkpoint.every, config.checkpoint.keep)
    try:  # straight onto this run's mesh, whichever mesh wrote the checkpoint
      state = ckpt.restore(mngr, sharding.with_shardings(abstract, shardings))
    finally:
      mngr.close()
    print(f"resumed {workdir} from step {int(state['step'])}")
    return state
  init = jax.jit(init_state, static_argnums=(0, 1), out_shardings=shardings)
  state = init(cfg, optimizer, jax.random.key(config.train.seed))
  if config.train.get("init_from"):  # fine-tune a Hugging Face GPT-2 directory (README, interop)
    from andrea_jax.interop import hf_gpt2  # pylint: disable=import-outside-toplevel
    params = sharding.put(hf_gpt2.init_from(config), shardings["params"])
    opt_state = jax.jit(optimizer.init, out_shardings=shardings["opt_state"])(params)
    state = {**state, "params": params, "opt_state": opt_state}
    print(f"initialised the parameters from {config.train.init_from}")
  return state


def make_step_fns(cfg: model.ModelConfig, optimizer, schedule, mesh, state,
                  z_loss: float = 0.0) -> tuple:
  """The jitted train step (donating the state) and a function: params -> mean val loss."""
  # Explicit shardings in and out; XLA's partitioner inserts the collectives. Batches are
  # [A, B/A, T+1] (train; the rows of each microbatch are split) and [B, T+1] (eval).
  shardings = jax.tree.map(lambda a: a.sharding, state)
  replicated = sharding.replicated(mesh)
  train_batch = sharding.batch_sharding(mesh, batch_dim=1, ndim=3)
  eval_batch = sharding.batch_sharding(mesh, batch_dim=0, ndim=2)
  step_fn = jax.jit(functools.partial(train_step, cfg=cfg, optimizer=optimizer, schedule=schedule,
                                      z_loss=z_loss),
                    in_shardings=(shardings, train_batch), out_shardings=(shardings, replicated),
                    donate_argnums=0)
  eval_fn = jax.jit(functools.partial(eval_step, cfg=cfg),
                    in_shardings=(shardings["params"], eval_batch), out_shardings=replicated)
  return step_fn, eval_fn, train_batch


class Logger:
  """Turns the step metrics of a log window into one row: metrics.jsonl, the bar, stdout."""

  def __init__(self, config, cfg: model.ModelConfig, workdir: str, start_step: int):
    t, lead = config.train, sharding.is_lead()
    self.writer = metrics_lib.Writer(workdir, enabled=lead)
    self.tokens_per_step = t.batch_size * cfg.block_size
    self.flops_per_token = model.flops_per_token(cfg)
    peak = peak_flops(jax.devices()[0])
    self.peak = peak and peak * jax.device_count()  # the whole mesh's peak: MFU is per device
    self.window, self.last = [], (time.time(), start_step)
    self.bar = tqdm(total=t.steps, initial=start_step, desc="train", unit="step",
                    disable=None if lead else True, dynamic_ncols=True)
    # Where stdout is not a terminal (CI, nohup, a log file) or tqdm shows nothing (its
    # stderr is not one either), print a line per row: the log says how the run goes.
    self.print_rows = lead and (self.bar.disable or not sys.stdout.isatty())
    self.steps = t.steps

  def log(self, step: int) -> dict:
    host = jax.device_get(self.window)
    now = time.time()
    rate = (step - self.last[1]) * self.tokens_per_step / max(now - self.last[0], 1e-9)
    row = {"loss": float(np.mean([h["loss"] for h in host])), "lr": float(host[-1]["lr"]),
           "grad_norm": float(np.mean([h["grad_norm"] for h in host])), "tokens_per_s": rate}
    if "z_loss" in host[0]:
      row["z_loss"] = float(np.mean([h["z_loss"] for h in host]))
    if self.peak:
      row["mfu"] = metrics_lib.mfu(rate, self.flops_per_token, self.peak)
    self.writer.write(step, row)
    self.bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{rate:,.0f}")
    if self.print_rows:
      print(f"step {step}/{self.steps}: loss {row['loss']:.4f}, lr {row['lr']:.3g}, "
            f"grad_norm {row['grad_norm']:.3f}, {rate:,.0f} tokens/s", flush=True)
    self.window, self.last = [], (now, step)
    return row

  def close(self) -> None:
    self.bar.close()
    self.writer.close()


def train_and_evaluate(config, workdir: str, allow_resume_changes: bool = False) -> RunResult:
  """Train ``config`` in ``workdir``; resume if it holds a checkpoint. Returns the result.

  A resume that changes training settings is refused unless ``allow_resume_changes``
  (``runs.py``; README, Training, "Resume"); a workdir whose run already finished is left
  untouched.
  """
  cfg, mesh = check_config(config)
  lead = sharding.is_lead()  # every process trains; process 0 alone writes the run's files
  with runs.claim(workdir, enabled=lead) as claim:
    plan = runs.plan_resume(workdir, config, allow_resume_changes)
    if plan.complete:
      print(f"already complete at step {plan.start_step}: {workdir} is left as it is. To "
            f"train again, pass a new --workdir (or raise train.steps with "
            f"--allow_resume_changes to continue this run)")
      params = load_run(workdir)[0]  # read only: callers may sample from the result
      return RunResult("completed", plan.summary, {"step": plan.start_step, "params": params},
                       already_complete=True)
    started = time.time()
    prepared = prepare_data(config)
    ev = make_eval(config, cfg, prepared, mesh)
    optimizer, schedule = make_optimizer(config.train, cfg), make_schedule(config.train)
    state = restore_or_init(config, cfg, mesh, optimizer, workdir, plan.start_step > 0)
    claim.started()  # from here on the workdir is the run's, whatever happens
    if lead:
      runs.record_start(workdir, config, plan, dataclasses.asdict(prepared))
    step_fns = make_step_fns(cfg, optimizer, schedule, mesh, state, config.train.z_loss)
    status, state, val_loss = train_loop(config, cfg, workdir, state, step_fns, ev, prepared)
    return finish_run(config, cfg, workdir, status, state, val_loss, ev, prepared, step_fns,
                      started)


def train_loop(config, cfg, workdir, state, step_fns, ev: Eval, prepared) -> tuple:
  """Steps from the state's step to ``train.steps``: ``(status, state, last val loss)``."""
  t = config.train
  step_fn, eval_fn, train_batch = step_fns
  start_step = int(state["step"])
  mngr = ckpt.manager(f"{workdir}/checkpoints", config.checkpoint.every, config.checkpoint.keep)
  log = Logger(config, cfg, workdir, start_step)
  diag = None
  if config.diagnostics.enabled:
    diag = diagnostics.Recorder(config.diagnostics, cfg, ev.first_batch, workdir)
    if start_step == 0:
      diag.record(0, state["params"])
  loader = data_lib.Loader(prepared.train_path, t.batch_size, cfg.block_size,
                           config.data.shuffle_seed,
                           start_step=start_step, prefetch=config.data.prefetch)
  status, val_loss = "completed", None
  with signals_lib.StopSignals() as signals, loader:
    for step in range(start_step + 1, t.steps + 1):
      # This process's rows as A microbatches; the microbatches of all processes together
      # hold the global batch's rows (grouped differently than with one process, which
      # leaves the averaged gradient unchanged: every microbatch has B/A rows).
      local = next(loader).reshape(t.grad_accum_steps, -1, cfg.block_size + 1)
      batch = sharding.global_batch(local, train_batch, batch_dim=1)
      before = diag.snapshot(state["params"]) if diag and diag.wants_snapshot(step) else None
      state, m = step_fn(state, batch)
      if diag:
        diag.record(step, state["params"], before)
      log.window.append(m)
      stop = signals_lib.stop_requested(signals, step, t.log_every)
      saving = step == t.steps or stop or mngr.should_save(step)
      if step % t.log_every == 0 or saving:
        if not bool(state["good"]):  # checked before every log and save: no NaN checkpoint
          status = "diverged"
          break
        log.log(step)
      log.bar.update(1)
      if step % t.eval_every == 0 or step == t.steps:
        val_loss = evaluate(eval_fn, state["params"], ev, log.writer, step)
      if saving:
        ckpt.save(mngr, step, state, force=True)
      if stop:
        status = "interrupted"
        break
  log.close()
  mngr.close()
  if diag:
    diag.close()
  return status, state, val_loss


def evaluate(eval_fn: Callable, params, ev: Eval, writer, step: int) -> float:
  """Mean validation loss over the fixed batches; logged with bits per byte."""
  val_loss = float(np.mean([eval_fn(params, b) for b in ev.arrays]))
  bpb = metrics_lib.bits_per_byte(val_loss, ev.targets, ev.token_bytes)
  writer.write(step, {"val_loss": val_loss, "val_bpb": bpb})
  bits = "" if bpb is None else f", {bpb:.4f} bits/byte"
  tqdm.write(f"step {step}: val_loss {val_loss:.4f}{bits} (unigram {ev.unigram:.4f})")
  return val_loss


def finish_run(config, cfg, workdir, status, state, val_loss, ev: Eval, prepared, step_fns,
               started: float) -> RunResult:
  """The summary, the loss plot and, for a completed run, samples."""
  lead, final_step = sharding.is_lead(), int(state["step"])
  latest = runs.latest_checkpoint(workdir)
  if status == "diverged":
    tqdm.write(f"diverged: non-finite loss or gradient at update {final_step + 1}; "
               f"kept the last good checkpoint (step {latest})")
  if status == "completed" and val_loss is None:  # finished before, stopped before its summary
    writer = metrics_lib.Writer(workdir, lead)
    val_loss = evaluate(step_fns[1], state["params"], ev, writer, final_step)
    writer.close()
  train_losses = [r["loss"] for r in read_metrics(workdir) if "loss" in r]
  summary = {
      "status": status, "exit_code": EXIT_CODES[status], "steps": final_step,
      "diverged_at_step": final_step + 1 if status == "diverged" else None,
      "final_train_loss": train_losses[-1] if train_losses else None,
      "final_val_loss": val_loss, "unigram_val_loss": ev.unigram,
      "val_bpb": None if val_loss is None else metrics_lib.bits_per_byte(
          val_loss, ev.targets, ev.token_bytes),
      "val_gain_over_unigram": None if val_loss is None else ev.unigram - val_loss,
      "wall_time_s": time.time() - started, "n_params": model.count_params(cfg),
      "tokens_per_step": config.train.batch_size * cfg.block_size,
      "corpus_fingerprint": prepared.fingerprint, "latest_checkpoint": latest,
      "config_segments": runs.config_segments(workdir),
  }
  if status == "completed" and config.sample.num_samples > 0:
    params = sharding.gather(state["params"])  # every process takes part in the gather
    if lead:
      summary["samples"] = write_samples(params, cfg, prepared.tokenizer_path, config.sample,
                                         workdir, config.train.seed)
  if lead:
    plots.plot_losses(workdir, ev.unigram)
    runs.write_summary(workdir, summary)
  return RunResult(status=status, summary=summary, state=state)

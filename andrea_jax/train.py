"""Training: the optimizer, the jitted train and eval steps, and ``train_and_evaluate``.

The loop reads top to bottom in sections: config checks, data, state (fresh or resumed),
the step functions, the loop (log, evaluate, checkpoint, stop on divergence or signal),
and the end of the run (summary, plot, samples).

Exit codes of a run (``RunResult.exit_code``, returned by ``python -m experiments.run``):
0 completed, 3 diverged (non-finite loss or gradient; the last good checkpoint is kept),
4 interrupted by SIGTERM/SIGINT (a checkpoint was saved; rerun the same command to resume).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import signal
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from andrea_jax import checkpoint as ckpt
from andrea_jax import data as data_lib
from andrea_jax import diagnostics
from andrea_jax import model
from andrea_jax import sharding
from andrea_jax import tokenizer as tokenizer_lib

EXIT_COMPLETED, EXIT_DIVERGED, EXIT_INTERRUPTED = 0, 3, 4
EXIT_CODES = {"completed": EXIT_COMPLETED, "diverged": EXIT_DIVERGED, "interrupted": EXIT_INTERRUPTED}

# Peak dense bf16 FLOP/s by device kind, for the MFU estimate on accelerators (brief, sec. 5).
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "B200": 2250e12, "A100": 312e12, "L4": 121e12,
              "TPU v4": 275e12, "TPU v5 lite": 197e12, "TPU v5p": 459e12, "TPU v6 lite": 918e12}

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
      raise ValueError(f"train.{name}={t[name]!r}: expected a positive value")
  if t.batch_size % t.grad_accum_steps:
    raise ValueError(f"train.batch_size={t.batch_size} is not divisible by train.grad_accum_steps="
                     f"{t.grad_accum_steps}: choose a batch size that is a multiple of it")
  if not 0 <= t.warmup_steps < t.steps:
    raise ValueError(f"train.warmup_steps={t.warmup_steps}: expected 0 <= warmup_steps < "
                     f"train.steps={t.steps}")
  if not 0 <= t.min_lr_ratio <= 1:
    raise ValueError(f"train.min_lr_ratio={t.min_lr_ratio}: expected a value in [0, 1]")


def make_schedule(t) -> optax.Schedule:
  """Linear warmup from 0 to the peak, then cosine decay to ``learning_rate * min_lr_ratio``."""
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=t.learning_rate, warmup_steps=t.warmup_steps,
      decay_steps=t.steps, end_value=t.learning_rate * t.min_lr_ratio)


def decay_mask(params) -> Any:
  return jax.tree_util.tree_map_with_path(lambda path, _: path[-1].key in DECAYED, params)


def make_optimizer(t) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW with decoupled decay on matrices and embeddings."""
  adamw = optax.adamw(make_schedule(t), b1=t.b1, b2=t.b2, eps=t.eps,
                      weight_decay=t.weight_decay, mask=decay_mask)
  return optax.chain(optax.clip_by_global_norm(t.grad_clip), adamw) if t.grad_clip > 0 else adamw


# ----------------------------------------------------------------------------- state and steps


def init_state(cfg: model.ModelConfig, optimizer, key: jax.Array) -> dict:
  """The whole training state as one pytree (what a checkpoint holds).

  ``good`` turns False at the first non-finite loss or gradient and stays False: from
  then on updates are skipped, so the state holds the last good parameters.
  """
  params = model.init_params(cfg, key)
  return {"step": jnp.zeros((), jnp.int32), "params": params,
          "opt_state": optimizer.init(params), "rng": jax.random.key_data(key),
          "good": jnp.ones((), bool)}


def train_step(state: dict, batch_ABT: jax.Array, cfg: model.ModelConfig, optimizer,
               schedule) -> tuple[dict, dict]:
  """One optimizer update from ``A`` microbatches ``[A, B/A, T+1]`` (gradients averaged)."""
  grad_fn = jax.value_and_grad(model.loss_fn)

  def accumulate(carry, micro_BT):
    loss, grads = grad_fn(state["params"], micro_BT[:, :-1], micro_BT[:, 1:], cfg)
    return jax.tree.map(jnp.add, carry, (loss, grads)), None

  zeros = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, state["params"]))
  (loss, grads), _ = jax.lax.scan(accumulate, zeros, batch_ABT)
  loss, grads = jax.tree.map(lambda a: a / batch_ABT.shape[0], (loss, grads))
  grad_norm = optax.tree.norm(grads)
  updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
  ok = state["good"] & jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  new = {"step": state["step"] + 1, "params": optax.apply_updates(state["params"], updates),
         "opt_state": opt_state, "rng": state["rng"], "good": ok}
  keep_old = {**state, "good": ok}
  new_state = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, keep_old)
  metrics = {"loss": loss, "grad_norm": grad_norm, "lr": schedule(state["step"])}
  return new_state, metrics


def eval_step(params, batch_BT: jax.Array, cfg: model.ModelConfig) -> jax.Array:
  return model.loss_fn(params, batch_BT[:, :-1], batch_BT[:, 1:], cfg)


def unigram_loss(train_tokens: np.ndarray, eval_set: np.ndarray, vocab_size: int) -> float:
  """Cross-entropy (nats) of the add-one-smoothed token frequencies of the training split."""
  counts = np.bincount(np.asarray(train_tokens), minlength=vocab_size).astype(np.float64) + 1.0
  log_p = np.log(counts / counts.sum())
  return float(-log_p[eval_set[..., 1:]].mean())


# ----------------------------------------------------------------------------- run bookkeeping


@dataclasses.dataclass
class RunResult:
  status: str
  summary: dict
  state: Any = None

  @property
  def exit_code(self) -> int:
    return EXIT_CODES[self.status]


class _Signals:
  """Turns SIGTERM/SIGINT into a flag the loop checks after each step (main thread only)."""

  def __init__(self):
    self.received: int | None = None
    self._old = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._old[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, frame):
    self.received = signum

  def __exit__(self, *exc):
    for sig, handler in self._old.items():
      signal.signal(sig, handler)


class _Metrics:
  """``metrics.jsonl`` plus TensorBoard event files in the workdir (written by process 0 only)."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    if not enabled:
      return
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
    self.file = open(os.path.join(workdir, "metrics.jsonl"), "a", encoding="utf-8")
    self.tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def write(self, step: int, values: dict) -> None:
    if not self.enabled:
      return
    self.file.write(json.dumps({"step": step, **values}) + "\n")
    self.file.flush()
    for name, value in values.items():
      self.tb.add_scalar(name, value, step)

  def close(self) -> None:
    if self.enabled:
      self.file.close()
      self.tb.close()


def peak_flops(device) -> float | None:
  if device.platform == "cpu":
    return None
  return next((v for k, v in PEAK_FLOPS.items() if k.lower() in device.device_kind.lower()), None)


def read_metrics(workdir: str) -> list[dict]:
  """The lines of ``metrics.jsonl``; after a resume the newest value of each step wins."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  rows = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      row = json.loads(line)
      rows[(row["step"], tuple(sorted(row)))] = row
  return sorted(rows.values(), key=lambda r: r["step"])


def plot_losses(workdir: str, unigram: float | None) -> str:
  # A bare Figure, not pyplot: no global backend switch in the caller's notebook.
  from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel
  rows = read_metrics(workdir)
  fig = Figure(figsize=(7, 4))
  ax = fig.subplots()
  train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
  val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
  if train:
    ax.plot(*zip(*train), label="train", lw=1)
  if val:
    ax.plot(*zip(*val), "o-", label="validation")
  if unigram is not None:
    ax.axhline(unigram, color="gray", ls="--", label=f"unigram baseline ({unigram:.2f})")
  ax.set(xlabel="step", ylabel="cross-entropy (nats/token)", title=os.path.basename(workdir))
  ax.legend()
  fig.tight_layout()
  path = os.path.join(workdir, "loss.png")
  fig.savefig(path, dpi=120)
  return path


# ----------------------------------------------------------------------------- the loop


def abstract_state(cfg: model.ModelConfig, optimizer, seed: int) -> Any:
  return jax.eval_shape(lambda k: init_state(cfg, optimizer, k), jax.random.key(seed))


def prepare_data(config) -> data_lib.PreparedData:
  """Process 0 prepares (or finds) the cached data first; the others then read its cache."""
  if sharding.is_lead():
    prepared = data_lib.prepare(config)
  sharding.barrier("andrea_jax: data prepared")
  return prepared if sharding.is_lead() else data_lib.prepare(config)


def stop_requested(signals: "_Signals", step: int, every: int) -> bool:
  """Whether to save and stop after this step because of SIGTERM/SIGINT.

  Processes must agree, or one would enter the (collective) save while the others train
  on: with several, they compare their flags at log steps, where the loop syncs anyway.
  """
  if jax.process_count() == 1:
    return bool(signals.received)
  return step % every == 0 and sharding.any_process(bool(signals.received))


def train_and_evaluate(config, workdir: str) -> RunResult:
  """Train ``config`` in ``workdir``; resume if it holds a checkpoint. Returns the result."""
  # --- config -------------------------------------------------------------------------
  cfg = model.ModelConfig(**config.model)
  t = config.train
  check_train_config(t)
  mesh = sharding.make_mesh(config.mesh)
  sharding.check_batch(t.batch_size, t.grad_accum_steps, mesh)
  if config.diagnostics.enabled and jax.process_count() > 1:
    raise ValueError(f"diagnostics.enabled=True runs in one process only (this run has "
                     f"{jax.process_count()}); set --config.diagnostics.enabled=False")
  lead = sharding.is_lead()  # every process trains; process 0 alone writes the run's files
  os.makedirs(workdir, exist_ok=True)
  ckpt.check_resumable(workdir, config)
  if lead:
    ckpt.save_config(workdir, config)
  started = time.time()

  # --- data ---------------------------------------------------------------------------
  prepared = prepare_data(config)
  train_tokens = data_lib.read_shard(prepared.train_path)
  val_tokens = data_lib.read_shard(prepared.val_path)
  eval_set = data_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                   name=f"validation shard {prepared.val_path!r}")
  unigram = unigram_loss(train_tokens, eval_set, cfg.vocab_size)
  # Each process holds its own rows of every eval batch, like the loader's train batches.
  local_eval = data_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                     process_index=jax.process_index(),
                                     process_count=jax.process_count())
  if lead:
    with open(os.path.join(workdir, "data.json"), "w", encoding="utf-8") as f:
      json.dump(dataclasses.asdict(prepared), f, indent=2)

  # --- state --------------------------------------------------------------------------
  optimizer, schedule = make_optimizer(t), make_schedule(t)
  abstract = abstract_state(cfg, optimizer, t.seed)
  shardings = sharding.state_shardings(abstract, mesh)
  mngr = ckpt.manager(os.path.join(workdir, "checkpoints"), config.checkpoint.every,
                      config.checkpoint.keep)
  if mngr.latest_step() is not None:
    # Restored straight onto this run's mesh, whichever mesh wrote the checkpoint.
    state = ckpt.restore(mngr, sharding.with_shardings(abstract, shardings))
    print(f"resumed {workdir} from step {int(state['step'])}")
  else:
    init = jax.jit(init_state, static_argnums=(0, 1), out_shardings=shardings)
    state = init(cfg, optimizer, jax.random.key(t.seed))
    if t.get("init_from"):  # fine-tune a Hugging Face GPT-2 directory (README, interop)
      from andrea_jax.interop import hf_gpt2  # pylint: disable=import-outside-toplevel
      params = sharding.put(hf_gpt2.init_from(config), shardings["params"])
      opt_state = jax.jit(optimizer.init, out_shardings=shardings["opt_state"])(params)
      state = {**state, "params": params, "opt_state": opt_state}
      print(f"initialised the parameters from {t.init_from}")
  start_step = int(state["step"])

  # --- step functions -----------------------------------------------------------------
  # Explicit shardings in and out; XLA's partitioner inserts the collectives. Batches are
  # [A, B/A, T+1] (train; the rows of each microbatch are split) and [B, T+1] (eval).
  replicated = sharding.replicated(mesh)
  train_batch = sharding.batch_sharding(mesh, batch_dim=1, ndim=3)
  eval_batch = sharding.batch_sharding(mesh, batch_dim=0, ndim=2)
  step_fn = jax.jit(functools.partial(train_step, cfg=cfg, optimizer=optimizer, schedule=schedule),
                    in_shardings=(shardings, train_batch), out_shardings=(shardings, replicated),
                    donate_argnums=0)
  eval_fn = jax.jit(functools.partial(eval_step, cfg=cfg),
                    in_shardings=(shardings["params"], eval_batch), out_shardings=replicated)
  eval_arrays = [sharding.global_batch(b, eval_batch, batch_dim=0) for b in local_eval]
  evaluate = lambda params: float(np.mean([eval_fn(params, b) for b in eval_arrays]))

  # --- loop ---------------------------------------------------------------------------
  metrics = _Metrics(workdir, enabled=lead)
  tokens_per_step = t.batch_size * cfg.block_size
  flops_per_step = model.flops_per_token(cfg) * tokens_per_step
  peak = peak_flops(jax.devices()[0])
  peak = peak and peak * jax.device_count()  # the whole mesh's peak: MFU is per device
  status, val_loss, window, last_log = "completed", None, [], (time.time(), start_step)
  bar = tqdm(total=t.steps, initial=start_step, desc="train", unit="step",
             disable=None if lead else True, dynamic_ncols=True)
  loader = data_lib.Loader(prepared.train_path, t.batch_size, cfg.block_size,
                           config.data.shuffle_seed,
                           start_step=start_step, prefetch=config.data.prefetch)
  diag = None
  if config.diagnostics.enabled:
    diag = diagnostics.Recorder(config.diagnostics, cfg, eval_set[0], workdir)
    if start_step == 0:
      diag.record(0, state["params"])
  with _Signals() as signals, loader:
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
      window.append(m)
      last = step == t.steps
      stop = stop_requested(signals, step, t.log_every)
      saving = last or stop or mngr.should_save(step)
      if step % t.log_every == 0 or saving:
        # Checked before every log and save, so no checkpoint ever holds a diverged state.
        if not bool(state["good"]):
          status = "diverged"
          break
        host = jax.device_get(window)
        now = time.time()
        rate = (step - last_log[1]) * tokens_per_step / max(now - last_log[0], 1e-9)
        row = {"loss": float(np.mean([h["loss"] for h in host])), "lr": float(host[-1]["lr"]),
               "grad_norm": float(np.mean([h["grad_norm"] for h in host])), "tokens_per_s": rate}
        if peak:
          row["mfu"] = rate / tokens_per_step * flops_per_step / peak
        metrics.write(step, row)
        bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{rate:,.0f}")
        window, last_log = [], (now, step)
      bar.update(1)
      if step % t.eval_every == 0 or last:
        val_loss = evaluate(state["params"])
        metrics.write(step, {"val_loss": val_loss})
        tqdm.write(f"step {step}: val_loss {val_loss:.4f} (unigram {unigram:.4f})")
      if saving:
        ckpt.save(mngr, step, state, force=True)
      if stop:
        status = "interrupted"
        break
  bar.close()
  metrics.close()
  if diag:
    diag.close()

  # --- end of run ---------------------------------------------------------------------
  final_step = int(state["step"])
  if status == "diverged":
    tqdm.write(f"diverged: non-finite loss or gradient at update {final_step + 1}; "
               f"kept the last good checkpoint (step {mngr.latest_step()})")
  train_losses = [r["loss"] for r in read_metrics(workdir) if "loss" in r]
  summary = {
      "status": status, "exit_code": EXIT_CODES[status], "steps": final_step,
      "diverged_at_step": final_step + 1 if status == "diverged" else None,
      "final_train_loss": train_losses[-1] if train_losses else None,
      "final_val_loss": val_loss, "unigram_val_loss": unigram,
      "val_gain_over_unigram": None if val_loss is None else unigram - val_loss,
      "wall_time_s": time.time() - started, "n_params": model.count_params(cfg),
      "tokens_per_step": tokens_per_step, "corpus_fingerprint": prepared.fingerprint,
      "latest_checkpoint": mngr.latest_step(),
  }
  if status == "completed" and config.sample.num_samples > 0:
    params = sharding.gather(state["params"])  # every process takes part in the gather
    if lead:
      summary["samples"] = write_samples(params, cfg, prepared.tokenizer_path, config.sample,
                                         workdir, t.seed)
  if lead:
    plot_losses(workdir, unigram)
    with open(os.path.join(workdir, "summary.json"), "w", encoding="utf-8") as f:
      json.dump(summary, f, indent=2)
  mngr.close()
  return RunResult(status=status, summary=summary, state=state)


def write_samples(params, cfg, tokenizer_path: str, s, workdir: str, seed: int) -> list[str]:
  """A few samples from the trained model, printed and saved to ``samples.txt``."""
  from andrea_jax import sample  # pylint: disable=import-outside-toplevel
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
  """A finished or stopped run's ``(params, ModelConfig, tokenizer, config)`` from its workdir."""
  import ml_collections  # pylint: disable=import-outside-toplevel
  saved = ckpt.load_config_dict(workdir)
  if saved is None:
    raise ckpt.CheckpointError(f"{workdir} has no config.json: is it a run directory of "
                               f"python -m experiments.run?")
  config = ml_collections.ConfigDict(saved)
  cfg = model.ModelConfig(**config.model)
  optimizer = make_optimizer(config.train)
  mngr = ckpt.manager(os.path.join(workdir, "checkpoints"), config.checkpoint.every,
                      config.checkpoint.keep)
  # Onto this process's first device, whichever mesh wrote the checkpoint.
  abstract = abstract_state(cfg, optimizer, config.train.seed)
  one_device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  state = ckpt.restore(mngr, sharding.with_shardings(
      abstract, jax.tree.map(lambda _: one_device, abstract)), step)
  mngr.close()
  with open(os.path.join(workdir, "data.json"), encoding="utf-8") as f:
    tok = tokenizer_lib.load(json.load(f)["tokenizer_path"], cfg.vocab_size)
  return state["params"], cfg, tok, config

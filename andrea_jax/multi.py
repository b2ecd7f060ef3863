"""Many models of one architecture in one program: N members trained at once under ``jax.vmap``.

The members share the config (shape, schedule shape, batch size, steps) and differ in
their peak learning rate, their initialisation seed and their batch order. Their
parameters and optimizer states are stacked on a leading member axis ``N``; one jitted
step updates them all: ``jax.vmap`` over the members on accelerators, ``lax.map`` (a
compiled loop over them) on CPUs, where XLA's batched matmuls are slow (see
``resolve_member_axis``). What sets a member apart:

- its learning rate: the optimizer is ``train.make_optimizer`` with a peak rate of 1,
  followed by ``optax.inject_hyperparams(optax.scale)`` holding the member's rate in its
  optimizer state. Warmup-cosine is linear in the peak, and AdamW's decoupled decay is
  scaled by the rate, so this is the member's own schedule (up to float rounding);
- its seeds: ``jax.random.key(seed)`` initialises it; its batches are
  ``data.batch_at(step)`` with its own ``batch_seed`` (members sharing one share batches);
- its divergence flag ``good``: the first non-finite loss or gradient freezes the member
  at its last good state (its updates are discarded from then on); the others go on.

The group's workdir holds ``config.json``, ``members.json`` and ``checkpoints/`` (the
stacked state, orbax; rerunning the same call resumes from the newest, e.g. after a
``kill -9``), and one directory per member with the files of a single run:
``metrics.jsonl``, ``diagnostics.jsonl`` and ``summary.json``.
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
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from andrea_jax import checkpoint as ckpt
from andrea_jax import data as data_lib
from andrea_jax import diagnostics
from andrea_jax import errors
from andrea_jax import metrics as metrics_lib
from andrea_jax import model
from andrea_jax import train

EXIT_CODES = {"completed": 0, "diverged": 3, "interrupted": 4}


@dataclasses.dataclass(frozen=True)
class Member:
  """One model of the group: its directory name, peak learning rate and seeds."""
  name: str
  learning_rate: float
  seed: int = 0
  # Seed of the batch order; None = the config's data.shuffle_seed (what a single run uses).
  batch_seed: int | None = None


# ----------------------------------------------------------------------------- optimizer and state


def unit_config(t) -> ml_collections.ConfigDict:
  """The ``train`` group with a peak learning rate of 1 (members scale it)."""
  unit = ml_collections.ConfigDict(t.to_dict())
  unit.learning_rate = 1.0
  return unit


def make_optimizer(t) -> optax.GradientTransformation:
  """``train.make_optimizer`` at unit rate, then the member's rate, held in its state."""
  return optax.chain(train.make_optimizer(unit_config(t)),
                     optax.inject_hyperparams(optax.scale)(step_size=1.0))


def init_member(cfg: model.ModelConfig, optimizer, key: jax.Array, lr: jax.Array) -> dict:
  params = model.init_params(cfg, key)
  opt_state = optimizer.init(params)
  scale = opt_state[1]
  opt_state = (opt_state[0], scale._replace(hyperparams={**scale.hyperparams,
                                                          "step_size": jnp.asarray(lr, jnp.float32)}))
  return {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": opt_state,
          "good": jnp.ones((), bool)}


def init_state(cfg: model.ModelConfig, optimizer, seeds: jax.Array, lrs: jax.Array) -> dict:
  """The stacked state of all members: every leaf has a leading axis N."""
  keys = jax.vmap(jax.random.key)(seeds)
  return jax.vmap(functools.partial(init_member, cfg, optimizer))(keys, lrs)


def member_lr(state: dict) -> jax.Array:
  return state["opt_state"][1].hyperparams["step_size"]


def member_step(state: dict, batch_ABT: jax.Array, cfg: model.ModelConfig, optimizer) -> tuple[dict, dict]:
  """One update of one member from ``A`` microbatches ``[A, B/A, T+1]``; frozen once diverged."""
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
         "opt_state": opt_state, "good": ok}
  new_state = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, {**state, "good": ok})
  return new_state, {"loss": loss, "grad_norm": grad_norm}


def eval_member(params, batch_BT: jax.Array, cfg: model.ModelConfig) -> jax.Array:
  return model.loss_fn(params, batch_BT[:, :-1], batch_BT[:, 1:], cfg)


class Programs(NamedTuple):
  init: Any  # (seeds [N], lrs [N]) -> stacked state
  step: Any  # (state, batch [N, A, B/A, T+1]) -> (state, {"loss": [N], "grad_norm": [N]})
  eval: Any  # (params, batch [B, T+1]) -> losses [N]
  probe: Any  # (params, batch [B, T+1]) -> diagnostics.probe per member
  update_size: Any  # (params before, params after) -> relative update sizes per member
  copy: Any  # params -> a copy (the step donates its input)


MEMBER_AXES = ("auto", "vmap", "map")


def resolve_member_axis(member_axis: str) -> str:
  """``auto``: ``map`` on CPUs, ``vmap`` on accelerators.

  On a CPU, XLA runs the batched matmuls that ``vmap`` makes (one per weight, with the
  member axis as a batch dimension) much slower than the same matmuls one by one (3.6x
  for the tied unembedding at d_model 64, vocabulary 2305): measured with
  ``python -m benchmarks.vmap_members``, a vmapped step cost 0.65x, a ``lax.map`` over
  the members (one compiled loop, unbatched matmuls) 1.3x, the members' sequential steps.
  On a GPU, batching the members into each kernel is the point.
  """
  if member_axis not in MEMBER_AXES:
    raise errors.ConfigError(f"member_axis={member_axis!r}: expected one of {MEMBER_AXES}")
  if member_axis == "auto":
    return "map" if jax.default_backend() == "cpu" else "vmap"
  return member_axis


def over_members(fn, member_axis: str):
  """``fn`` of one member, applied to every member of stacked arguments."""
  if member_axis == "vmap":
    return jax.vmap(fn)
  return lambda *args: jax.lax.map(lambda a: fn(*a), args)


@functools.lru_cache(maxsize=8)
def programs(cfg: model.ModelConfig, train_json: str, member_axis: str = "vmap") -> Programs:
  """The jitted functions of a group; cached, so a resume in one process reuses them.

  The train step runs over the members with ``member_axis`` ("vmap" or "map"); the
  cheap ones (init, evaluation, probes) always with vmap.
  """
  optimizer = make_optimizer(ml_collections.ConfigDict(json.loads(train_json)))
  step = functools.partial(member_step, cfg=cfg, optimizer=optimizer)
  return Programs(
      init=jax.jit(functools.partial(init_state, cfg, optimizer)),
      step=jax.jit(over_members(step, member_axis), donate_argnums=0),
      eval=jax.jit(jax.vmap(functools.partial(eval_member, cfg=cfg), in_axes=(0, None))),
      probe=jax.jit(jax.vmap(lambda p, b: diagnostics.probe(p, b, cfg), in_axes=(0, None))),
      update_size=jax.jit(jax.vmap(diagnostics.relative_update)),
      copy=jax.jit(lambda p: jax.tree.map(jnp.copy, p)))


# ----------------------------------------------------------------------------- files


class _Signals:
  """SIGTERM/SIGINT become a flag the loop checks after each step (main thread only)."""

  def __init__(self):
    self.received, self._old = None, {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._old[sig] = signal.signal(sig, lambda s, f: setattr(self, "received", s))
    return self

  def __exit__(self, *exc):
    for sig, handler in self._old.items():
      signal.signal(sig, handler)


class _Jsonl:
  """One append-only ``{"step": ...}`` JSONL file per member (readers keep each step's newest row)."""

  def __init__(self, dirs: Sequence[str], name: str):
    self.files = [open(os.path.join(d, name), "a", encoding="utf-8") for d in dirs]

  def write(self, i: int, step: int, values: dict) -> None:
    row = {k: np.asarray(v).tolist() for k, v in values.items()}
    self.files[i].write(json.dumps({"step": step, **row}) + "\n")
    self.files[i].flush()

  def close(self) -> None:
    for f in self.files:
      f.close()


def _write_json(path: str, value: Any) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2)
  os.replace(tmp, path)


def check_config(workdir: str, config) -> None:
  """Write ``config.json``; a resume whose model, data or train groups differ is refused."""
  path = os.path.join(workdir, "config.json")
  current = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      saved = json.load(f)
    frozen = {"data.cache_dir", "data.prefetch", "train.log_every", "train.eval_every"}
    # Fields the code added since the group started (absent from its config.json) keep
    # their defaults; any field it was started with must be unchanged.
    diffs = [f"{g}.{k}: {v!r} -> {current[g].get(k)!r}"
             for g in ("model", "data", "train") for k, v in sorted(saved.get(g, {}).items())
             if f"{g}.{k}" not in frozen and v != current[g].get(k)]
    if diffs:
      raise errors.CheckpointError(f"{workdir} holds a group trained with another config ({'; '.join(diffs)}); "
                       f"resume with the same config or use a fresh workdir")
  _write_json(path, current)


def check_members(members: Sequence[Member], workdir: str) -> None:
  if not members:
    raise errors.ConfigError("train_members: no members: pass at least one Member")
  names = [m.name for m in members]
  if len(set(names)) != len(names) or any(not n or "/" in n for n in names):
    raise errors.ConfigError(f"member names {names}: expected distinct non-empty names without '/'")
  saved = os.path.join(workdir, "members.json")
  if os.path.exists(saved):
    with open(saved, encoding="utf-8") as f:
      old = json.load(f)
    if old != [dataclasses.asdict(m) for m in members]:
      raise errors.CheckpointError(f"{workdir} holds a group of other members ({old}); resume with the same "
                       f"members or use a fresh workdir")


# ----------------------------------------------------------------------------- the loop


class Crash(RuntimeError):
  """Raised by ``crash_after``: a test's stand-in for ``kill -9``."""


def train_members(config, members: Sequence[Member], workdir: str, member_axis: str = "auto",
                  crash_after: int | None = None) -> list[dict]:
  """Train ``members`` of ``config``'s architecture together; returns their summaries.

  Resumes from ``workdir``'s newest checkpoint. ``member_axis``: how one program steps
  all members (``resolve_member_axis``). ``crash_after`` (tests) raises ``Crash``
  after that step's rows are written and before any save, as a ``kill -9`` would stop it.
  """
  resolve = getattr(model, "resolve_auto", None)
  cfg = model.ModelConfig(**config.model)
  cfg = resolve(cfg) if resolve else cfg
  t = config.train
  train.check_train_config(t)
  check_members(members, workdir)
  n = len(members)
  dirs = [os.path.join(workdir, m.name) for m in members]
  for d in dirs:
    os.makedirs(d, exist_ok=True)
  check_config(workdir, config)
  _write_json(os.path.join(workdir, "members.json"), [dataclasses.asdict(m) for m in members])
  started = time.time()

  # --- data: each member's batch order; one fixed eval set ------------------------------
  prepared = data_lib.prepare(config)
  train_tokens = data_lib.read_shard(prepared.train_path)
  eval_set = data_lib.eval_batches(data_lib.read_shard(prepared.val_path), t.eval_batches,
                                   t.batch_size, cfg.block_size, process_index=0, process_count=1)
  unigram = train.unigram_loss(train_tokens, eval_set, cfg.vocab_size)
  default_seed = config.data.shuffle_seed
  batch_seeds = [default_seed if m.batch_seed is None else m.batch_seed for m in members]

  # --- state: fresh or resumed ------------------------------------------------------------
  prog = programs(cfg, json.dumps(t.to_dict(), sort_keys=True), resolve_member_axis(member_axis))
  unit_schedule = train.make_schedule(unit_config(t))
  seeds = jnp.asarray([m.seed for m in members], jnp.int32)
  lrs = jnp.asarray([m.learning_rate for m in members], jnp.float32)
  init = prog.init
  mngr = ckpt.manager(os.path.join(workdir, "checkpoints"), config.checkpoint.every,
                      config.checkpoint.keep)
  if mngr.latest_step() is not None:
    state = ckpt.restore(mngr, jax.eval_shape(init, seeds, lrs))
    start = mngr.latest_step()
    print(f"resumed {workdir} ({n} members) from step {start}")
  else:
    state, start = init(seeds, lrs), 0

  # --- step functions: one compile for all members ----------------------------------------
  step_fn, update_size = prog.step, prog.update_size
  evaluate = lambda params: np.mean([np.asarray(prog.eval(params, b)) for b in eval_set], axis=0)
  probe = lambda params: prog.probe(params, eval_set[0])
  diag = config.diagnostics

  # --- loop -------------------------------------------------------------------------------
  metrics, diag_files = _Jsonl(dirs, "metrics.jsonl"), _Jsonl(dirs, "diagnostics.jsonl") if diag.enabled else None
  lr_host = np.asarray(lrs)
  if start == 0:
    initial = evaluate(state["params"])
    for i in range(n):
      metrics.write(i, 0, {"val_loss": float(initial[i])})
  if diag_files and start == 0:
    _write_probe(diag_files, 0, probe(state["params"]), n)
  seen_good = np.asarray(state["good"])
  val, window, status = None, [], "completed"
  loaders = {s: data_lib.Loader(prepared.train_path, t.batch_size, cfg.block_size, s,
                                start_step=start, process_index=0, process_count=1,
                                prefetch=config.data.prefetch) for s in sorted(set(batch_seeds))}
  last_log = (time.time(), start)
  tokens_per_step = t.batch_size * cfg.block_size
  try:
    with _Signals() as signals:
      for step in range(start + 1, t.steps + 1):
        by_seed = {s: next(l).reshape(t.grad_accum_steps, -1, cfg.block_size + 1) for s, l in loaders.items()}
        batch = jnp.asarray(np.stack([by_seed[s] for s in batch_seeds]))
        before = (prog.copy(state["params"])
                  if diag_files and step <= diag.early_steps else None)
        state, m = step_fn(state, batch)
        window.append(m)
        if before is not None:
          _write_rows(diag_files, step, update_size(before, state["params"]), seen_good)
        last = step == t.steps
        stop = bool(signals.received)
        saving = last or stop or mngr.should_save(step)
        if step % t.log_every == 0 or saving:
          host = jax.device_get(window)
          good = np.asarray(state["good"])
          now = time.time()
          rate = (step - last_log[1]) * tokens_per_step * n / max(now - last_log[0], 1e-9)
          lr_now = float(unit_schedule(step - 1))
          for i in np.flatnonzero(seen_good & good):
            metrics.write(i, step, {"loss": float(np.mean([h["loss"][i] for h in host])),
                                    "lr": lr_now * float(lr_host[i]),
                                    "grad_norm": float(np.mean([h["grad_norm"][i] for h in host])),
                                    "tokens_per_s": rate / n})
          seen_good = seen_good & good
          window, last_log = [], (now, step)
          if not seen_good.any():
            status = "diverged"  # every member: nothing left to train
        if step % t.eval_every == 0 or last:
          val = evaluate(state["params"])
          for i in np.flatnonzero(seen_good):
            metrics.write(i, step, {"val_loss": float(val[i])})
        if diag_files and diag.every and step % diag.every == 0:
          _write_probe(diag_files, step, probe(state["params"]), n, seen_good)
        if crash_after is not None and step >= crash_after:
          raise Crash(f"crashed after step {step}")
        if saving or status == "diverged":
          ckpt.save(mngr, step, state, force=True)
        if status == "diverged":
          break
        if stop:
          status = "interrupted"
          break
  finally:
    for loader in loaders.values():
      loader.close()
    metrics.close()
    if diag_files:
      diag_files.close()
    mngr.close()
  if status == "interrupted":
    return [{"status": "interrupted"} for _ in members]
  return _write_summaries(members, dirs, state, val, unigram, cfg, t, prepared,
                          time.time() - started, workdir)


def _write_probe(files: _Jsonl, step: int, values: dict, n: int, good=None) -> None:
  _write_rows(files, step, values, np.ones(n, bool) if good is None else good)


def _write_rows(files: _Jsonl, step: int, values: dict, good: np.ndarray) -> None:
  host = jax.device_get(values)
  for i in np.flatnonzero(good):
    files.write(i, step, {k: v[i] for k, v in host.items()})


def _write_summaries(members, dirs, state, val, unigram, cfg, t, prepared, seconds,
                     workdir) -> list[dict]:
  good, steps = np.asarray(state["good"]), np.asarray(state["step"])
  summaries = []
  for i, (m, d) in enumerate(zip(members, dirs)):
    rows = metrics_lib.read_jsonl(os.path.join(d, "metrics.jsonl"))
    train_losses = [r["loss"] for r in rows if "loss" in r]
    status = "completed" if good[i] else "diverged"
    first_val = next((r["val_loss"] for r in rows if r["step"] == 0 and "val_loss" in r), None)
    summary = {
        "status": status, "exit_code": EXIT_CODES[status], "steps": int(steps[i]),
        "diverged_at_step": None if good[i] else int(steps[i]) + 1,
        "final_train_loss": train_losses[-1] if train_losses else None,
        "final_val_loss": float(val[i]) if good[i] and val is not None else None,
        "initial_val_loss": first_val if first_val is not None else math.log(cfg.vocab_size),
        "unigram_val_loss": unigram,
        "val_gain_over_unigram": float(unigram - val[i]) if good[i] and val is not None else None,
        "learning_rate": m.learning_rate, "seed": m.seed, "batch_seed": m.batch_seed,
        "n_params": model.count_params(cfg), "tokens_per_step": t.batch_size * cfg.block_size,
        "corpus_fingerprint": prepared.fingerprint,
        # The group's wall time, shared by its members (they trained together).
        "wall_time_s": seconds, "group": os.path.abspath(workdir), "group_size": len(members),
    }
    _write_json(os.path.join(d, "summary.json"), summary)
    summaries.append(summary)
  return summaries

"""The step core: the typed training settings, the optimizer, the state and the update.

``TrainConfig`` is the config's ``train`` group as a frozen, validated value (as
``ModelConfig`` is the ``model`` group's). From it: ``make_optimizer`` (global-norm
clipping, then AdamW with decoupled decay on matrices and embeddings, muP's per-parameter
rates for a muP model, or Muon: ``muon``; either steps with the run's schedule,
``schedule.learning_rate``), ``init_state`` (the whole
training state, what a checkpoint holds) and ``train_step``: the loss averaged over
gradient-accumulation microbatches, the global gradient norm (the clipping reuses it), the
update, and the skip of a step that diverges. ``eval_loss`` is the loss of one validation
batch. A group (``multi.py``) runs the same functions over its members.

Dropout (``model.dropout > 0``) is on in ``train_step`` alone: its key is
``dropout_key(seed, state["step"])``, so a run is reproducible, a resume from a checkpoint
draws the masks the uninterrupted run would have drawn, and each microbatch (and each
member of a group, by its seed) gets its own. ``eval_loss`` passes no key: evaluation is
deterministic. At ``dropout=0`` the step draws no random number at all.

A step diverges when its loss or gradient norm is not finite, or when the parameters it
would make are not: it is not applied (the state stays bit-identical to the one before
it) and ``good`` turns False for ever, so every later step is skipped too (what the loop
then does: ``loop.py``; what the summary says: ``train.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import optax

from andrea_jax import errors
from andrea_jax import fields
from andrea_jax import init
from andrea_jax import model
from andrea_jax import mup
from andrea_jax import schedule as schedule_lib
from andrea_jax.model_config import ModelConfig

# Weight decay by leaf, the one table both optimizers read (``decayed``): the weight matrices
# and both embeddings decay (wte is also the tied output head), biases and norm gains do not.
# nanoGPT's rule (model.py:270, configure_optimizers: every parameter of 2 or more dimensions
# decays) and modded-nanogpt's today (train_gpt.py:2030-2038 at f411b3d: embed and lm_head
# decay, the scalars have wd_mul 0). Moonlight (examples/toy_train.py:200, 236) decays every
# parameter, norm gains and biases too, in both optimizers; we keep GPT-2's exemption.
DECAYED = ("w_qkv", "w_out", "w_in", "wte", "wpe", "lm_head")

# The optimizers of ``train.optimizer`` (``make_optimizer``).
OPTIMIZERS = ("adamw", "muon")
# The hidden matrices Muon orthogonalises, [layers, in, out] under ``blocks``: the attention's
# QKV and output projections, the MLP's input and output (``muon_dimension_numbers``). All
# decay (``DECAYED``): Muon's own decay is not masked.
MUON_MATRICES = ("w_qkv", "w_out", "w_in")

# Weights & Biases logging beside metrics.jsonl: none, to files only (``wandb sync`` uploads
# them later) or to the server as the run goes (``metrics.WandbRun``).
WANDB_MODES = ("off", "offline", "online")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """The ``train`` group, checked: the optimizer, the schedule, batches, evaluation, logging.

  ``config.RunConfig.train`` (built from the ConfigDict at the boundary); frozen and
  hashable, so a jitted program can be keyed by it. Each field's default and doc are written
  here alone (``fields.py``); bad values are refused with a ``ConfigError`` naming the field
  and the fix.
  """
  seed: int = fields.default(
      0, "Seed of parameter initialisation (the batch order follows data.shuffle_seed).")
  steps: int = fields.default(5000, "Optimizer updates to run in total.")
  batch_size: int = fields.default(
      32, "Sequences per optimizer update (global, over all devices and microbatches).")
  grad_accum_steps: int = fields.default(
      1, "Microbatches per update; gradients are summed over them (for batches larger than "
      "memory).")
  learning_rate: float = fields.default(6e-4, "Peak learning rate, reached at the end of warmup.")
  warmup_steps: int = fields.default(
      200, "Linear warmup over this many updates, from above zero: (k + 1) / (warmup_steps + 1) "
      "of the peak.")
  schedule: str = fields.default(
      "cosine", "The decay after the warmup: 'cosine' (to the floor at the last step) or 'wsd' "
      "(warmup-stable-decay: the peak, then a decay over the last decay_fraction of the steps; "
      "docs/training.md).")
  min_lr_ratio: float = fields.default(
      0.1, "The floor both schedules decay to, learning_rate * min_lr_ratio at the last step.")
  decay_shape: str = fields.default(
      "1-sqrt", "WSD's decay: 'linear', 'cosine' or '1-sqrt' (1 - sqrt(progress), Hägele et al. "
      "2024's best).")
  decay_fraction: float = fields.default(
      0.2, "WSD's decay lasts this fraction of train.steps (0 = none: the peak to the end; Hägele "
      "et al. 2024: 0.2).")
  optimizer: str = fields.default(
      "adamw", "'adamw', or 'muon' (optax.contrib.muon: the hidden matrices orthogonalised, the "
      "rest by Adam; docs/training.md).")
  adam_lr_ratio: float = fields.default(
      1.0, "Muon only: the Adam branch's peak rate (embeddings, head, norms, biases) as a "
      "multiple of learning_rate.")
  muon_momentum: float = fields.default(
      0.95, "Muon only: the momentum of its Nesterov update (Jordan 2024: 0.95).")
  muon_consistent_rms: float = fields.default(
      0.2, "Muon only: scale each update to this RMS (Liu et al. 2025, so AdamW's rate and decay "
      "carry over; 0 = Jordan's sqrt(max(1, fan_out / fan_in))).")
  muon_split_qkv: bool = fields.default(
      True, "Muon only: orthogonalise each layer's Q, K and V as three matrices "
      "(modded-nanogpt's), not the fused QKV as one.")
  muon_adam_decay: bool = fields.default(
      True, "Muon only: its Adam branch decays the embeddings and head as AdamW does "
      "(step.DECAYED; False: no decay on it).")
  b1: float = fields.default(0.9, "AdamW first-moment decay (and Muon's Adam branch's).")
  b2: float = fields.default(0.95, "AdamW second-moment decay (and Muon's Adam branch's).")
  eps: float = fields.default(1e-8, "AdamW epsilon.")
  weight_decay: float = fields.default(
      0.1, "Decoupled weight decay, times the rate, on the matrices and embeddings "
      "(step.DECAYED), under AdamW and Muon alike.")
  grad_clip: float = fields.default(
      1.0, "Clip the global gradient norm to this value (0 = no clipping).")
  z_loss: float = fields.default(
      0.0, "Weight of PaLM's z-loss, z_loss * log(Z)^2 on the softmax normaliser (0 = off; PaLM: "
      "1e-4).")
  log_every: int = fields.default(10, "Log train metrics every this many updates.")
  eval_every: int = fields.default(
      250, "Evaluate on the fixed validation batches every this many updates (and at the end).")
  eval_batches: int = fields.default(
      8, "Number of fixed validation batches (of batch_size sequences) per evaluation.")
  init_from: str = fields.default(
      "", "A Hugging Face GPT-2 directory whose weights start a fresh run ('' = random init; "
      "docs/interop.md).")
  eval_at_start: bool = fields.default(
      True, "Evaluate at step 0, before training (off for the real models: an hour on a CPU).")
  wandb_mode: str = fields.default(
      "off", "Weights & Biases too (pip install wandb): 'off', 'offline' (<workdir>/wandb; wandb "
      "sync uploads) or 'online'.")
  wandb_project: str = fields.default("andrea_jax", "The W&B project the run is logged to.")
  wandb_name: str = fields.default(
      "", "The W&B run name ('' = the workdir's name; a group's members: theirs, in a W&B group "
      "of this name).")
  profile_steps: str = fields.default(
      "", "Trace these updates with jax.profiler into <workdir>/profile for TensorBoard, "
      "'first-last' such as '10-12' ('' = off; docs/training.md).")
  task_eval_every: int = fields.default(
      0, "Score HellaSwag every this many updates, logged to metrics.jsonl (0 = off; "
      "andrea_jax/tasks.py).")
  task_file: str = fields.default(
      "", "HellaSwag's JSONL ('' = download hellaswag_val.jsonl into ~/.cache/andrea_jax once).")
  task_examples: int = fields.default(
      0, "Score the first this many HellaSwag examples (0 = all 10,042: slow on a CPU).")
  task_style: str = fields.default(
      "lmeval", "How HellaSwag is scored: 'lmeval' (lm-eval-harness's context, acc_norm per "
      "character) or 'llmc' (llm.c's; docs/training.md).")

  def __post_init__(self):
    for name in ("steps", "batch_size", "grad_accum_steps", "learning_rate", "log_every",
                 "eval_every", "eval_batches"):
      if not getattr(self, name) > 0:
        raise errors.ConfigError(f"train.{name}={getattr(self, name)!r}: expected a positive value")
    if self.batch_size % self.grad_accum_steps:
      raise errors.ConfigError(
          f"train.batch_size={self.batch_size} is not divisible by train.grad_accum_steps="
          f"{self.grad_accum_steps}: choose a batch size that is a multiple of it")
    if not 0 <= self.warmup_steps < self.steps:
      raise errors.ConfigError(
          f"train.warmup_steps={self.warmup_steps}: expected 0 <= warmup_steps < train.steps="
          f"{self.steps}; set --config.train.warmup_steps={self.steps // 10} (a tenth of the run)")
    if not 0 <= self.min_lr_ratio <= 1:
      raise errors.ConfigError(
          f"train.min_lr_ratio={self.min_lr_ratio}: expected a value in [0, 1]")
    self.shape  # pylint: disable=pointless-statement  (its own checks)
    if not self.z_loss >= 0:
      raise errors.ConfigError(f"train.z_loss={self.z_loss!r}: expected 0 (off) or a positive "
                               f"weight such as 1e-4")
    if self.optimizer not in OPTIMIZERS:
      raise errors.ConfigError(f"train.optimizer={self.optimizer!r}: expected one of {OPTIMIZERS}")
    if not self.adam_lr_ratio > 0:
      raise errors.ConfigError(f"train.adam_lr_ratio={self.adam_lr_ratio!r}: expected a positive "
                               f"multiple of train.learning_rate (1.0: the same rate)")
    if not 0 <= self.muon_momentum < 1:
      raise errors.ConfigError(f"train.muon_momentum={self.muon_momentum!r}: expected a value in "
                               f"[0, 1) (Jordan 2024: 0.95)")
    if not self.muon_consistent_rms >= 0:
      raise errors.ConfigError(
          f"train.muon_consistent_rms={self.muon_consistent_rms!r}: expected 0 (Jordan's "
          f"sqrt(max(1, fan_out / fan_in)) scaling) or a target update RMS such as 0.2 (Liu et "
          f"al. 2025)")
    if self.wandb_mode not in WANDB_MODES:
      raise errors.ConfigError(f"train.wandb_mode={self.wandb_mode!r}: expected one of "
                               f"{WANDB_MODES}")
    self.profile_range  # pylint: disable=pointless-statement  (its own checks)
    for name, zero, what in (("task_eval_every", "off", "updates"),
                             ("task_examples", "all of them", "examples")):
      if not getattr(self, name) >= 0:
        raise errors.ConfigError(f"train.{name}={getattr(self, name)!r}: expected 0 ({zero}) "
                                 f"or a positive number of {what}")

  @property
  def profile_range(self) -> tuple[int, int] | None:
    """``(first, last)`` of ``profile_steps`` (``"10-12"``; ``"10"``: that step alone), the
    updates the profiler traces; None when it is off (``""``)."""
    text = str(self.profile_steps).strip()
    if not text:
      return None
    found = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", text)
    first, last = (int(found[1]), int(found[2] or found[1])) if found else (0, 0)
    if not 1 <= first <= last <= self.steps:
      raise errors.ConfigError(
          f"train.profile_steps={self.profile_steps!r}: expected the updates to trace as "
          f"'first-last' within 1..train.steps={self.steps}, e.g. '10-12' (or '' for none)")
    return first, last

  @property
  def shape(self) -> schedule_lib.Shape:
    """The learning rate's plan at unit peak (``schedule.py``)."""
    return schedule_lib.Shape.of(self)


# ----------------------------------------------------------------------------- optimizer


def describe_training(t: TrainConfig) -> str:
  """The optimizer and the schedule in one line, among a run's first: two runs that differ
  in them (or in which leaves decay, ``decayed``) say so from the start."""
  if t.optimizer == "muon":
    qkv = "Q, K and V apart" if t.muon_split_qkv else "QKV as one matrix"
    opt = (f"muon on the hidden matrices ({qkv}; momentum {t.muon_momentum:g}, update RMS "
           f"{t.muon_consistent_rms:g}), Adam at {t.adam_lr_ratio:g}x the rate on the rest")
  else:
    opt = f"adamw (b1 {t.b1:g}, b2 {t.b2:g})"
  decay = f" on {', '.join(decayed(t))}" if t.weight_decay else ""
  clip = f", clipped at global norm {t.grad_clip:g}" if t.grad_clip > 0 else ""
  return (f"optimizer: {opt}, weight decay {t.weight_decay:g}{decay}{clip}; schedule: "
          f"{schedule_lib.describe(t.shape, t.learning_rate)}")


def decayed(t: TrainConfig) -> tuple[str, ...]:
  """The leaves ``t``'s optimizer decays, by name: ``DECAYED``, under AdamW and Muon alike;
  a Muon run from before ``muon_adam_decay`` decayed its matrices alone."""
  return MUON_MATRICES if t.optimizer == "muon" and not t.muon_adam_decay else DECAYED


def decay_mask(params) -> Any:
  """True on the leaves ``DECAYED`` names."""
  return jax.tree_util.tree_map_with_path(lambda path, _: path[-1].key in DECAYED, params)


def make_optimizer(t: TrainConfig, cfg: ModelConfig | None = None,
                   learning_rate: optax.Schedule | None = None) -> optax.GradientTransformation:
  """Global-norm clipping, then ``t.optimizer``: AdamW, or Muon (``muon``).

  AdamW has decoupled decay on matrices and embeddings. Under muP
  (``cfg.parametrization == "mup"``) the hidden matrices' Adam steps get the per-parameter
  learning-rate factors of ``mup.scale_learning_rates``: before the decay is added
  (``mup_decay="constant"``: ``lr x weight_decay`` the same at every width, as
  ``mup.MuAdamW``), or after it (``"with_rate"``: the decay scaled with the rate).

  ``learning_rate``: the run's schedule (``schedule.learning_rate``, the one the logs
  report); by default ``t``'s own plan, as a run never resumed with other settings.
  """
  schedule = learning_rate or schedule_lib.for_config(t)
  if t.optimizer == "muon":
    inner = muon(t, schedule)
  elif cfg is not None and cfg.parametrization == "mup" and not mup.decay_scales_with_rate(cfg):
    # optax.adamw's own chain, with the rate factors between Adam's step and the decay.
    inner = optax.chain(optax.scale_by_adam(b1=t.b1, b2=t.b2, eps=t.eps),
                        mup.scale_learning_rates(cfg),
                        optax.add_decayed_weights(t.weight_decay, decay_mask),
                        optax.scale_by_learning_rate(schedule))
  else:
    inner = optax.adamw(schedule, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=t.weight_decay,
                        mask=decay_mask)
    if cfg is not None and cfg.parametrization == "mup":
      inner = optax.chain(inner, mup.scale_learning_rates(cfg))
  return optax.chain(clip_by_global_norm(t.grad_clip), inner) if t.grad_clip > 0 else inner


def muon(t: TrainConfig, schedule: optax.Schedule) -> optax.GradientTransformation:
  """``optax.contrib.muon`` on the hidden matrices, its Adam branch on the rest.

  Muon (Jordan 2024, modded-nanogpt): Nesterov momentum ``muon_momentum``, orthogonalised by
  five Newton-Schulz steps, each scanned layer's matrix on its own
  (``muon_dimension_numbers``), and with ``muon_split_qkv`` each layer's Q, K and V apart
  (``qkv_apart``), scaled to the RMS ``muon_consistent_rms`` (Liu et al. 2025,
  "Muon is Scalable for LLM Training", Sec. 2, "consistent update RMS": times
  ``0.2 * sqrt(max(fan_in, fan_out))``, so AdamW's rate and decay carry over; 0: Jordan's
  ``sqrt(max(1, fan_out / fan_in))``), plus decoupled weight decay times the rate on the
  matrices (the same paper's "weight decay": ``W <- W - lr (O + weight_decay W)``). The
  embeddings, head, norm gains and biases take Adam (``b1``, ``b2``, ``eps``) at
  ``adam_lr_ratio`` times the same schedule; with ``muon_adam_decay`` the leaves of it that
  ``DECAYED`` names (the embeddings and head) decay as under AdamW, ``-rate x weight_decay x
  W`` beside Adam's step (Moonlight's Adam branch decays at the same weight_decay,
  examples/toy_train.py:236; optax's own branch cannot be masked: it would decay every leaf
  of it, norm gains and biases too). Without it (runs before the field) the branch has no
  decay.
  """
  adam_rate = lambda count: t.adam_lr_ratio * schedule(count)
  inner = optax.contrib.muon(
      learning_rate=schedule, beta=t.muon_momentum, eps=t.eps, weight_decay=t.weight_decay,
      adam_b1=t.b1, adam_b2=t.b2, adam_learning_rate=adam_rate,
      muon_weight_dimension_numbers=muon_dimension_numbers,
      consistent_rms=t.muon_consistent_rms or None)
  if t.muon_split_qkv:
    inner = qkv_apart(inner)
  if not t.muon_adam_decay:
    return inner
  # Added after the branch's step, which carries its -rate already: so does the decay term.
  adam_decay = optax.add_decayed_weights(lambda count: -adam_rate(count) * t.weight_decay)
  return optax.chain(inner, optax.masked(adam_decay, adam_decay_mask))


def _keys(path) -> tuple:
  """A tree path's dict keys and field names (sequence indices as None)."""
  return tuple(getattr(k, "key", getattr(k, "name", None)) for k in path)


def _muon_takes(path, leaf) -> bool:
  """Whether Muon takes the leaf at ``path``: a hidden matrix (``MUON_MATRICES``) under
  ``blocks``, ``[layers, in, out]`` (or the QKV one seen as ``[layers, in, 3, out]``)."""
  keys = _keys(path)
  return keys[0] == "blocks" and keys[-1] in MUON_MATRICES and leaf.ndim >= 3


def muon_dimension_numbers(params) -> Any:
  """Muon's axes of each hidden matrix (``MUON_MATRICES``, ``[layers, in, out]``): ``in`` is
  reduced, ``out`` the output, and the layer axis a batch axis, so each layer's matrix is
  orthogonalised on its own; the fused QKV matrix seen as ``[layers, in, 3, out]``
  (``qkv_apart``) has the three as a second batch axis, so each of Q, K and V is one matrix.
  None (the Adam branch) for every other leaf."""

  def dims(path, leaf):
    if not _muon_takes(path, leaf):
      return None
    return optax.contrib.MuonDimensionNumbers(reduction_axis=1, output_axis=leaf.ndim - 1)

  return jax.tree_util.tree_map_with_path(dims, params)


def adam_decay_mask(params) -> Any:
  """True on the leaves of Muon's Adam branch that ``DECAYED`` names (embeddings, head)."""
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: path[-1].key in DECAYED and not _muon_takes(path, leaf), params)


def qkv_apart(inner: optax.GradientTransformation) -> optax.GradientTransformation:
  """``inner`` (Muon) seeing each fused QKV leaf as Q, K and V (``qkv_view``), so it
  orthogonalises them as three matrices, as modded-nanogpt does: its first Muon record split
  the fused QKV gradient before the Newton-Schulz steps (train_gpt2.py:96-97 at b356a1f),
  later ones keep ``qkv_w`` as ``[3, dim, dim]`` and orthogonalise it batched over the three
  (train_gpt.py:264, 128-133 at b7c1e25); Moonlight's model has separate q, k and v
  projections. optax's dimension numbers can batch over an axis but not split one, hence the
  view. The state keeps the parameters' layout (viewed on the way in, back on the way out), so
  checkpoints and shardings are the fused form's."""

  def init_fn(params):
    return qkv_view(inner.init(qkv_view(params, True)), False)

  def update_fn(updates, state, params=None):
    updates, state = inner.update(qkv_view(updates, True), qkv_view(state, True),
                                  None if params is None else qkv_view(params, True))
    return qkv_view(updates, False), qkv_view(state, False)

  return optax.GradientTransformation(init_fn, update_fn)


def qkv_view(tree, apart: bool) -> Any:
  """Every fused QKV leaf of ``tree`` (parameters, updates, or an optimizer state holding
  them: by its path, ``.../attn/w_qkv``) as ``[layers, in, 3, out]`` (``apart``: Q, K and V,
  the column blocks ``branches.qkv_project`` splits) or back to ``[layers, in, 3 out]``."""

  def one(path, x):
    if _keys(path)[-2:] != ("attn", "w_qkv"):
      return x
    return x.reshape(*x.shape[:-1], 3, -1) if apart else x.reshape(*x.shape[:-2], -1)

  return jax.tree_util.tree_map_with_path(one, tree)


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


# ----------------------------------------------------------------------------- state and steps


def init_state(cfg: ModelConfig, optimizer, key: jax.Array) -> dict:
  """The whole training state as one pytree (what a checkpoint holds).

  ``good`` turns False at the first step that diverges and stays False (module docstring).
  """
  params = init.init_params(cfg, key)
  return {"step": jnp.zeros((), jnp.int32), "params": params,
          "opt_state": optimizer.init(params), "good": jnp.ones((), bool)}


def abstract_state(cfg: ModelConfig, optimizer, seed: int) -> Any:
  """Shapes and dtypes of ``init_state`` (nothing computed): the target of a restore."""
  return jax.eval_shape(lambda k: init_state(cfg, optimizer, k), jax.random.key(seed))


def dropout_key(seed, step) -> jax.Array:
  """The dropout key of the update from state step ``step`` of the run (or member) seeded
  ``seed``: a function of the two alone, so training reproduces and resumes exactly."""
  return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), DROPOUT_STREAM), step)


# Folded into the seed's key first: the dropout keys are a stream apart from the init's.
DROPOUT_STREAM = 0x0D0


def train_step(state: dict, batch_ABT: jax.Array, cfg: ModelConfig, optimizer,
               z_loss: float = 0.0, seed=0) -> tuple[dict, dict]:
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
  ``z_loss`` when it is on). ``seed`` (the run's ``train.seed``, a member's seed) keys the
  dropout (``dropout_key``), when ``cfg.dropout > 0``.
  """
  key = dropout_key(seed, state["step"]) if cfg.dropout else None
  (_, terms), grads = _mean_loss_and_grads(state["params"], batch_ABT, cfg, z_loss, key)
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


def _mean_loss_and_grads(params, batch_ABT: jax.Array, cfg: ModelConfig, z_loss: float,
                         key: jax.Array | None = None):
  """``((objective, terms), gradients)`` averaged over the ``A`` microbatches of ``batch_ABT``
  (each with its own dropout key, split from ``key``; none without one)."""
  grad_fn = jax.value_and_grad(functools.partial(model.loss_terms, z_loss=z_loss), has_aux=True)
  A = batch_ABT.shape[0]
  keys_A = None if key is None else jax.random.split(key, A)
  first = grad_fn(params, batch_ABT[0, :, :-1], batch_ABT[0, :, 1:], cfg,
                  dropout_key=None if key is None else keys_A[0])
  if A == 1:
    return first

  def accumulate(carry, micro):
    micro_BT, micro_key = micro
    loss_grads = grad_fn(params, micro_BT[:, :-1], micro_BT[:, 1:], cfg, dropout_key=micro_key)
    return jax.tree.map(jnp.add, carry, loss_grads), None

  total, _ = jax.lax.scan(accumulate, first, (batch_ABT[1:], None if key is None else keys_A[1:]))
  return jax.tree.map(lambda a: a / A, total)


def eval_loss(params, batch_BT: jax.Array, cfg: ModelConfig) -> jax.Array:
  """The mean cross-entropy of one validation batch ``[B, T+1]`` (no z-loss term)."""
  return model.loss_fn(params, batch_BT[:, :-1], batch_BT[:, 1:], cfg)

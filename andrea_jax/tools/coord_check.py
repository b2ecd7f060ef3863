"""The coordinate check of Tensor Programs V: activation sizes after a few Adam steps, across widths.

Each width of a ladder (``d_model``; heads, depth, vocabulary and data held fixed) trains
for ``steps`` Adam updates at one learning rate, from one seed, on one fixed batch, with
the project's own optimizer (``step.make_optimizer``, muP's per-parameter rates included;
constant rate, no clipping and no weight decay, so nothing but the parametrisation ties
the widths together) on ``model.loss_fn``'s gradients (``adam_updates``: no divergence
guard, nothing here diverges). On that batch it measures the mean size of a coordinate of

    stream.embed, stream.0.attn, ...  the residual stream at each capture point of
                                      ``lens.capture`` (after the embedding, each sublayer)
    branch.0.attn, branch.0.mlp, ...  what each sublayer's branch adds to the stream
    attn_logits.l                     layer l's attention logits (the causal entries)
    logits                            the output logits (the real vocabulary)

at initialisation (``name@0``: mean ``|x|``) and as the updates moved it (``name@delta``:
mean ``|x_after - x_init|``, the feature learning that muP keeps of order 1 at any width).

A quantity's growth is its ``slope``: the least-squares slope of log size against log
width (1: doubles when the width doubles). muP predicts a slope of 0 (flat) for each,
except ``MUP_SLOPES``: the attention logits and the output logits at initialisation are
sums of width-many products of independent coordinates under a ``1 / width`` factor
(``sqrt(d_head_base) / d_head``; the readout multiplier), which fall like ``width ** -0.5`` (they vanish
at infinite width, as in Yang et al.). The check is ``flat`` when no slope exceeds its
prediction by ``FLAT`` and ``grows`` when one exceeds it by ``GROWS``: nothing blows up,
the ``mup`` package's rule, and the two logits really are scaled. Under the standard
parametrisation Adam's updates of a ``D x D`` matrix move its outputs by ``lr * D`` and
GPT-2's fixed N(0, 0.02) init lets a hidden output grow like ``sqrt(D)``: slopes of 0.5
to 1 and more. (After a few steps the updates of the attention logits shrink under muP
at these small widths: the input's change, seen through the random init weights, still
outweighs what attention learned; no bound below is set on them.)
With ``steps=0`` only the ``@0`` sizes are measured (a rule that shows at initialisation
shows there already, and only the forward pass is compiled).
``python -m experiments.coord_check`` prints the table; ``tests/test_coord_check.py``
checks that a muP that forgets any one of its rules fails.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from andrea_jax import diagnostics
from andrea_jax import init
from andrea_jax.tools import lens
from andrea_jax import model
from andrea_jax import step as step_lib
from andrea_jax.model_config import ModelConfig

# A slope up to FLAT above muP's prediction is flat, one more than GROWS above grows: over
# a 4x wider model, 1.4x and 2x larger coordinates than muP predicts.
FLAT, GROWS = 0.25, 0.5
# muP's slope for the quantities whose prediction is not 0 (module docstring).
MUP_SLOPES = {"attn_logits": -0.5, "logits": -0.5}


@dataclasses.dataclass(frozen=True)
class Ladder:
  """The fixed part of every rung: all but ``d_model`` (and the parametrisation)."""
  n_layer: int = 2
  n_head: int = 4
  vocab_size: int = 64
  block_size: int = 16


def rung(ladder: Ladder, width: int, parametrization: str, base_width: int,
         **changes) -> ModelConfig:
  """The model of one width; ``changes`` are further ``ModelConfig`` fields (e.g. ``norm``)."""
  return ModelConfig(vocab_size=ladder.vocab_size, block_size=ladder.block_size,
                     d_model=width, n_layer=ladder.n_layer, n_head=ladder.n_head,
                     parametrization=parametrization, base_width=base_width,
                     attention_impl="xla", **changes)


def check_settings(t) -> step_lib.TrainConfig:
  """The ``train`` group ``t`` (a positive ``t.steps``) with a constant rate, no clipping and
  no weight decay, as a ``step.TrainConfig``."""
  return step_lib.TrainConfig(**{**t, "warmup_steps": 0, "min_lr_ratio": 1.0, "grad_clip": 0.0,
                                 "weight_decay": 0.0})


def activations(params, tokens_BT, cfg: ModelConfig) -> dict[str, jax.Array]:
  """The activations of the module docstring, by name; attention logits at causal entries."""
  seen = lens.capture(params, tokens_BT, cfg, streams=True, outputs=True)
  out = dict(zip((f"stream.{p}" for p in lens.point_names(cfg)), seen["streams_PBTD"]))
  out.update(zip((f"branch.{s}" for s in lens.sublayer_names(cfg)), seen["outputs_SBTD"]))
  T = tokens_BT.shape[1]
  causal = np.tril(np.ones((T, T), bool))  # concrete: a boolean index
  for l in range(cfg.n_layer):
    out[f"attn_logits.{l}"] = diagnostics.attention_logits(params, tokens_BT, cfg, l)[..., causal]
  out["logits"] = seen["logits_BTV"][..., :cfg.vocab_size]
  return {k: v.astype(jnp.float32) for k, v in out.items()}


# Each rung's programs run once, on a tiny batch: compiling dominates, and XLA's cheaper
# CPU code generation (level 0, and the classic loop emitter for fusions instead of the
# MLIR fusion emitters) compiles them in about a third of the time (ignored off CPUs).
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True,
                "xla_cpu_use_fusion_emitters": False}


def _jit(fn):
  return jax.jit(fn, compiler_options=FAST_COMPILE if jax.default_backend() == "cpu" else None)


def adam_updates(params, batch_BT, cfg: ModelConfig, optimizer, steps: int):
  """``steps`` updates of ``optimizer`` (``step.make_optimizer``'s) on the loss of one batch.

  Not ``step.train_step``: its divergence guard costs this check's tests about 15 % more CPU
  time (41 s against 36 s for the learning-rate rule), and nothing here diverges.
  """
  def update(carry, _):
    params, opt_state = carry
    grads = jax.grad(model.loss_fn)(params, batch_BT[:, :-1], batch_BT[:, 1:], cfg)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), None

  (params, _), _ = jax.lax.scan(update, (params, optimizer.init(params)), length=steps)
  return params


def measure(cfg: ModelConfig, t) -> dict[str, float]:
  """Train one rung ``t.steps`` Adam updates on one batch of ``t.batch_size`` rows and
  return its sizes, ``name@0`` and ``name@delta`` (``t``: a ``train`` group, through
  ``check_settings``; ``t.steps=0``: the sizes at initialisation alone)."""
  batch_BT = jax.random.randint(jax.random.key(t.seed + 1), (t.batch_size, cfg.block_size + 1),
                                0, cfg.vocab_size)
  # Programs traced afresh for every rung (the tests swap muP's rules between calls); the
  # activations are one program, run before and after the updates.
  seen = _jit(lambda params: activations(params, batch_BT[:, :-1], cfg))
  mean_abs = _jit(lambda tree: jax.tree.map(lambda x: jnp.mean(jnp.abs(x)), tree))
  params = init.init_params(cfg, jax.random.key(t.seed))
  before = seen(params)
  sizes = {f"{k}@0": v for k, v in mean_abs(before).items()}
  if t.steps:
    optimizer = step_lib.make_optimizer(check_settings(t), cfg)
    after = seen(_jit(lambda p: adam_updates(p, batch_BT, cfg, optimizer, t.steps))(params))
    sizes |= {f"{k}@delta": v for k, v in mean_abs(jax.tree.map(jnp.subtract, after, before)).items()}
  return {k: float(v) for k, v in sizes.items()}


def slope(widths: Sequence[int], values: Sequence[float]) -> float:
  """Least-squares slope of ``log value`` against ``log width``; ``inf`` if a value is not
  finite (a rung that diverged has blown up)."""
  if not np.all(np.isfinite(values)):
    return math.inf
  return float(np.polyfit(np.log(widths), np.log(values), 1)[0])


def coord_check(widths: Sequence[int], parametrization: str, t, base_width: int | None = None,
                ladder: Ladder = Ladder(), **changes) -> dict:
  """``{"widths", "sizes": {name: [per width]}, "slopes": {name: slope}}`` for one parametrisation.

  ``t``: the ``train`` group (its learning rate, steps, batch size, seed and Adam settings;
  see ``check_settings``). ``base_width`` defaults to the narrowest width.
  """
  base_width = min(widths) if base_width is None else base_width
  rows = [measure(rung(ladder, w, parametrization, base_width, **changes), t) for w in widths]
  names = list(rows[0])
  table = {name: [r[name] for r in rows] for name in names}
  return {"widths": list(widths), "sizes": table,
          "slopes": {name: slope(widths, table[name]) for name in names}}


def mup_slope(name: str) -> float:
  """muP's predicted slope for a quantity such as ``logits@0`` or ``stream.0.mlp@delta``."""
  what, when = name.split("@")
  return MUP_SLOPES.get(what.split(".")[0], 0.0) if when == "0" else 0.0


def excess(result: dict) -> dict[str, float]:
  """Each quantity's slope above muP's prediction."""
  return {q: s - mup_slope(q) for q, s in result["slopes"].items()}


def verdict(result: dict) -> str:
  """``"flat"`` (no slope above its prediction by FLAT), ``"grows"`` (one by GROWS) or
  ``"unclear"``."""
  top = max(excess(result).values())
  return "flat" if top < FLAT else "grows" if top > GROWS else "unclear"

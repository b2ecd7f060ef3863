"""The coordinate check of Tensor Programs V: activation sizes after a few Adam steps, across widths.

Each width of a ladder (``d_model``; heads, depth, vocabulary and data held fixed) trains
for ``steps`` Adam updates at one learning rate, from one seed, on one fixed batch, with
the project's own optimizer and train step (``train.make_optimizer``, ``train_step``;
constant rate, no clipping and no weight decay, so nothing but the parametrisation ties
the widths together). On that batch, at initialisation (``@0``) and after the updates
(``@<steps>``), it measures the size of a coordinate, as Yang et al.'s plots do:

    stream.embed, stream.0.attn, ...  mean |x| of the residual stream at each capture point
                                      of ``lens.capture`` (after the embedding, each sublayer)
    branch.0.attn, branch.0.mlp, ...  mean |f| of what each sublayer's branch adds
    logits                            mean |logit| of the output logits (real vocabulary)
    attn_logit_max.l                  the largest attention logit of layer l

A width rule is right when no size grows with width. A quantity's growth is its
``slope``: the least-squares slope of log size against log width (1: doubles when the
width doubles). Under the standard parametrisation Adam's updates of a ``D x D`` matrix
move its outputs by ``lr * D``, and GPT-2's fixed N(0, 0.02) init lets a hidden output
grow like ``sqrt(D)``: slopes of 0.5 to 1 and more. Under muP no slope exceeds ``FLAT``
(``flat``). Sizes may shrink: muP's output and attention logits at init fall like
``1 / sqrt(width)`` (the readout multiplier and ``1 / d_head`` on products of independent
coordinates), as in the ``mup`` package's coordinate checks, whose rule is that nothing
blows up. ``python -m experiments.coord_check`` prints the table;
``tests/test_coord_check.py`` checks that a muP that forgets any one of its rules fails.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import lens
from andrea_jax import model
from andrea_jax import train

# A slope below FLAT does not grow, one above GROWS does: a 4x wider model with slope 0.25
# has coordinates 1.4x larger, with slope 0.5 2x larger.
FLAT, GROWS = 0.25, 0.5


@dataclasses.dataclass(frozen=True)
class Ladder:
  """The fixed part of every rung: all but ``d_model`` (and the parametrisation)."""
  n_layer: int = 2
  n_head: int = 4
  vocab_size: int = 64
  block_size: int = 16


def rung(ladder: Ladder, width: int, parametrization: str, base_width: int,
         **changes) -> model.ModelConfig:
  """The model of one width; ``changes`` are further ``ModelConfig`` fields (e.g. ``norm``)."""
  return model.ModelConfig(vocab_size=ladder.vocab_size, block_size=ladder.block_size,
                           d_model=width, n_layer=ladder.n_layer, n_head=ladder.n_head,
                           parametrization=parametrization, base_width=base_width,
                           attention_impl="xla", **changes)


def check_settings(t):
  """A copy of the ``train`` group ``t`` with a constant rate, no clipping, no weight decay."""
  t = t.copy_and_resolve_references()
  t.update(warmup_steps=0, min_lr_ratio=1.0, grad_clip=0.0, weight_decay=0.0)
  return t


def sizes(params, tokens_BT, cfg: model.ModelConfig) -> dict[str, jax.Array]:
  """The coordinate sizes of the module docstring, by name (without the ``@step``)."""
  seen = lens.capture(params, tokens_BT, cfg, streams=True, outputs=True)
  _, terms = model.loss_terms(params, tokens_BT, tokens_BT, cfg, stats=True)
  mean_abs = lambda x: jnp.mean(jnp.abs(x.astype(jnp.float32)))
  out = {f"stream.{p}": mean_abs(x) for p, x in zip(lens.point_names(cfg), seen["streams_PBTD"])}
  out.update({f"branch.{s}": mean_abs(f) for s, f in zip(lens.sublayer_names(cfg), seen["outputs_SBTD"])})
  out["logits"] = mean_abs(seen["logits_BTV"][..., :cfg.vocab_size])
  out.update({f"attn_logit_max.{l}": m for l, m in enumerate(terms["attn_logit_max"])})
  return out


def measure(cfg: model.ModelConfig, t) -> dict[str, float]:
  """Train one rung ``t.steps`` Adam updates on one batch of ``t.batch_size`` rows and
  return its ``sizes`` (``t``: a ``train`` group, through ``check_settings``)."""
  t = check_settings(t)
  optimizer, schedule = train.make_optimizer(t, cfg), train.make_schedule(t)
  batch = jax.random.randint(jax.random.key(t.seed + 1), (1, t.batch_size, cfg.block_size + 1),
                             0, cfg.vocab_size)
  step = functools.partial(train.train_step, cfg=cfg, optimizer=optimizer, schedule=schedule)

  @jax.jit  # one compile per rung, traced afresh: the tests swap muP's rules between calls
  def sizes_before_and_after(state):
    before = sizes(state["params"], batch[0, :, :-1], cfg)
    state, _ = jax.lax.scan(lambda s, _: step(s, batch), state, length=t.steps)
    return before, sizes(state["params"], batch[0, :, :-1], cfg)

  state = train.init_state(cfg, optimizer, jax.random.key(t.seed))
  before, after = sizes_before_and_after(state)
  return {f"{k}@{step}": float(v) for step, values in ((0, before), (t.steps, after))
          for k, v in values.items()}


def slope(widths: Sequence[int], values: Sequence[float]) -> float:
  """Least-squares slope of ``log value`` against ``log width``."""
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


def verdict(result: dict) -> str:
  """``"flat"`` (every slope < FLAT), ``"grows"`` (some slope > GROWS) or ``"unclear"``."""
  top = max(result["slopes"].values())
  return "flat" if top < FLAT else "grows" if top > GROWS else "unclear"

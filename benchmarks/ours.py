"""Our side of the training-step benchmark: the engine's step and the bare model step as
timed functions, and the engine step's compile time.

The engine's step is ``step.train_step`` with ``step.make_optimizer`` (clipping,
divergence guard, accumulation, donated state), compiled ahead of its first call so that
the compile's seconds are known (``Step.compile_s``). The bare model step is ``value_and_grad``
of the loss and the engine's AdamW without its clipping, nothing else, so the engine's
overhead shows beside it.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from andrea_jax import model
from andrea_jax import step as step_lib
from benchmarks import shapes


def model_only_optimizer(t) -> optax.GradientTransformation:
  """The engine's AdamW and schedule (``step.make_optimizer``) without the clipping."""
  return step_lib.make_optimizer(dataclasses.replace(t, grad_clip=0.0))


def model_only_step(state: dict, batch_ABT, cfg, optimizer):
  """The bare model step: ``value_and_grad`` of the loss and one optimizer update.

  Not ``step.train_step``: it is the step without the engine's guard and accumulation, on
  purpose, what the engine's overhead is measured against.
  """
  loss, grads = jax.value_and_grad(model.loss_fn)(state["params"], batch_ABT[0, :, :-1],
                                                  batch_ABT[0, :, 1:], cfg)
  updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
  return {**state, "params": optax.apply_updates(state["params"], updates),
          "opt_state": opt_state}, {"loss": loss}


class Step(NamedTuple):
  """One side's step, ready to time: ``run(tokens=None)`` runs one step (on ``tokens``, a
  ``(1, batch, seq + 1)`` array, or the fixed random batch) and returns its loss; ``cfg`` is
  the model it runs; ``compile_s`` the seconds its program took to compile."""
  run: Callable
  cfg: model.ModelConfig
  compile_s: float


def ours_step(config, batch: int, seq: int, bare: bool = False) -> Step:
  """One jitted, donated step, compiled ahead of its first call: ``step.train_step``, or
  the bare one."""
  cfg = shapes.model_config(config, seq)
  t = step_lib.TrainConfig(**config.train)
  optimizer = model_only_optimizer(t) if bare else step_lib.make_optimizer(t)
  start = time.perf_counter()
  state = jax.jit(step_lib.init_state, static_argnums=(0, 1))(cfg, optimizer, jax.random.key(0))
  step = jax.jit(functools.partial(model_only_step if bare else step_lib.train_step, cfg=cfg,
                                   optimizer=optimizer), donate_argnums=0)
  fixed = random_tokens(cfg, batch, seq, 0)
  step = step.lower(state, fixed).compile()
  compile_s = time.perf_counter() - start
  holder = {"state": state}

  def run(tokens=None):
    holder["state"], m = step(holder["state"], fixed if tokens is None else tokens)
    return float(jax.block_until_ready(m["loss"]))

  return Step(run, cfg, compile_s)


def random_tokens(cfg, batch: int, seq: int, seed: int) -> jax.Array:
  """A ``(1, batch, seq + 1)`` batch of random token ids (one microbatch)."""
  ids = np.random.default_rng(seed).integers(0, cfg.vocab_size, (1, batch, seq + 1), np.int32)
  return jax.device_put(ids)


def compile_seconds(config, n_layer: int, seq: int, scan: bool) -> float:
  """Seconds to compile the train step at ``n_layer`` layers, with lax.scan or unrolled."""
  cfg = model.resolve_auto(model.ModelConfig(**{**config.model, "n_layer": n_layer,
                                                "scan_unroll": 1 if scan else n_layer}),
                           verbose=False)
  optimizer = step_lib.make_optimizer(step_lib.TrainConfig(**config.train))
  state = jax.eval_shape(lambda k: step_lib.init_state(cfg, optimizer, k), jax.random.key(0))
  batch = jax.ShapeDtypeStruct((1, 1, seq + 1), jnp.int32)
  step = jax.jit(functools.partial(step_lib.train_step, cfg=cfg, optimizer=optimizer))
  start = time.perf_counter()
  step.lower(state, batch).compile()
  return time.perf_counter() - start

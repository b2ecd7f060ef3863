"""``AndreaLM``: a Flax Linen wrapper over the pure functions of ``andrea_jax.model``.

For users who compose Flax modules. Its ``params`` collection has exactly the layout of
``model.init_params`` (``wte``, ``wpe``, ``blocks`` stacked over layers, ``ln_f`` or
``lm_head`` as the config asks), and its call runs ``model.forward``, so the same
parameters give the same logits either way::

    module = AndreaLM(cfg)
    logits = module.apply({"params": model.init_params(cfg, key)}, tokens)
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax

from andrea_jax import model


@functools.partial(jax.jit, static_argnums=(1, 2))
def _init_entry(key: jax.Array, cfg: model.ModelConfig, name: str):
  # Under jit, XLA drops the parts of init_params that this entry does not need.
  return model.init_params(cfg, key)[name]


class AndreaLM(nn.Module):
  """The ANDREA language model; ``__call__(tokens (B, T)) -> logits (B, T, V)``."""

  cfg: model.ModelConfig

  @nn.compact
  def __call__(self, tokens_BT: jax.Array) -> jax.Array:
    names = ["wte", "wpe", "blocks"]
    names += ["ln_f"] if self.cfg.norm == "pre" else []
    names += [] if self.cfg.tie_embeddings else ["lm_head"]
    params = {name: self.param(name, lambda key, n=name: _init_entry(key, self.cfg, n))
              for name in names}
    return model.forward(params, tokens_BT, self.cfg)

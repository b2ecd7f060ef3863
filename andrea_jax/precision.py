"""The one rule of mixed precision that every kernel shares.

Norms, softmax, log-sum-exp and the loss run in at least float32 even when the
activations are bfloat16 (float64 stays float64, for the gradient checks).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def at_least_f32(x: jax.Array) -> jax.Array:
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))

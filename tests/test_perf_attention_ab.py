"""The key-tiled candidate kernel of benchmarks/attention_candidates.py (issue 31's A/B):
exact causal attention, values and gradients, under every kind of cut its plan allows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from andrea_jax import attention
from benchmarks import attention_ab
from benchmarks import attention_candidates as candidates

PLANS = [candidates.TilePlan(3, 3, 3, 2, 3),        # small tiles, a partial last block
         candidates.TilePlan(5, 3, 13, 0, 2),       # key tiles narrower than query blocks
         candidates.TilePlan(3, 5, 2, 3, 1),        # wider; forward tiles of 2
         candidates.TilePlan(4, 1024, 1024, 0, 0)]  # one tile per query block (xla_flash's cut)


@pytest.mark.parametrize("plan", PLANS)
def test_the_key_tiled_candidate_equals_the_masked_full_softmax_values_and_grads(plan):
  B, T, H, K = 2, 13, 3, 4
  q, k, v = (jax.random.normal(jax.random.key(i), (B, T, H, K)) for i in range(3))
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
  full = jax.jit(lambda q, k, v: attention.causal_attend(q, k, v, mask))
  tiled = jax.jit(lambda q, k, v: candidates.key_tiled_causal_attention(q, k, v, plan))
  np.testing.assert_allclose(tiled(q, k, v), full(q, k, v), atol=1e-6)
  grad = lambda f: jax.jit(jax.grad(lambda *a: jnp.sum(jnp.sin(f(*a))), argnums=(0, 1, 2)))(q, k, v)
  for g_tiled, g_full in zip(grad(tiled), grad(full)):
    np.testing.assert_allclose(g_tiled, g_full, atol=1e-5)


def test_variant_names_set_the_plan_and_unknown_kinds_name_the_choices():
  q = jax.random.normal(jax.random.key(0), (1, 8, 2, 4))
  out = attention_ab.variant("kt_q4_k4_f8_g1_h2")(q, q, q)
  np.testing.assert_allclose(out, attention_ab.variant("base")(q, q, q), atol=1e-6)
  with pytest.raises(ValueError, match="kt followed by TilePlan fields"):
    attention_ab.variant("tiled_q4")

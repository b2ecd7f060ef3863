"""Model options for speed: the padded vocabulary (GPUs) and the chunked cross-entropy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from andrea_jax import model
from andrea_jax import sample

V = 37


def small(**kw):
  base = dict(vocab_size=V, block_size=16, d_model=16, n_layer=2, n_head=2, attention_block=4,
              attention_impl="xla_flash")
  return model.ModelConfig(**{**base, **kw})


def tokens(seed=0, shape=(2, 16)):
  return jax.random.randint(jax.random.key(seed), shape, 0, V)


def padded_copy(params, cfg_pad, fill=5.0):
  """The unpadded params with padding rows that would dominate the logits were they not masked."""
  pad, D = cfg_pad.padded_vocab - V, params["wte"].shape[1]
  rows = fill * jax.random.normal(jax.random.key(99), (pad, D))  # not constant: LN output sums to 0
  out = dict(params)
  out["wte"] = jnp.concatenate([params["wte"], rows])
  if "lm_head" in params:
    out["lm_head"] = jnp.concatenate([params["lm_head"], rows.T], axis=1)
  return out


def test_padded_vocab_rounds_up_and_is_counted():
  assert small(vocab_pad_multiple=8).padded_vocab == 40
  assert small(vocab_pad_multiple=37).padded_vocab == 37
  assert model.ModelConfig(vocab_size=8449, block_size=8, d_model=8, n_layer=1, n_head=1,
                           vocab_pad_multiple=128).padded_vocab == 8576
  cfg = small(vocab_pad_multiple=16)
  params = model.init_params(cfg, jax.random.key(0))
  assert params["wte"].shape == (48, 16)
  assert sum(a.size for a in jax.tree.leaves(params)) == model.count_params(cfg)
  # The same key gives the same real rows: a padded model is the same model.
  plain = model.init_params(small(), jax.random.key(0))
  np.testing.assert_array_equal(params["wte"][:V], plain["wte"])


@pytest.mark.parametrize("tied", [True, False])
def test_padded_model_loss_and_grads_equal_the_unpadded_model(tied):
  cfg, cfg_pad = small(tie_embeddings=tied), small(tie_embeddings=tied, vocab_pad_multiple=16)
  params = model.init_params(cfg, jax.random.key(0))
  params_pad = padded_copy(params, cfg_pad)
  x, y = tokens(0), tokens(1)
  logits = jax.jit(model.forward, static_argnums=2)(params_pad, x, cfg_pad)
  assert logits.shape[-1] == 48 and bool(jnp.all(logits[..., V:] == -jnp.inf))
  loss_and_grads = jax.jit(jax.value_and_grad(model.loss_fn), static_argnums=3)  # one compile each
  loss, grads = loss_and_grads(params, x, y, cfg)
  loss_pad, grads_pad = loss_and_grads(params_pad, x, y, cfg_pad)
  np.testing.assert_allclose(loss_pad, loss, rtol=1e-6)
  name = "wte" if tied else "lm_head"
  real = (slice(None, V), slice(None)) if tied else (slice(None), slice(None, V))
  pad = (slice(V, None), slice(None)) if tied else (slice(None), slice(V, None))
  np.testing.assert_allclose(grads_pad[name][real], grads[name], atol=1e-7)
  assert bool(jnp.all(grads_pad[name][pad] == 0))  # padding gets no gradient
  for key in ("wpe", "blocks"):
    for a, b in zip(jax.tree.leaves(grads_pad[key]), jax.tree.leaves(grads[key])):
      np.testing.assert_allclose(a, b, atol=1e-7)


@pytest.mark.parametrize("temperature, top_k", [(1.0, 0), (0.0, 0), (2.0, 5)])
def test_sampling_never_returns_a_padded_id(temperature, top_k):
  cfg_pad = small(vocab_pad_multiple=64)
  params = padded_copy(model.init_params(small(), jax.random.key(0)), cfg_pad, fill=50.0)
  out = sample.generate(params, cfg_pad, np.zeros((4, 2), np.int32), 12, jax.random.key(3),
                        temperature=temperature, top_k=top_k)
  assert int(jnp.max(out)) < V


# The hand-written backward with PaLM's z-loss term (and without it: post-norm), and muP's
# readout multiplier on the head's input.
@pytest.mark.parametrize("changes, chunk, masked, z_loss", [
    (dict(), 5, False, 0.1),  # B*T = 32 rows: chunks of 5 leave a ragged last chunk
    (dict(tie_embeddings=False, vocab_pad_multiple=16, parametrization="mup", base_width=8), 64,
     True, 0.1),  # one padded chunk
    (dict(norm="post"), 8, True, 0.0)])
def test_chunked_loss_equals_the_plain_loss_values_and_grads(changes, chunk, masked, z_loss):
  cfg = small(n_layer=1, **changes)
  cfg_chunked = small(n_layer=1, loss_chunk=chunk, **changes)
  params = model.init_params(cfg, jax.random.key(0))
  x, y = tokens(0), tokens(1)
  m = (jax.random.uniform(jax.random.key(2), y.shape) > 0.3).astype(jnp.int32) if masked else None
  terms = lambda c: jax.jit(jax.value_and_grad(model.loss_terms, has_aux=True), static_argnums=(3, 5))(
      params, x, y, c, m, z_loss)
  (loss, parts), grads = terms(cfg)
  (loss_c, parts_c), grads_c = terms(cfg_chunked)
  np.testing.assert_allclose(loss_c, loss, rtol=1e-6)
  for k in parts:
    np.testing.assert_allclose(parts_c[k], parts[k], rtol=1e-6, err_msg=k)
  for a, b in zip(jax.tree.leaves(grads_c), jax.tree.leaves(grads)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  assert z_loss == 0 or float(parts["z_loss"]) > 1e-3  # large enough to matter in the check
  # Without differentiation (evaluation) the primal path gives the same value.
  np.testing.assert_allclose(model.loss_fn(params, x, y, cfg_chunked, m), parts["nll"], rtol=1e-6)

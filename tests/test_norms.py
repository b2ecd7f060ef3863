"""The norm types (model.norm_type) in every placement (model.norm): the seed's toy block
against numpy, gradients against float64 finite differences, RMSNorm's scale invariance,
causality, the parameter count, the Flax twin, KV-cache sampling and a short training run."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

from andrea_jax import errors
from andrea_jax import model
from andrea_jax import sample
from andrea_jax.model import ModelConfig
from andrea_jax.tools import toy
from andrea_jax.tools.flax_model import AndreaLM, to_flax

COMBOS = list(itertools.product(model.NORMS, model.NORM_TYPES))
TINY = dict(vocab_size=23, block_size=8, d_model=8, n_layer=2, n_head=2)
EPS = 1e-5


def tiny(norm, norm_type, **changes):
  return ModelConfig(**{**TINY, "norm": norm, "norm_type": norm_type, **changes})


# ----------------------------------------------------------------------------- numpy, written out here


def np_norm(x, norm_type, alpha=0.7, scale=None, bias=None):
  scale = np.ones_like(x) if scale is None else scale
  bias = np.zeros_like(x) if bias is None else bias
  if norm_type == "layernorm":
    return (x - x.mean()) / np.sqrt(x.var() + EPS) * scale + bias
  if norm_type == "rmsnorm":
    return x / np.sqrt(np.mean(x * x) + EPS) * scale
  return np.tanh(alpha * x) * scale + bias


def np_branch(v):
  return 0.8 * np.tanh(0.6 * v + 0.3 * np.roll(v, -1))


NP_PLACEMENTS = {"pre": lambda x, n: x + np_branch(n(x)), "post": lambda x, n: n(x + np_branch(x)),
                 "peri": lambda x, n: x + n(np_branch(n(x))),  # the out norm: same leaves here
                 "reordered": lambda x, n: x + n(np_branch(x))}


def toy_params(norm_type, scale, bias, alpha=0.7):
  p = {"layernorm": {"scale": scale, "bias": bias}, "rmsnorm": {"scale": scale},
       "dyt": {"alpha": jnp.asarray(alpha), "scale": scale, "bias": bias}}
  return p[norm_type]


@pytest.mark.parametrize("norm, norm_type", COMBOS)
def test_toy_block_in_every_placement_and_norm_type_matches_numpy(norm, norm_type):
  scale, bias = np.array([1.0, 0.5, 2.0, -1.0]), np.array([0.1, 0.0, -0.2, 0.3])
  expected = NP_PLACEMENTS[norm](toy.X, lambda h: np_norm(h, norm_type, 0.7, scale, bias))
  p = toy_params(norm_type, scale, bias)
  got = model.residual_sublayer(jnp.asarray(toy.X), toy.branch, p, norm, EPS, norm_type=norm_type,
                                out_params=p if model.placement(norm).out_norm else None)
  np.testing.assert_allclose(got, expected, atol=1e-5)
  assert set(NP_PLACEMENTS) == set(model.NORMS)  # a new placement needs its numpy row here


def test_rmsnorm_has_no_mean_and_dyt_no_statistics():
  x = jnp.asarray(toy.X)  # mean 0.5: LayerNorm and RMSNorm differ on it
  ones = jnp.ones(4)
  assert not np.allclose(model.rms_norm(x, ones), model.layer_norm(x, ones, jnp.zeros(4)))
  np.testing.assert_allclose(model.dyt(x, jnp.asarray(0.5), ones, jnp.zeros(4)), np.tanh(0.5 * toy.X),
                             rtol=1e-6)


@pytest.mark.parametrize("c", [0.01, 3.0, 250.0])
def test_rmsnorm_of_c_x_equals_rmsnorm_of_x(c):
  x = jax.random.normal(jax.random.key(0), (3, 16)) * 2.0
  scale = jax.random.normal(jax.random.key(1), (16,))
  np.testing.assert_allclose(model.rms_norm(c * x, scale, 1e-12), model.rms_norm(x, scale, 1e-12),
                             rtol=1e-5, atol=1e-6)


def test_norm_gradients_match_float64_finite_differences():
  with jax.enable_x64(True):
    x = jax.random.normal(jax.random.key(0), (3, 6), jnp.float64)
    scale = jax.random.normal(jax.random.key(1), (6,), jnp.float64)
    bias = jax.random.normal(jax.random.key(2), (6,), jnp.float64)
    check_grads(lambda x, s: model.rms_norm(x, s, EPS), (x, scale), order=2, modes=["rev"])
    check_grads(lambda x, a, s, b: model.dyt(x, a, s, b), (x, jnp.asarray(0.6), scale, bias),
                order=2, modes=["rev"])


# ----------------------------------------------------------------------------- the whole model


@pytest.mark.parametrize("norm, norm_type", COMBOS)
def test_count_params_equals_the_initialised_leaves(norm, norm_type):
  cfg = tiny(norm, norm_type)
  params = model.init_params(cfg, jax.random.key(0))
  assert model.count_params(cfg) == sum(a.size for a in jax.tree.leaves(params))
  if norm_type == "dyt":
    np.testing.assert_array_equal(params["blocks"]["ln_1"]["alpha"], [0.5, 0.5])
  if norm_type == "rmsnorm":
    assert set(params["blocks"]["ln_1"]) == {"scale"}


def _perturbed(params, key):
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(tree, [a + 0.1 * jax.random.normal(k, a.shape, a.dtype)
                                   for a, k in zip(leaves, keys)])


@pytest.mark.parametrize("norm, norm_type", COMBOS)
def test_flax_twin_and_kv_cache_equal_the_pure_model(norm, norm_type):
  cfg = tiny(norm, norm_type)
  # Perturbed so that scale 1 / bias 0 / alpha 0.5 hide no wrong leaf.
  params = _perturbed(model.init_params(cfg, jax.random.key(0)), jax.random.key(1))
  tokens = jax.random.randint(jax.random.key(2), (2, 8), 0, cfg.vocab_size)
  want = model.forward(params, tokens, cfg)
  flax_params = AndreaLM(cfg).init(jax.random.key(0), tokens)["params"]
  assert jax.tree.structure(flax_params) == jax.tree.structure(to_flax(params))
  np.testing.assert_allclose(AndreaLM(cfg).apply({"params": to_flax(params)}, tokens), want,
                             atol=2e-5, rtol=1e-5)
  cache = sample.init_cache(cfg, 2, 8)
  first, cache = sample.forward_cached(params, tokens[:, :5], cache, 0, cfg)
  rest, _ = sample.forward_cached(params, tokens[:, 5:], cache, 5, cfg)
  np.testing.assert_allclose(jnp.concatenate([first, rest], 1), want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("norm, norm_type", COMBOS)
def test_causal_in_every_combination(norm, norm_type):
  cfg = tiny(norm, norm_type)
  params = _perturbed(model.init_params(cfg, jax.random.key(0)), jax.random.key(1))
  tokens = jax.random.randint(jax.random.key(2), (1, 8), 0, cfg.vocab_size)
  changed = tokens.at[0, 5].set((tokens[0, 5] + 1) % cfg.vocab_size)
  a, b = model.forward(params, tokens, cfg), model.forward(params, changed, cfg)
  np.testing.assert_array_equal(a[:, :5], b[:, :5])
  assert not np.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize("norm, norm_type", COMBOS)
def test_one_layer_few_steps_learns(norm, norm_type):
  cfg = tiny(norm, norm_type, n_layer=1)
  params = model.init_params(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(3), (4, 8), 0, cfg.vocab_size)
  opt = optax.adam(3e-2)

  @jax.jit
  def step(params, state):
    loss, g = jax.value_and_grad(model.loss_fn)(params, tokens[:, :-1], tokens[:, 1:], cfg)
    updates, state = opt.update(g, state, params)
    return optax.apply_updates(params, updates), state, loss

  state, losses = opt.init(params), []
  for _ in range(30):
    params, state, loss = step(params, state)
    losses.append(float(loss))
  assert losses[-1] < 0.5 * losses[0], losses


def test_unknown_norm_type_and_bad_alpha_are_refused_by_name():
  with pytest.raises(errors.ConfigError, match="ModelConfig.norm_type='batchnorm': expected one of"):
    tiny("pre", "batchnorm")
  with pytest.raises(errors.ConfigError, match="ModelConfig.dyt_alpha_init=0"):
    tiny("pre", "dyt", dyt_alpha_init=0)

"""Issue 60's model switches: rotary positions (model.position="rope", Su et al. 2021), ReLU²
(model.activation="relu2", So et al. 2021) and no biases (model.bias=False, nanoGPT's flag).

RoPE against an explicit numpy rotation matrix, its relative-position property (in the rotation
and in the model's attention), its gradients against float64 finite differences, causality, the
KV-cache sampler, the Flax twin, the lens, the parameter and FLOP counts, the config's refusals
and a short training run of each switch.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

from andrea_jax import attention
from andrea_jax import branches
from andrea_jax import errors
from andrea_jax import model
from andrea_jax import sample
from andrea_jax.model import ModelConfig
from andrea_jax.tools import flax_model
from andrea_jax.tools import lens
from andrea_jax.tools.flax_model import AndreaLM, to_flax
from experiments.configs import tiny

TINY = dict(vocab_size=23, block_size=12, d_model=16, n_layer=2, n_head=2)
ROPE = dict(position="rope")
# Each switch alone, and all three with qk_norm (rotated after the norm) and an untied head.
SWITCHES = {"rope": ROPE, "relu2": dict(activation="relu2"), "no_bias": dict(bias=False),
            "all": dict(position="rope", activation="relu2", bias=False, qk_norm=True,
                        tie_embeddings=False)}


# Compiled once per config (eager calls run op by op: several times slower).
forward = jax.jit(model.forward, static_argnums=2)
forward_cached = jax.jit(sample.forward_cached, static_argnums=4)  # pos traced, as in decoding
init_params = jax.jit(model.init_params, static_argnums=0)


def tiny_cfg(**changes):
  return ModelConfig(**{**TINY, **changes})


@functools.partial(jax.jit, static_argnums=0)
def lively_params(cfg):
  """Initialised, then every leaf moved off its init (scale 1, bias 0), so no wrong leaf hides."""
  leaves, tree = jax.tree.flatten(model.init_params(cfg, jax.random.key(0)))
  keys = jax.random.split(jax.random.key(1), len(leaves))
  return jax.tree.unflatten(tree, [a + 0.2 * jax.random.normal(k, a.shape, a.dtype)
                                   for a, k in zip(leaves, keys)])


def tokens_for(cfg, shape=(2, 12), seed=2):
  return jax.random.randint(jax.random.key(seed), shape, 0, cfg.vocab_size)


def np_rope(x_TK, positions, base=10000.0):
  """Su et al. 2021, eq. 15: x at position m times the block-diagonal R_{Theta,m}, built here."""
  T, K = x_TK.shape
  out = np.empty_like(x_TK, dtype=np.float64)
  for t, m in enumerate(positions):
    R = np.zeros((K, K))
    for i in range(K // 2):
      a = m * base ** (-2 * i / K)
      R[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    out[t] = R @ x_TK[t]
  return out


# ----------------------------------------------------------------------------- the rotation


def test_rope_equals_the_papers_rotation_matrix_in_numpy():
  x = np.random.default_rng(0).standard_normal((2, 5, 3, 8)).astype(np.float32)  # (B, T, H, K)
  positions = np.array([0, 1, 7, 300, 1023])
  for base in (10000.0, 500.0):
    want = np.stack([np.stack([np_rope(x[b, :, h], positions, base) for h in range(3)], 1)
                     for b in range(2)])
    # float32 angles: m theta is exact to ~6e-5 rad at m = 1023.
    np.testing.assert_allclose(branches.rope(jnp.asarray(x), positions, base), want, atol=1e-4)
    np.testing.assert_allclose(flax_model.rotate(jnp.asarray(x), jnp.asarray(positions), base),
                               want, atol=1e-4)
  np.testing.assert_array_equal(branches.rope(jnp.asarray(x), np.zeros(5), 10000.0), x)  # m = 0


def test_rope_scores_depend_only_on_the_offset():
  q, k = jax.random.normal(jax.random.key(0), (2, 1, 10, 2, 8))
  scores = lambda shift: jnp.einsum("bthk,bshk->bhts", branches.rope(q, jnp.arange(10) + shift),
                                    branches.rope(k, jnp.arange(10) + shift))
  for shift in (1, 37, 1000):
    np.testing.assert_allclose(scores(shift), scores(0), atol=1e-4)
  # ... and the offset does matter: the same q and k, one of them one place further on.
  moved = jnp.einsum("bthk,bshk->bhts", branches.rope(q, jnp.arange(10)),
                     branches.rope(k, jnp.arange(10) + 1))
  assert not np.allclose(moved, scores(0), atol=1e-2)


def test_rope_gradients_match_float64_finite_differences():
  with jax.enable_x64(True):
    x = jax.random.normal(jax.random.key(0), (1, 4, 2, 6), jnp.float64)
    check_grads(lambda x: branches.rope(x, jnp.arange(4) + 3, 100.0), (x,), order=2, modes=["rev", "fwd"])
    # The rotation is orthogonal: its vector-Jacobian product is the inverse rotation.
    g = jax.grad(lambda x: jnp.sum(branches.rope(x, jnp.arange(4), 100.0) * x))(x)
    np.testing.assert_allclose(
        g, branches.rope(x, jnp.arange(4), 100.0) + branches.rope(x, -jnp.arange(4), 100.0),
        atol=1e-12)


# ----------------------------------------------------------------------------- in the model


def test_the_models_attention_is_unchanged_by_shifting_every_position():
  cfg = tiny_cfg(**ROPE, qk_norm=True)
  attn = jax.tree.map(lambda a: a[0], lively_params(cfg)["blocks"]["attn"])
  h = jax.random.normal(jax.random.key(3), (2, 12, cfg.d_model))
  mask = jnp.tril(jnp.ones((12, 12), bool))[None]

  @functools.partial(jax.jit, static_argnums=0)
  def scores_and_out(cfg, positions):
    q, k, v = branches.qkv_project(h, attn, cfg, positions)
    return jnp.einsum("bthk,bshk->bhts", q, k), attention.causal_attend(q, k, v, mask)

  at_zero = scores_and_out(cfg, jnp.arange(12))
  for shift in (5, 700):
    for got, want in zip(scores_and_out(cfg, jnp.arange(12) + shift), at_zero):
      np.testing.assert_allclose(got, want, atol=2e-4)
  # ... but not by moving the keys alone; the learned model's q and k are not rotated.
  q, k, _ = jax.jit(branches.qkv_project, static_argnums=2)(h, attn, cfg)
  moved = jnp.einsum("bthk,bshk->bhts", q, branches.rope(k, jnp.ones(12)))
  assert not np.allclose(moved, at_zero[0], atol=1e-2)
  plain = dataclasses.replace(cfg, position="learned")
  assert not np.allclose(scores_and_out(plain, jnp.arange(12))[0], at_zero[0], atol=1e-2)


def test_a_rope_model_has_no_position_table_and_the_same_other_leaves():
  learned, rope = tiny_cfg(), tiny_cfg(**ROPE)
  a, b = init_params(learned, jax.random.key(0)), init_params(rope, jax.random.key(0))
  assert "wpe" in a and "wpe" not in b
  del a["wpe"]
  jax.tree.map(np.testing.assert_array_equal, a, b)


@pytest.mark.parametrize("impl", ["xla", "xla_flash"])
def test_rope_model_is_causal(impl):
  cfg = tiny_cfg(**ROPE, attention_impl=impl, attention_block=4)
  params = lively_params(cfg)
  tokens = tokens_for(cfg, (1, 12))
  changed = tokens.at[0, 7].set((tokens[0, 7] + 1) % cfg.vocab_size)
  a, b = forward(params, tokens, cfg), forward(params, changed, cfg)
  np.testing.assert_array_equal(a[:, :7], b[:, :7])
  assert not np.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize("impl", ["xla", "xla_flash"])
def test_every_attention_kernel_sees_rotated_queries_and_keys(impl):
  # The kernel's output and logit maximum against a plain masked softmax of the unrotated
  # q and k rotated here by the numpy rotation (cuDNN's kernel gets the same q and k: GPU only).
  cfg = tiny_cfg(**ROPE, attention_impl=impl, attention_block=4)
  attn = jax.tree.map(lambda a: a[0], lively_params(cfg)["blocks"]["attn"])
  h = jax.random.normal(jax.random.key(3), (2, 12, cfg.d_model))
  q, k, v = branches.qkv_project(h, attn, dataclasses.replace(cfg, position="learned"))
  rotate = lambda a: jnp.asarray(np.stack(
      [np.stack([np_rope(np.asarray(a[b, :, i], np.float64), range(12)) for i in range(2)], 1)
       for b in range(2)]), jnp.float32)
  q, k, causal = rotate(q), rotate(k), jnp.tril(jnp.ones((12, 12), bool))
  want = branches.out_project(attention.causal_attend(q, k, v, causal[None]), attn, cfg)
  out, logit_max = jax.jit(branches.attention, static_argnums=(2, 3))(h, attn, cfg, True)
  np.testing.assert_allclose(out, want, atol=1e-5)
  scores = jnp.einsum("bthk,bshk->bhts", q, k) / np.sqrt(cfg.head_dim)
  np.testing.assert_allclose(logit_max, jnp.max(jnp.where(causal, scores, -jnp.inf)), rtol=1e-5)


@pytest.mark.parametrize("name", ["rope", "all"])
def test_kv_cache_sampling_equals_the_full_forward(name):
  cfg = tiny_cfg(**SWITCHES[name])
  params = lively_params(cfg)
  tokens = tokens_for(cfg)
  want = forward(params, tokens, cfg)
  cache = sample.init_cache(cfg, 2, 12)
  first, cache = forward_cached(params, tokens[:, :5], cache, 0, cfg)
  chunks = [first]
  for t in range(5, 12):  # one token at a time, at absolute position t
    logits, cache = forward_cached(params, tokens[:, t:t + 1], cache, t, cfg)
    chunks.append(logits)
  np.testing.assert_allclose(jnp.concatenate(chunks, 1), want, atol=2e-5, rtol=1e-5)


def test_kv_cache_applies_the_embedding_multiplier():
  # The sampler embeds through model.embed, so the base model's embedding multiplier too.
  cfg = tiny_cfg(embedding_multiplier=1.5)
  params = lively_params(cfg)
  tokens = tokens_for(cfg)
  got, _ = forward_cached(params, tokens, sample.init_cache(cfg, 2, 12), 0, cfg)
  np.testing.assert_allclose(got, forward(params, tokens, cfg), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(SWITCHES))
def test_flax_twin_equals_the_pure_model(name):
  cfg = tiny_cfg(**SWITCHES[name])
  params = lively_params(cfg)
  tokens, targets = tokens_for(cfg), tokens_for(cfg, seed=3)
  module = AndreaLM(cfg)
  flax_init = jax.eval_shape(module.init, jax.random.key(0), tokens)["params"]
  assert jax.tree.structure(flax_init) == jax.tree.structure(to_flax(params))
  np.testing.assert_allclose(jax.jit(module.apply)({"params": to_flax(params)}, tokens),
                             forward(params, tokens, cfg), atol=2e-5, rtol=1e-5)
  if name != "all":
    return
  # Gradients too, once, with every switch on (each of their leaves gets one).
  loss = lambda logits: jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, targets))
  flax_grad = jax.jit(jax.grad(lambda p: loss(module.apply({"params": p}, tokens))))
  pure_grad = jax.jit(jax.grad(lambda p: loss(model.forward(p, tokens, cfg))))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4),
               flax_grad(to_flax(params)), to_flax(pure_grad(params)))


def test_lens_reads_a_rope_model_without_biases():
  cfg = tiny_cfg(**SWITCHES["all"])
  params = lively_params(cfg)
  tokens, targets = tokens_for(cfg), tokens_for(cfg, seed=3)
  want = forward(params, tokens, cfg)
  capture = jax.jit(lens.capture, static_argnums=2)
  np.testing.assert_allclose(capture(params, tokens, cfg)["logits_BTV"], want, atol=1e-6)
  out = jax.jit(lens.direct_logit_attribution, static_argnums=3)(params, tokens, targets, cfg)
  np.testing.assert_array_equal(out["bias_BT"], 0.0)  # no LayerNorm bias reaches the head
  total = out["embed_BT"] + out["sublayers_SBT"].sum(0)
  np.testing.assert_allclose(total, jnp.take_along_axis(want, targets[..., None], -1)[..., 0], atol=1e-4)


# ----------------------------------------------------------------------------- relu2 and bias=False


def test_relu2_is_relu_squared_in_the_mlp():
  x = jnp.asarray([-2.0, -0.5, 0.0, 0.5, 3.0])
  np.testing.assert_array_equal(branches.relu2(x), [0.0, 0.0, 0.0, 0.25, 9.0])
  cfg = tiny_cfg(activation="relu2", mlp_ratio=1.0)
  eye = jnp.eye(cfg.d_model)
  mlp = {"w_in": eye, "b_in": jnp.zeros(16), "w_out": eye, "b_out": jnp.zeros(16)}
  h = jax.random.normal(jax.random.key(0), (1, 3, 16))
  np.testing.assert_allclose(branches.mlp(h, mlp, cfg), np.maximum(h, 0) ** 2, rtol=1e-6)


def test_bias_false_has_no_bias_leaf_and_layer_norm_without_bias_is_zero_bias():
  cfg = tiny_cfg(bias=False, qk_norm=True)
  paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(
      jax.eval_shape(lambda: model.init_params(cfg, jax.random.key(0))))]
  assert not [p for p in paths if "bias" in p or "'b_" in p], paths
  assert any("q_norm" in p for p in paths)
  x, scale = jax.random.normal(jax.random.key(0), (3, 16)), jnp.linspace(0.5, 2, 16)
  np.testing.assert_array_equal(model.layer_norm(x, scale, None), model.layer_norm(x, scale, jnp.zeros(16)))


@pytest.mark.parametrize("changes", [*SWITCHES.values(), dict(bias=False, norm_type="dyt"),
                                     dict(bias=False, norm="peri", norm_type="rmsnorm")],
                         ids=[*SWITCHES, "no_bias-dyt", "no_bias-peri-rmsnorm"])
def test_count_params_equals_the_initialised_leaves(changes):
  cfg = tiny_cfg(**changes)
  leaves = jax.tree.leaves(jax.eval_shape(lambda: model.init_params(cfg, jax.random.key(0))))
  assert model.count_params(cfg) == sum(int(np.prod(a.shape)) for a in leaves)


def test_flops_per_token_count_no_positions_and_rope_has_none_to_drop():
  learned, rope = tiny_cfg(), tiny_cfg(**ROPE)
  attention_term = 12 * 2 * 2 * 8 * 12
  assert model.count_params(learned) - model.count_params(rope) == 12 * 16  # block_size x d_model
  assert model.flops_per_token(rope) == 6 * model.count_params(rope) + attention_term
  assert model.flops_per_token(learned) == model.flops_per_token(rope)


# ----------------------------------------------------------------------------- the config


@pytest.mark.parametrize("changes, match", [
    (dict(position="alibi"), r"^ModelConfig.position='alibi': expected one of \('learned', 'rope'\)$"),
    (dict(position="rope", rope_base=1.0), r"^ModelConfig.rope_base=1.0: expected a number above 1"),
    (dict(position="rope", d_model=18, n_head=2 * 3), r"^ModelConfig.position='rope' with head_dim=3"),
    (dict(bias="no"), r"^ModelConfig.bias='no': expected True or False$"),
    (dict(activation="relu3"), r"^ModelConfig.activation='relu3': expected one of \(.*'relu2'")])
def test_bad_values_are_one_line_naming_the_field(changes, match):
  with pytest.raises(errors.ConfigError, match=match) as e:
    tiny_cfg(**changes)
  assert "\n" not in str(e.value)


def test_the_tiny_variant_selects_rope():
  from andrea_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  typed = config_lib.RunConfig.from_configdict(tiny.get_config("position=rope,rope_base=500.0,bias=False"))
  assert (typed.model.position, typed.model.rope_base, typed.model.bias) == ("rope", 500.0, False)


# ----------------------------------------------------------------------------- training


@pytest.mark.parametrize("name", ["rope", "relu2", "no_bias"])
def test_one_layer_few_steps_learns(name):
  from test_norms import adam_losses  # pylint: disable=import-outside-toplevel
  cfg = tiny_cfg(**SWITCHES[name], n_layer=1)
  losses = adam_losses(cfg, tokens_for(cfg, (4, 12), seed=5), 30)
  assert losses[-1] < 0.5 * losses[0], losses

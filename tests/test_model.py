"""Tests of the pure-function model: the seed's numbers, the exact counts, and gradients."""

import ast
import dataclasses
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

from andrea_jax import configdict
from andrea_jax import cross_entropy
from andrea_jax import diagnostics
from andrea_jax import errors
from andrea_jax import model
from andrea_jax import mup as mup_lib
from andrea_jax import step as step_lib
from andrea_jax.model import ModelConfig
from andrea_jax.tools import toy
from andrea_jax.tools.flax_model import AndreaLM, from_flax, to_flax
from experiments.configs import andrea12m, andrea120m, andrea480m, tiny
from tests.test_imports import found_outside

SMALL = ModelConfig(vocab_size=61, block_size=16, d_model=32, n_layer=3, n_head=4)


def small(**changes):
  return ModelConfig(**{**SMALL.__dict__, **changes})


def random_tokens(cfg, shape=(2, 12), seed=0):
  return jax.random.randint(jax.random.key(seed), shape, 0, cfg.vocab_size)


# ----------------------------------------------------------------------------- the seed's toy block

TOY_X = toy.X
toy_branch = toy.branch
TOY_LN = toy.LN_PARAMS


def test_toy_block_reproduces_the_seed_table():
  rows = toy.table()
  for name, expected in toy.SEED_TABLE.items():
    np.testing.assert_allclose(rows[name], expected, atol=5e-4, err_msg=name)
  # Independently of toy.table: the pre-norm block straight from residual_sublayer.
  y = model.residual_sublayer(jnp.asarray(TOY_X), toy_branch, TOY_LN, norm="pre", eps=1e-5)
  np.testing.assert_allclose(y, [0.893, -1.306, 2.468, -0.107], atol=5e-4)
  assert TOY_X.mean() == 0.5 and TOY_X.var() == 1.25


def test_toy_block_post_norm_matches_an_independent_computation():
  s = TOY_X + 0.8 * np.tanh(0.6 * TOY_X + 0.3 * np.roll(TOY_X, -1))
  expected = (s - s.mean()) / np.sqrt(s.var() + 1e-5)
  y = model.residual_sublayer(jnp.asarray(TOY_X), toy_branch, TOY_LN, norm="post", eps=1e-5)
  np.testing.assert_allclose(y, expected, atol=1e-5)
  np.testing.assert_allclose(toy.table()["block output (post-norm)"], expected, atol=1e-5)
  assert not np.allclose(y, model.residual_sublayer(jnp.asarray(TOY_X), toy_branch, TOY_LN, "pre"))


def test_residual_sublayer_rejects_unknown_norm():
  with pytest.raises(ValueError, match="norm='mid'"):
    model.residual_sublayer(jnp.asarray(TOY_X), toy_branch, TOY_LN, norm="mid")


def test_an_unknown_placement_is_an_error_in_every_reader_of_the_model():
  # A config that slipped past ModelConfig's own check (as a hand-built one might): every
  # reader looks the placement up in model.PLACEMENTS, none treats it as post-norm.
  from andrea_jax import sample
  from andrea_jax.tools import lens
  cfg = small(n_layer=1)
  params = model.init_params(cfg, jax.random.key(0))
  object.__setattr__(cfg, "norm", "mid")
  tokens = random_tokens(cfg, (1, 4))
  readers = {
      "init_params": lambda: model.init_params(cfg, jax.random.key(0)),
      "count_params": lambda: model.count_params(cfg),
      "forward": lambda: model.forward(params, tokens, cfg),
      "sample": lambda: sample.forward_cached(params, tokens, sample.init_cache(cfg, 1, 4), 0, cfg),
      "lens": lambda: lens.capture(params, tokens, cfg),
      "attribution": lambda: lens.direct_logit_attribution(params, tokens, tokens, cfg),
      "diagnostics": lambda: diagnostics.attention_logits(params, tokens, cfg, 0),
      "flax": lambda: AndreaLM(cfg).init(jax.random.key(0), tokens),
  }
  for name, read in readers.items():
    # model.placement's line, or ModelConfig's where a reader rebuilds the config (resolve_auto)
    with pytest.raises(errors.ConfigError, match=r"(model|ModelConfig)\.norm='mid': expected one of"):
      read()
  assert model.NORMS == tuple(model.PLACEMENTS)


# ----------------------------------------------------------------------------- pieces


def test_layer_norm_zero_mean_unit_variance_then_affine():
  x = 3.0 + 5.0 * jax.random.normal(jax.random.key(0), (7, 64))
  y = model.layer_norm(x, jnp.ones(64), jnp.zeros(64))
  np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-5)
  np.testing.assert_allclose(y.var(-1), 1.0, atol=1e-3)
  scale, bias = jnp.arange(64.0), jnp.full(64, 2.0)
  np.testing.assert_allclose(model.layer_norm(x, scale, bias), y * scale + bias, rtol=1e-5, atol=1e-4)


def test_gelu_tanh_close_to_exact_gelu():
  assert model.gelu_tanh(jnp.float32(0.0)) == 0.0
  x = jnp.linspace(-6.0, 6.0, 2001)
  # The tanh form's largest error is 4.7e-4 (near x = -2.7): close, but not the same function.
  assert 4e-4 < jnp.max(jnp.abs(model.gelu_tanh(x) - model.gelu(x))) < 5e-4
  np.testing.assert_allclose(model.gelu(x), jax.nn.gelu(x, approximate=False), atol=1e-6)
  np.testing.assert_allclose(model.gelu_tanh(x), jax.nn.gelu(x, approximate=True), atol=1e-6)


def naive_attention(x, attn, n_head):
  """Causal multi-head attention in numpy, one head at a time."""
  qkv = x @ attn["w_qkv"] + attn["b_qkv"]
  q, k, v = np.split(qkv, 3, axis=-1)
  out = np.zeros_like(q)
  T, K = x.shape[-2], q.shape[-1] // n_head
  for h in range(n_head):
    sl = slice(h * K, (h + 1) * K)
    s = q[..., sl] @ np.swapaxes(k[..., sl], -1, -2) / math.sqrt(K)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    out[..., sl] = (w / w.sum(-1, keepdims=True)) @ v[..., sl]
  return out @ attn["w_out"] + attn["b_out"]


def test_attention_matches_a_naive_per_head_loop():
  cfg = small()
  p = model.init_params(cfg, jax.random.key(1))
  attn = jax.tree.map(lambda a: np.asarray(a[0], np.float64), p["blocks"]["attn"])
  x = np.asarray(jax.random.normal(jax.random.key(2), (2, 5, cfg.d_model)), np.float64)
  np.testing.assert_allclose(model.attention(jnp.asarray(x, jnp.float32), attn, cfg),
                             naive_attention(x, attn, cfg.n_head), atol=1e-5)


def test_flash_attention_gradients_in_float64(x64):
  # check_grads in reverse mode (the custom_vjp has no forward mode) on the whole block.
  cfg = small(param_dtype="float64", compute_dtype="float64", attention_impl="xla_flash",
              attention_block=2)
  p = f64(model.init_params(cfg, jax.random.key(0)))
  blk = jax.tree.map(lambda a: a[0] * 10, p["blocks"])
  x = jax.random.normal(jax.random.key(1), (2, 5, cfg.d_model), jnp.float64)
  check_grads(jax.jit(lambda x, a: model.attention(x, a, cfg)), (x, blk["attn"]), order=1,
              modes=("rev",))


# ----------------------------------------------------------------------------- counts


@pytest.mark.parametrize("module, tied, untied", [
    (andrea12m, 12_712_320, 12_712_320 + 4353 * 384),
    (andrea120m, 92_331_264, 98_820_096),
    (andrea480m, 467_857_920, 467_857_920 + 8449 * 1536),
])
def test_count_params_of_the_family(module, tied, untied):
  cfg = ModelConfig(**module.get_config().model)
  assert model.count_params(cfg) == tied
  shapes = jax.eval_shape(lambda k: model.init_params(cfg, k), jax.random.key(0))
  assert sum(a.size for a in jax.tree.leaves(shapes)) == tied
  untied_cfg = ModelConfig(**module.get_config("tie_embeddings=False").model)
  assert model.count_params(untied_cfg) == untied
  assert model.count_layer_norms(cfg) == 2 * cfg.n_layer + 1


def test_andrea120m_component_figures():
  cfg = ModelConfig(**andrea120m.get_config().model)
  shapes = jax.eval_shape(lambda k: model.init_params(cfg, k), jax.random.key(0))
  mlp = shapes["blocks"]["mlp"]
  assert mlp["w_in"].shape == (12, 768, 3072) and mlp["w_in"].size // 12 == 2_359_296
  assert mlp["w_out"].size // 12 == 2_359_296
  per_block = sum(a.size for a in jax.tree.leaves(shapes["blocks"])) // 12
  assert per_block == 7_087_872
  assert shapes["wte"].size == 6_488_832 and shapes["wpe"].size == 786_432
  assert model.count_layer_norms(cfg) == 25
  assert model.flops_per_token(cfg) == pytest.approx(662e6, rel=1e-3)


@pytest.mark.parametrize("changes", [
    dict(norm="post"), dict(activation="swiglu"), dict(tie_embeddings=False), dict(mlp_ratio=1.5),
    dict(qk_norm=True)])
def test_count_params_equals_init_leaves_for_variants(changes):
  cfg = small(**changes)
  params = model.init_params(cfg, jax.random.key(0))
  assert model.count_params(cfg) == sum(a.size for a in jax.tree.leaves(params))


def test_swiglu_at_8_over_3_matches_gelu_4x_in_mlp_parameters():
  gelu4 = ModelConfig(**andrea120m.get_config().model)
  swiglu = ModelConfig(**andrea120m.get_config(f"activation=swiglu,mlp_ratio={8 / 3}").model)
  mlp_weights = lambda c: 3 * c.d_model * c.mlp_dim if c.activation == "swiglu" else 2 * c.d_model * c.mlp_dim
  assert mlp_weights(swiglu) == mlp_weights(gelu4)


def test_mup_init_scales_the_hidden_matrices_alone():
  # muP: the hidden matrices' variance is 1/fan_in relative to the base width (std x
  # sqrt(base/width)); embeddings, biases and norms are as in the standard init.
  sp = ModelConfig(vocab_size=64, block_size=16, d_model=128, n_layer=2, n_head=4)
  mup = dataclasses.replace(sp, parametrization="mup", base_width=32)
  p_sp, p_mup = model.init_params(sp, jax.random.key(0)), model.init_params(mup, jax.random.key(0))
  hidden = {("blocks", "attn", "w_qkv"), ("blocks", "attn", "w_out"), ("blocks", "mlp", "w_in"),
            ("blocks", "mlp", "w_out")}
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(p_mup), jax.tree.leaves(p_sp)):
    keys = tuple(k.key for k in path)
    factor = 0.5 if keys in hidden else 1.0  # sqrt(32 / 128)
    np.testing.assert_allclose(a, factor * b, rtol=1e-6, err_msg=str(keys))
  assert float(jnp.std(p_mup["blocks"]["attn"]["w_qkv"])) == pytest.approx(0.01, rel=0.05)


# ----------------------------------------------------------------------------- the forward pass


def reference_forward(params, tokens, cfg):
  """The model written out plainly in float64 numpy (a loop over layers, one over heads):
  an independent reference for ``model.forward``, sharing no code with it."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  erf = np.vectorize(math.erf)
  acts = {"gelu_tanh": lambda h: 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3))),
          "gelu": lambda h: 0.5 * h * (1 + erf(h / math.sqrt(2))), "relu": lambda h: np.maximum(h, 0),
          "swiglu": lambda h: (lambda g, u: g / (1 + np.exp(-g)) * u)(*np.split(h, 2, axis=-1))}

  def ln(x, q):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + cfg.ln_eps) * q["scale"] + q["bias"]

  def mlp(x, q):
    return acts[cfg.activation](x @ q["w_in"] + q["b_in"]) @ q["w_out"] + q["b_out"]

  tokens = np.asarray(tokens)
  x = p["wte"][tokens] + p["wpe"][:tokens.shape[1]]
  for layer in range(cfg.n_layer):
    b = jax.tree.map(lambda a, layer=layer: a[layer], p["blocks"])
    attn = lambda h, b=b: naive_attention(h, b["attn"], cfg.n_head)
    if cfg.norm == "pre":
      x = x + attn(ln(x, b["ln_1"]))
      x = x + mlp(ln(x, b["ln_2"]), b["mlp"])
    else:
      x = ln(x + attn(x), b["ln_1"])
      x = ln(x + mlp(x, b["mlp"]), b["ln_2"])
  if cfg.norm == "pre":
    x = ln(x, p["ln_f"])
  head = p["wte"].T if cfg.tie_embeddings else p["lm_head"]
  return (x @ head)[..., :cfg.vocab_size]


@pytest.mark.parametrize("changes", [
    dict(), dict(norm="post", tie_embeddings=False), dict(activation="swiglu"),
    dict(activation="gelu", vocab_pad_multiple=8), dict(activation="relu", norm="post"),
    dict(remat_policy="full", scan_unroll=3, attention_impl="xla")])
def test_forward_eager_and_jitted_equals_a_plain_numpy_model(changes):
  cfg = small(**changes)
  params = model.init_params(cfg, jax.random.key(4))
  # Larger weights than at init: attention and MLP then matter to the logits.
  params = jax.tree.map(lambda a: a * 5 if a.ndim > 1 else a, params)
  tokens = random_tokens(cfg)
  expected = reference_forward(params, tokens, cfg)
  eager = model.forward(params, tokens, cfg)
  jitted = jax.jit(model.forward, static_argnums=2)(params, tokens, cfg)
  chex.assert_shape(eager, (2, 12, cfg.padded_vocab))
  np.testing.assert_allclose(eager[..., :cfg.vocab_size], expected, rtol=2e-4, atol=2e-4)
  np.testing.assert_allclose(jitted[..., :cfg.vocab_size], expected, rtol=2e-4, atol=2e-4)
  assert np.all(np.isneginf(np.asarray(eager[..., cfg.vocab_size:])))  # padding: never predicted


@pytest.mark.parametrize("attention_impl", ["xla", "xla_flash"])
def test_bfloat16_compute_stays_close_to_float32(attention_impl):
  cfg32 = small(attention_impl=attention_impl, attention_block=4)
  cfg16 = small(attention_impl=attention_impl, attention_block=4, compute_dtype="bfloat16")
  params = model.init_params(cfg32, jax.random.key(11))
  tokens = random_tokens(cfg32, (4, 16))
  targets = jnp.roll(tokens, -1, 1)
  loss32, g32 = jax.jit(jax.value_and_grad(model.loss_fn), static_argnums=3)(params, tokens, targets, cfg32)
  loss16, g16 = jax.jit(jax.value_and_grad(model.loss_fn), static_argnums=3)(params, tokens, targets, cfg16)
  assert model.forward(params, tokens, cfg16).dtype == jnp.float32  # logits leave in float32
  # bfloat16 keeps 8 significant bits (relative rounding 2^-9 ~ 0.002 per operation); the
  # norms, softmax and loss run in float32, so the loss moves by far less (measured 4e-5 to
  # 7e-5), and every gradient leaf within a few percent (measured at most 1.3 %).
  assert 0 < abs(float(loss16) - float(loss32)) < 1e-3, (loss16, loss32)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g16), jax.tree.leaves(g32)):
    rel = float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))
    assert rel < 0.05, (jax.tree_util.keystr(path), rel)


def test_vmap_over_examples_matches_batch():
  cfg = small()
  params = model.init_params(cfg, jax.random.key(5))
  tokens = random_tokens(cfg)
  per_example = jax.vmap(lambda t: model.forward(params, t[None], cfg)[0])(tokens)
  np.testing.assert_allclose(per_example, model.forward(params, tokens, cfg), atol=1e-5)


def test_causality_through_gradients():
  cfg = small()
  params = model.init_params(cfg, jax.random.key(6))
  tokens = random_tokens(cfg, (1, 10))
  x = model.embed(params, tokens, cfg)

  def logits_at(x, t):
    h, _ = jax.lax.scan(lambda h, b: (model.block_forward(b, h, cfg), None), x, params["blocks"])
    return jnp.sum(model.unembed(params, h, cfg)[0, t])

  grad_at = jax.jit(jax.grad(logits_at), static_argnums=1)
  for t in (0, 4, 9):
    g = grad_at(x, t)[0]
    assert jnp.all(g[t + 1:] == 0.0), f"position {t} sees the future"
    assert jnp.all(jnp.abs(g[: t + 1]).sum(-1) > 0), f"position {t} ignores its past"


def test_untied_head_is_used():
  cfg = small(tie_embeddings=False)
  params = model.init_params(cfg, jax.random.key(7))
  tokens = random_tokens(cfg)
  changed = {**params, "lm_head": params["lm_head"] * 2}
  assert not jnp.allclose(model.forward(params, tokens, cfg), model.forward(changed, tokens, cfg))


def test_loss_at_init_is_near_log_vocab():
  cfg = small()
  params = model.init_params(cfg, jax.random.key(8))
  tokens = random_tokens(cfg, (4, 16))
  loss = model.loss_fn(params, tokens, jnp.roll(tokens, -1, axis=1), cfg)
  # Logits at init have std ~ 0.02 sqrt(d_model) ~ 0.11 (the final LN makes |x| ~ sqrt(D)),
  # adding ~ std^2 / 2 ~ 0.006 nats to log V; 64 random targets add ~ 0.02 of noise.
  assert abs(float(loss) - math.log(cfg.vocab_size)) < 0.05
  mask = jnp.zeros((4, 16)).at[:, 0].set(1)
  logits = model.forward(params, tokens, cfg)
  expected = -jnp.mean(jax.nn.log_softmax(logits[:, 0])[jnp.arange(4), jnp.roll(tokens, -1, 1)[:, 0]])
  np.testing.assert_allclose(model.loss_fn(params, tokens, jnp.roll(tokens, -1, 1), cfg, mask),
                             expected, rtol=1e-5)


def test_z_loss_is_counted_in_the_objective_and_reported_apart():
  # Against the formula written on the model's logits: mean CE + z * mean log(Z)^2 over
  # the masked positions, Z over the real vocabulary (the padded ids are out of it). (The
  # chunked loss equals this one, terms and gradients: tests/test_perf_model.py.)
  cfg = small(vocab_pad_multiple=8)
  params = model.init_params(cfg, jax.random.key(8))
  params["wte"] = params["wte"] * 30  # logits of order 1: log Z far from log V
  tokens, targets = random_tokens(cfg, (2, 12)), random_tokens(cfg, (2, 12), seed=1)
  mask = (jax.random.uniform(jax.random.key(3), targets.shape) > 0.3).astype(jnp.float32)
  z = 0.05

  def plain(p):
    logits = model.forward(p, tokens, cfg)[..., :cfg.vocab_size]
    lse = jax.nn.logsumexp(logits, axis=-1)
    nll = lse - jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]
    mean = lambda a: jnp.sum(a * mask) / jnp.sum(mask)
    rms = jnp.sqrt(mean(jnp.mean(logits ** 2, axis=-1)))
    return mean(nll) + z * mean(lse ** 2), (mean(nll), z * mean(lse ** 2), mean(lse), rms)

  (total, terms), grads = jax.jit(jax.value_and_grad(model.loss_terms, has_aux=True), static_argnums=(3, 5))(
      params, tokens, targets, cfg, mask, z)
  (want, parts), want_grads = jax.jit(jax.value_and_grad(plain, has_aux=True))(params)
  nll, z_term, log_z, rms = parts
  np.testing.assert_allclose(total, want, rtol=1e-6)
  np.testing.assert_allclose([terms["nll"], terms["z_loss"], terms["log_z"], terms["logit_rms"]],
                             [nll, z_term, log_z, rms], rtol=1e-6)
  np.testing.assert_allclose(terms["nll"], model.loss_fn(params, tokens, targets, cfg, mask), rtol=1e-6)
  assert float(z_term) > 0.01 * float(nll)  # the term matters in the gradients compared below
  chex.assert_trees_all_close(grads, want_grads, rtol=1e-5, atol=1e-6)  # gradients of order 1
  # Off by default: the objective is the cross-entropy.
  np.testing.assert_allclose(model.loss_terms(params, tokens, targets, cfg, mask)[0], terms["nll"], rtol=1e-7)


FLAX_VARIANTS = [dict(), dict(norm="post", activation="swiglu"),
                 dict(activation="gelu", tie_embeddings=False, remat_policy="dots_saveable", scan_unroll=3,
                      vocab_pad_multiple=8),
                 dict(qk_norm=True, parametrization="mup", base_width=16, attention_impl="xla"),
                 # Post-norm and untied (base_width above d_model: width factors above 1),
                 # the base multipliers, and the attention scale runs before mup_attention had.
                 dict(qk_norm=True, norm="post", tie_embeddings=False, parametrization="mup",
                      base_width=64, readout_multiplier=2.0, attention_multiplier=0.5,
                      embedding_multiplier=1.5, mup_attention="inverse"),
                 # A depth rule off its base depth (the branches x 2/3) and heads that grow
                 # with the width (muP's base head size 8 = 16 / 2, not 16 / 4).
                 dict(depth_rule="completep", base_depth=2, parametrization="mup", base_width=16,
                      base_n_head=2, attention_impl="xla")]
# Mathematically without gradient: a bias added to every key moves all of a query's scores
# alike, which the softmax ignores (like the key part of b_qkv, which shares a leaf).
NO_GRADIENT = ("['blocks']['attn']['k_norm']['bias']",)


@pytest.mark.parametrize("changes", FLAX_VARIANTS)
def test_flax_module_gives_the_pure_functions_logits_and_gradients(changes):
  # AndreaLM is a separate implementation (Flax layers under nn.scan) sharing only the
  # LayerNorm math, the activations and the attention kernel with model.py.
  cfg = small(**changes)
  module = AndreaLM(cfg)
  params = lively_norms(model.init_params(cfg, jax.random.key(9)))
  tokens, targets = random_tokens(cfg, seed=1), random_tokens(cfg, seed=2)
  # Each side jitted whole: one compile instead of hundreds of op-by-op ones (2x faster).
  logits = jax.jit(module.apply)({"params": to_flax(params)}, tokens)
  want = jax.jit(model.forward, static_argnums=2)(params, tokens, cfg)
  np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-6)

  def flax_loss(flax_params):
    logits = module.apply({"params": flax_params}, tokens)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, targets))

  flax_grads = from_flax(jax.jit(jax.grad(flax_loss))(to_flax(params)))
  grads = jax.jit(jax.grad(model.loss_fn), static_argnums=3)(params, tokens, targets, cfg)
  chex.assert_trees_all_equal_structs(flax_grads, grads)
  for (path, g_flax), g in zip(jax.tree_util.tree_leaves_with_path(flax_grads), jax.tree.leaves(grads)):
    np.testing.assert_allclose(g_flax, g, rtol=1e-5, atol=1e-7, err_msg=jax.tree_util.keystr(path))
    if jax.tree_util.keystr(path) not in NO_GRADIENT:
      assert jnp.any(g != 0), jax.tree_util.keystr(path)  # every parameter is used


def lively_norms(params, seed=0):
  """The per-head query and key norms (if any) moved away from scale 1, bias 0."""
  attn = params["blocks"]["attn"]
  if "q_norm" not in attn:
    return params
  keys = iter(jax.random.split(jax.random.key(seed), 4))
  move = lambda a: a + 0.3 * jax.random.normal(next(keys), a.shape, a.dtype)
  norms = {n: jax.tree.map(move, attn[n]) for n in ("q_norm", "k_norm")}
  return {**params, "blocks": {**params["blocks"], "attn": {**attn, **norms}}}


@pytest.mark.parametrize("changes", [dict(), dict(norm="post", tie_embeddings=False, vocab_pad_multiple=8,
                                                         qk_norm=True, parametrization="mup", base_width=16,
                                                         zero_query_init=True),
                                     dict(init="xavier", activation="swiglu", vocab_pad_multiple=8)])
def test_flax_init_has_the_layout_and_statistics_of_init_params(changes):
  cfg = small(**changes, n_layer=4, d_model=64)
  flax_params = jax.jit(AndreaLM(cfg).init)(jax.random.key(0), random_tokens(cfg))["params"]
  params = from_flax(flax_params)
  reference = jax.jit(model.init_params, static_argnums=0)(cfg, jax.random.key(1))
  chex.assert_trees_all_equal_shapes_and_dtypes(params, reference)
  chex.assert_trees_all_equal(to_flax(params), flax_params)  # the converters are exact inverses
  # Each tensor drawn from the same distribution as init_params' (means and stds agree
  # within six standard errors of the mean, and 10 %).
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(params), jax.tree.leaves(reference)):
    std = float(jnp.std(b))
    assert float(jnp.mean(a)) == pytest.approx(float(jnp.mean(b)), abs=6 * std / math.sqrt(b.size) + 1e-7)
    assert float(jnp.std(a)) == pytest.approx(std, rel=0.1, abs=1e-7), jax.tree_util.keystr(path)
  # The vocabulary padding starts at zero, like init_params'.
  V = cfg.vocab_size
  assert jnp.all(params["wte"][V:] == 0) and jnp.all(params.get("lm_head", jnp.zeros((1, 1)))[:, V:] == 0)
  if cfg.zero_query_init:  # the query columns of the fused QKV start at zero in both
    D = cfg.d_model
    assert jnp.all(params["blocks"]["attn"]["w_qkv"][..., :D] == 0)
    assert jnp.all(reference["blocks"]["attn"]["w_qkv"][..., :D] == 0)
  # nn.scan split the init key: the layers are not copies of one another.
  assert not jnp.allclose(params["blocks"]["attn"]["w_qkv"][0], params["blocks"]["attn"]["w_qkv"][1])


# ----------------------------------------------------------------------------- what the large configs run


def reference_attention(x_BTD, attn, cfg):
  """Multi-head causal self-attention written out plainly: one masked softmax per head.

  ``qk_norm``: each head's queries and keys standardised over the head dimension, then
  scaled and shifted; muP: scores divided by d_head / sqrt(d_head_base) (or d_head), not by
  sqrt(d_head); all times the attention multiplier.
  """
  B, T, D = x_BTD.shape
  q, k, v = (a.reshape(B, T, cfg.n_head, cfg.head_dim)
             for a in jnp.split(x_BTD @ attn["w_qkv"] + attn["b_qkv"], 3, axis=-1))
  if cfg.qk_norm:
    standard = lambda a: (a - a.mean(-1, keepdims=True)) / jnp.sqrt(a.var(-1, keepdims=True) + cfg.ln_eps)
    q = standard(q) * attn["q_norm"]["scale"] + attn["q_norm"]["bias"]
    k = standard(k) * attn["k_norm"]["scale"] + attn["k_norm"]["bias"]
  if cfg.parametrization != "mup":
    d = math.sqrt(cfg.head_dim)
  elif cfg.mup_attention == "inverse":
    d = cfg.head_dim
  else:  # d_head / sqrt(d_head at the base width)
    d = cfg.head_dim / math.sqrt(cfg.base_width / cfg.n_head)
  d = d / cfg.attention_multiplier
  scores = jnp.einsum("bthk,bshk->bhts", q, k) / d
  scores = jnp.where(jnp.tril(jnp.ones((T, T), bool)), scores, -jnp.inf)
  o = jnp.einsum("bhts,bshk->bthk", jax.nn.softmax(scores, axis=-1), v).reshape(B, T, D)
  return o @ attn["w_out"] + attn["b_out"]


QK_MUP = dict(qk_norm=True, parametrization="mup", base_width=16)


def test_qk_norm_and_mup_attention_equal_the_reference_in_values_and_gradients():
  # The kernels against the full softmax: tests/test_attention.py. Here what model.attention
  # adds around them with qk_norm and muP (its projections: the naive loop above), through
  # the flash kernel's own backward. T = 11 with blocks of 4: a partial last block.
  cfg = small(attention_impl="xla_flash", attention_block=4, **QK_MUP)
  params = lively_norms(model.init_params(cfg, jax.random.key(1)))
  attn = jax.tree.map(lambda a: 10 * a[0], params["blocks"]["attn"])
  attn.update({n: jax.tree.map(lambda a: a[0], params["blocks"]["attn"][n])  # norms as they are
               for n in ("q_norm", "k_norm") if n in attn})
  attn = {**attn, "b_qkv": 0.5 * jax.random.normal(jax.random.key(3), attn["b_qkv"].shape)}
  x = jax.random.normal(jax.random.key(2), (2, 11, cfg.d_model))
  # Both sides jitted: one compile each, not one per operation.
  values = lambda f: jax.jit(lambda x, a: f(x, a, cfg))(x, attn)
  np.testing.assert_allclose(values(model.attention), values(reference_attention),
                             rtol=1e-5, atol=1e-5)
  loss = lambda f: lambda x, a: jnp.sum(jnp.sin(f(x, a, cfg)))
  got = jax.jit(jax.grad(loss(model.attention), argnums=(0, 1)))(x, attn)
  want = jax.jit(jax.grad(loss(reference_attention), argnums=(0, 1)))(x, attn)
  for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("rule", ["base", "inverse"])
def test_mup_is_sp_with_a_smaller_query_and_head_input(rule):
  # muP's two changes to the function, checked on an sp model that makes them by hand: the
  # queries times sqrt(d_head_base / d_head) ("base": scores over d_head / sqrt(d_head_base))
  # or 1 / sqrt(d_head) ("inverse": scores over d_head), and the head's input times
  # base_width / d_model (the readout multiplier; here through ln_f, the tied head's input).
  sp = small(d_model=64, attention_impl="xla")
  mup = dataclasses.replace(sp, parametrization="mup", base_width=16, mup_attention=rule)
  params = model.init_params(mup, jax.random.key(0))
  attn = params["blocks"]["attn"]
  attn["b_qkv"] = attn["b_qkv"] + 0.1  # non-zero biases: the query's is scaled too
  D, r = sp.d_model, 16 / 64
  q_factor = math.sqrt((16 / sp.n_head) / sp.head_dim) if rule == "base" else 1 / math.sqrt(sp.head_dim)
  q_part = jnp.concatenate([jnp.full(D, q_factor), jnp.ones(2 * D)])
  by_hand = {**params, "ln_f": jax.tree.map(lambda a: r * a, params["ln_f"]),
             "blocks": {**params["blocks"], "attn": {**attn, "w_qkv": attn["w_qkv"] * q_part,
                                                     "b_qkv": attn["b_qkv"] * q_part}}}
  tokens, forward = random_tokens(sp), jax.jit(model.forward, static_argnums=2)
  np.testing.assert_allclose(forward(params, tokens, mup), forward(by_hand, tokens, sp),
                             rtol=1e-5, atol=1e-6)
  assert not np.allclose(forward(params, tokens, mup), forward(params, tokens, sp), atol=1e-3)


MULTIPLIERS = dict(readout_multiplier=2.5, attention_multiplier=0.5, embedding_multiplier=1.5)


def test_the_base_multipliers_scale_the_logits_the_scores_and_the_embeddings():
  # Each multiplier checked on a model that makes it by hand: the embeddings (wte and wpe
  # of an untied model) times m, the query columns (and bias) times m, the head times m.
  sp = small(d_model=64, attention_impl="xla", tie_embeddings=False)
  params = model.init_params(sp, jax.random.key(0))
  params["blocks"]["attn"]["b_qkv"] = params["blocks"]["attn"]["b_qkv"] + 0.1
  tokens, forward = random_tokens(sp), jax.jit(model.forward, static_argnums=2)
  D = sp.d_model
  q_only = lambda m: jnp.concatenate([jnp.full(D, m), jnp.ones(2 * D)])
  attn = params["blocks"]["attn"]
  by_hand = {
      "embedding_multiplier": {**params, "wte": 1.5 * params["wte"], "wpe": 1.5 * params["wpe"]},
      "attention_multiplier": {**params, "blocks": {**params["blocks"], "attn": {
          **attn, "w_qkv": attn["w_qkv"] * q_only(0.5), "b_qkv": attn["b_qkv"] * q_only(0.5)}}},
      "readout_multiplier": {**params, "lm_head": 2.5 * params["lm_head"]},
  }
  for name, hand in by_hand.items():
    cfg = dataclasses.replace(sp, **{name: MULTIPLIERS[name]})
    np.testing.assert_allclose(forward(params, tokens, cfg), forward(hand, tokens, sp),
                               rtol=1e-5, atol=1e-5, err_msg=name)
    assert not np.allclose(forward(params, tokens, cfg), forward(params, tokens, sp), atol=1e-3)
  with pytest.raises(errors.ConfigError, match=r"readout_multiplier=0.0: expected a positive"):
    small(readout_multiplier=0.0)


def test_mup_at_its_base_width_is_sp_with_the_same_multipliers():
  # The same init and the same function, to the last bit (the learning rates and decay:
  # tests/test_step.py). The rule of runs made before mup_attention existed is not.
  sp = small(attention_impl="xla", **MULTIPLIERS)
  mup = dataclasses.replace(sp, parametrization="mup", base_width=sp.d_model)
  params = model.init_params(sp, jax.random.key(0))
  chex.assert_trees_all_equal(params, model.init_params(mup, jax.random.key(0)))
  assert mup_lib.readout_multiplier(mup) == mup_lib.readout_multiplier(sp) == 2.5
  assert mup_lib.attention_scale(mup) == mup_lib.attention_scale(sp) and mup_lib.hidden_lr_scale(mup) == 1.0
  tokens, forward = random_tokens(sp), jax.jit(model.forward, static_argnums=2)
  np.testing.assert_array_equal(forward(params, tokens, mup), forward(params, tokens, sp))
  # "inverse" (1 / d_head): the first block's scores 1 / sqrt(d_head_base) = 1/2 of sp's.
  inverse = dataclasses.replace(mup, mup_attention="inverse")
  logits = lambda cfg: diagnostics.attention_logits(params, tokens, cfg, layer=0)
  np.testing.assert_allclose(logits(inverse), logits(sp) / math.sqrt(sp.d_model / sp.n_head),
                             rtol=1e-5, atol=1e-7)


def test_depth_rule_at_its_base_depth_is_the_plain_model_and_deeper_scales_each_branch():
  # At base_depth: the same init and the same function, to the bit.
  plain = small(attention_impl="xla")
  rule = dataclasses.replace(plain, depth_rule="completep", base_depth=plain.n_layer)
  params, tokens = model.init_params(plain, jax.random.key(0)), random_tokens(plain)
  chex.assert_trees_all_equal(params, model.init_params(rule, jax.random.key(0)))
  forward = jax.jit(model.forward, static_argnums=2)
  np.testing.assert_array_equal(forward(params, tokens, rule), forward(params, tokens, plain))
  # Six layers on a base of two: the residual-writing projections keep the base depth's
  # init, and each branch is multiplied by 2/6, which equals the plain model whose branch
  # outputs (w_out, b_out of attention and MLP) are folded by the same factor.
  deep = small(attention_impl="xla", n_layer=6)
  deep_rule = dataclasses.replace(deep, depth_rule="completep", base_depth=2)
  assert mup_lib.branch_multiplier(deep_rule) == pytest.approx(1 / 3)
  assert model.block_init_stds(deep_rule) == model.block_init_stds(small(n_layer=2))
  assert model.block_init_stds(deep)["attn_out"] < model.block_init_stds(deep_rule)["attn_out"]
  params = model.init_params(deep_rule, jax.random.key(1))
  folded = jax.tree_util.tree_map_with_path(
      lambda path, x: x / 3 if [getattr(k, "key", None) for k in path][-1] in ("w_out", "b_out") else x,
      params)
  np.testing.assert_allclose(forward(params, tokens, deep_rule), forward(folded, tokens, deep),
                             rtol=2e-5, atol=2e-5)
  assert not np.allclose(forward(params, tokens, deep_rule), forward(params, tokens, deep), atol=1e-3)


def test_mup_with_heads_that_grow_keeps_the_base_head_size():
  # d_head 8 at every width (heads = d_model / 8): the base model's head size is 8 too, so
  # muP's attention scale is sp's 1 / sqrt(8); with the heads held fixed (base_n_head 0)
  # the base head size would be 16 / 4 = 4.
  wide = small(d_model=64, n_head=8, parametrization="mup", base_width=16, base_n_head=2)
  assert mup_lib.base_head_dim(wide) == 8 == wide.head_dim
  assert mup_lib.attention_scale(wide) == pytest.approx(1 / math.sqrt(8))
  fixed = dataclasses.replace(wide, base_n_head=0)
  assert mup_lib.base_head_dim(fixed) == 2
  assert mup_lib.attention_scale(fixed) == pytest.approx(math.sqrt(2 / 8) / math.sqrt(8))


def test_zero_query_init_starts_every_attention_pattern_uniform():
  cfg = small(attention_impl="xla", zero_query_init=True)
  params, plain = model.init_params(cfg, jax.random.key(0)), model.init_params(small(), jax.random.key(0))
  D = cfg.d_model
  w = params["blocks"]["attn"]["w_qkv"]
  assert jnp.all(w[..., :D] == 0)
  np.testing.assert_array_equal(w[..., D:], plain["blocks"]["attn"]["w_qkv"][..., D:])  # k, v as before
  probs = diagnostics.attention_probs(params, random_tokens(cfg), cfg, layer=0)
  T = probs.shape[-1]
  np.testing.assert_allclose(probs, jnp.broadcast_to(jnp.tril(jnp.ones((T, T))) / jnp.arange(1, T + 1)[:, None],
                                                     probs.shape), rtol=1e-6)


SHRINK_120M = {"model.n_layer": 2, "model.d_model": 64, "model.n_head": 4, "model.block_size": 32,
               "model.vocab_size": 97, "train.batch_size": 4, "train.steps": 2, "train.warmup_steps": 1}


def test_shrunk_andrea120m_trains_in_bfloat16_close_to_float32():
  # andrea120m's own settings at a CPU's size: attention_impl "auto", plus what a GPU run
  # uses: bfloat16 compute (what "auto" picks there) and a remat policy.
  config = configdict.apply_overrides(andrea120m.get_config(), SHRINK_120M)
  assert config.model.attention_impl == "auto"
  cfg16 = ModelConfig(**{**config.model.to_dict(), "compute_dtype": "bfloat16",
                         "remat_policy": "dots_saveable"})
  cfg32 = dataclasses.replace(cfg16, compute_dtype="float32")
  optimizer = step_lib.make_optimizer(step_lib.TrainConfig(**config.train))
  batches = jax.random.randint(jax.random.key(1), (2, 1, 4, cfg16.block_size + 1), 0, cfg16.vocab_size)

  def two_steps(cfg):
    step_fn = lambda state, batch: step_lib.train_step(state, batch, cfg, optimizer)
    step = jax.jit(step_fn)
    state, losses = step_lib.init_state(cfg, optimizer, jax.random.key(0)), []
    jaxpr = str(jax.make_jaxpr(step_fn)(state, batches[0]))
    for batch in batches:
      state, metrics = step(state, batch)
      losses.append(float(metrics["loss"]))
    return state, losses, jaxpr

  state16, losses16, jaxpr16 = two_steps(cfg16)
  state32, losses32, _ = two_steps(cfg32)
  assert "bf16" in jaxpr16 and "remat" in jaxpr16  # the settings took effect
  assert int(state16["step"]) == 2 and bool(state16["good"])
  np.testing.assert_allclose(losses16, losses32, rtol=2e-2)
  assert losses16 != losses32  # bfloat16 really ran
  assert np.all(np.isfinite(jax.tree.leaves(jax.tree.map(np.asarray, state16["params"]))[0]))


# ----------------------------------------------------------------------------- gradient checks (float64)


@pytest.fixture
def x64():
  with jax.enable_x64(True):
    yield


def f64(tree):
  return jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), tree)


# Gradient checks only where the project wrote the gradient itself (a jax.custom_vjp:
# grep custom_vjp): FlashAttention's backward (above, and in the whole model below) and
# the chunked cross-entropy's. Elsewhere jax.grad is JAX's, tested by JAX.


@pytest.mark.parametrize("padded, z_loss", [(False, 0.0), (True, 0.0), (True, 0.3)])
def test_chunked_cross_entropy_gradients_in_float64(x64, padded, z_loss):
  x = jax.random.normal(jax.random.key(0), (7, 6), jnp.float64)  # 7 rows: a partial chunk
  w = jax.random.normal(jax.random.key(1), (16 if padded else 13, 6), jnp.float64)
  y = jax.random.randint(jax.random.key(2), (7,), 0, 13)
  weight = jnp.array([1.0, 1.0, 0.0, 1.0, 0.5, 1.0, 1.0], jnp.float64)
  f = lambda x, w: cross_entropy.weighted_loss_sums(x, w, y, weight, 13, 3, z_loss)[0]
  check_grads(f, (x, w), order=1, modes=("rev",))
  # And its value: the weighted sum of the plain cross-entropy (plus PaLM's z-loss term)
  # over the real vocabulary.
  logits = x @ w[:13].T
  lse = jax.nn.logsumexp(logits, axis=-1)
  nll = lse - logits[jnp.arange(7), y]
  np.testing.assert_allclose(f(x, w), jnp.sum(weight * (nll + z_loss * lse ** 2)), rtol=1e-12)


def test_flash_attention_dropout_gradients_in_float64_equal_the_xla_paths(x64):
  # The flash backward draws each block's dropout mask again from its key. Its gradients
  # equal autodiff through the "xla" path, which drops the same entries (and whose own
  # backward redraws them where it rematerialises: jax.checkpoint, the same key).
  cfg = small(d_model=8, n_head=2, param_dtype="float64", compute_dtype="float64",
              attention_impl="xla_flash", attention_block=2, dropout=0.5)
  attn = jax.tree.map(lambda a: a[0] * 10, f64(model.init_params(cfg, jax.random.key(0)))["blocks"]["attn"])
  x = jax.random.normal(jax.random.key(1), (2, 5, cfg.d_model), jnp.float64)
  w = jax.random.normal(jax.random.key(3), x.shape, jnp.float64)

  def value_and_grads(impl):
    c = dataclasses.replace(cfg, attention_impl=impl)
    f = lambda x, a, key: jnp.sum(model.attention(x, a, c, dropout_key=key) * w)
    return jax.jit(jax.value_and_grad(f, argnums=(0, 1)))

  flash, xla = value_and_grads("xla_flash"), value_and_grads("xla")
  key = jax.random.key(2)
  chex.assert_trees_all_close(flash(x, attn, key), xla(x, attn, key), rtol=1e-10, atol=1e-12)
  # The key decides which entries are dropped.
  assert flash(x, attn, key)[0] != flash(x, attn, jax.random.key(4))[0]


def test_dropout_is_a_probability_and_refused_with_cudnn():
  with pytest.raises(errors.ConfigError, match=r"dropout=1.0: expected a probability in \[0, 1\)"):
    small(dropout=1.0)
  with pytest.raises(errors.ConfigError, match="dropout=0.1 with attention_impl='cudnn'.*"
                                               "set attention_impl='xla_flash'"):
    small(dropout=0.1, attention_impl="cudnn")
  # "auto" on a GPU picks the XLA flash path for a model with dropout, cuDNN otherwise.
  on_gpu = lambda **c: model.resolve_auto(small(attention_impl="auto", compute_dtype="auto", **c),
                                         "gpu", False)
  assert on_gpu(dropout=0.1).attention_impl == "xla_flash"
  assert on_gpu().attention_impl == "cudnn"


# "auto" on a CPU rematerialises all but the weight matmuls (model.resolve_auto); "none" keeps all.
@pytest.mark.parametrize("remat_policy", ["none", "dots_with_no_batch_dims_saveable"])
def test_check_grads_full_loss_through_both_custom_gradients(x64, remat_policy):
  cfg = ModelConfig(vocab_size=17, block_size=8, d_model=8, n_layer=2, n_head=2,
                    param_dtype="float64", compute_dtype="float64", attention_impl="xla_flash",
                    attention_block=4, loss_chunk=5, remat_policy=remat_policy)
  p = f64(model.init_params(cfg, jax.random.key(0)))
  p = jax.tree.map(lambda a: a * 10 if a.ndim > 2 else a, p)  # the blocks' matrices: a non-trivial check
  tokens = random_tokens(cfg, (2, 6))
  # A small finite-difference step: the default 1e-4 leaves O(eps^2) curvature error.
  check_grads(jax.jit(lambda p: model.loss_fn(p, tokens, jnp.roll(tokens, -1, 1), cfg)), (p,),
              order=1, modes=("rev",), eps=1e-6)


# ----------------------------------------------------------------------------- the seed's gradient-flow claim


GRAD_FLOW_CFG = ModelConfig(vocab_size=97, block_size=16, d_model=64, n_layer=12, n_head=4)


def stack_at_init(cfg, residual: bool, layer_norm: bool, seed: int = 0):
  """Gradient norms at every block's input and after the last, and the mean output cosine.

  The same 12 blocks with or without their skip connections and with or without their
  LayerNorms (``diagnostics.gradient_flow``, which notebook 2 plots).
  """
  params = model.init_params(cfg, jax.random.key(seed))
  tokens = random_tokens(cfg, (4, 16), seed)
  flow = jax.jit(diagnostics.gradient_flow, static_argnums=(2, 3, 4))
  g = flow(params, tokens, cfg, residual, layer_norm)
  assert g.shape == (cfg.n_layer + 1,)

  def block(b, x):
    ln = lambda x, p: model.layer_norm(x, p["scale"], p["bias"], cfg.ln_eps)
    if residual:
      return model.block_forward(b, x, cfg)
    return model.mlp(ln(model.attention(ln(x, b["ln_1"]), b["attn"], cfg), b["ln_2"]), b["mlp"], cfg)

  h, _ = jax.lax.scan(lambda h, b: (block(b, h), None), model.embed(params, tokens, cfg), params["blocks"])
  unit = (h / jnp.linalg.norm(h, axis=-1, keepdims=True)).reshape(-1, cfg.d_model)
  return np.asarray(g), float(jnp.mean(unit @ unit.T))


def test_gradient_flow_is_the_gradient_of_the_next_token_loss():
  cfg = small()
  params = model.init_params(cfg, jax.random.key(0))
  tokens = random_tokens(cfg, (2, 9))
  inputs, targets = tokens[:, :-1], tokens[:, 1:]  # every position predicts the token after it

  def loss(x_BTD):
    h, _ = jax.lax.scan(lambda h, b: (model.block_forward(b, h, cfg), None), x_BTD, params["blocks"])
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(model.unembed(params, h, cfg), targets))

  # The same loss as model.loss_fn, through the embeddings: the gradient at block 0's input.
  # Jitted throughout: one compile per function instead of one per operation.
  x = jax.jit(lambda t: model.embed(params, t, cfg))(inputs)
  np.testing.assert_allclose(jax.jit(loss)(x), jax.jit(model.loss_fn, static_argnums=3)(
      params, inputs, targets, cfg), rtol=1e-6)
  flow = jax.jit(diagnostics.gradient_flow, static_argnums=2)(params, tokens, cfg)
  assert flow.shape == (cfg.n_layer + 1,)
  np.testing.assert_allclose(flow[0], jnp.linalg.norm(jax.jit(jax.grad(loss))(x)), rtol=1e-5)
  # After the last block: the gradient of the loss with respect to the final residual stream.
  h, _ = jax.jit(lambda x: jax.lax.scan(lambda h, b: (model.block_forward(b, h, cfg), None), x,
                                        params["blocks"]))(x)
  last = jax.jit(jax.grad(lambda h: jnp.mean(optax.softmax_cross_entropy_with_integer_labels(
      model.unembed(params, h, cfg), targets))))(h)
  np.testing.assert_allclose(flow[-1], jnp.linalg.norm(last), rtol=1e-5)


def test_residuals_carry_gradient_to_the_embeddings():
  # The seed's claim in its pure form: 12 blocks of small-weight branches. Through the
  # skip path the gradient arrives intact; through the bare branches it vanishes.
  with_res, _ = stack_at_init(GRAD_FLOW_CFG, residual=True, layer_norm=False)
  without_res, _ = stack_at_init(GRAD_FLOW_CFG, residual=False, layer_norm=False)
  # Intact: each branch's Jacobian is O(weights^2) ~ 1e-4 at init, so the gradient at the
  # embeddings equals the one after the last block to well under 1 % (measured: 0.05 %).
  assert abs(with_res[0] / with_res[-1] - 1) < 0.01, with_res
  assert with_res[0] > 1e6 * without_res[0], (with_res, without_res)


@pytest.mark.parametrize("seed", [0, 1])
def test_with_layer_norm_the_skip_path_keeps_tokens_apart(seed):
  # Measured, not assumed: with each branch behind a LayerNorm the gradient *norm* at
  # init does not vanish without residuals (LN rescales every tiny branch output back
  # to unit size), so the seed's "lose the signal" is not what shows at init. What the
  # skip path does preserve is the tokens' identity: without it the causal averaging of
  # attention drives all 64 outputs toward one direction (rank collapse).
  g_res, cos_res = stack_at_init(GRAD_FLOW_CFG, residual=True, layer_norm=True, seed=seed)
  g_bare, cos_bare = stack_at_init(GRAD_FLOW_CFG, residual=False, layer_norm=True, seed=seed)
  g_bare_no_ln, _ = stack_at_init(GRAD_FLOW_CFG, residual=False, layer_norm=False, seed=seed)
  # Pre-LN with skips: each LN adds a path, so the gradient grows going down, modestly
  # (first/last measured 1.21-1.25 over seeds 0-2; without LNs it is 1.000).
  assert 1.1 < g_res[0] / g_res[-1] < 1.4, g_res
  # Without skips, the LNs alone keep the gradient at the embeddings the size of the skip
  # path's (measured 0.5x-1.9x over seeds 0-3), where without them it vanishes entirely.
  assert 1 / 3 < g_bare[0] / g_res[0] < 3, (g_res, g_bare)
  assert g_bare[0] > 1e6 * g_bare_no_ln[0], (g_bare, g_bare_no_ln)
  # Rank collapse: outputs of distinct tokens stay nearly orthogonal with the skip path
  # (mean cosine measured 0.05-0.07), and align without it (0.21-0.77).
  assert cos_res < 0.1 and cos_bare > 3 * cos_res, (cos_res, cos_bare)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("changes, message", [
    (dict(parametrization="ntk"), "parametrization='ntk': expected one of .'sp', 'mup'."),
    (dict(parametrization="mup"), "base_width=0 with parametrization='mup'"),
    (dict(parametrization="mup", base_width=16, init="xavier"), "init='xavier' with parametrization='mup'"),
    (dict(base_width=-8), "base_width=-8"),
    (dict(qk_norm="yes"), "qk_norm='yes': expected True or False"),
    (dict(d_model=30, n_head=4), "d_model=30 is not divisible by n_head=4"),
    (dict(n_layer=0), "n_layer=0"),
    (dict(vocab_size=-5), "vocab_size=-5"),
    (dict(norm="sandwich"), "norm='sandwich'"),
    (dict(activation="tanh"), "activation='tanh'"),
    (dict(mlp_ratio=0.0), "mlp_ratio=0.0"),
    (dict(compute_dtype="int8"), "compute_dtype='int8'"),
    (dict(depth_rule="completep"), "base_depth=0 with depth_rule='completep'"),
    (dict(depth_rule="1/sqrt(L)", base_depth=2), "depth_rule='1/sqrt.L.': expected one of"),
    (dict(base_depth=-1), "base_depth=-1"),
    (dict(parametrization="mup", base_width=16, base_n_head=3), "base_n_head=3 does not divide base_width=16"),
])
def test_bad_config_raises_naming_the_field(changes, message):
  with pytest.raises(ValueError, match=message.replace("(", r"\(")):
    small(**changes)


def test_named_configs_build_and_accept_variants():
  for module in (tiny, andrea12m, andrea120m, andrea480m):
    ModelConfig(**module.get_config().model)
  cfg = ModelConfig(**andrea120m.get_config("norm=post,mlp_ratio=2").model)
  assert cfg.norm == "post" and cfg.mlp_dim == 1536
  with pytest.raises(ValueError, match="has no field 'mlp_ratoi'; did you mean 'mlp_ratio'"):
    andrea120m.get_config("mlp_ratoi=2")


def test_bad_token_ids_and_lengths_are_rejected():
  cfg = small()
  params = model.init_params(cfg, jax.random.key(0))
  with pytest.raises(ValueError, match=r"token id 61 is outside \[0, 61\)"):
    model.forward(params, jnp.full((1, 4), 61), cfg)
  with pytest.raises(ValueError, match="token id -1"):
    model.forward(params, jnp.array([[1, -1]]), cfg)
  with pytest.raises(ValueError, match="sequence length 17 exceeds the context block_size=16"):
    model.forward(params, jnp.zeros((1, 17), jnp.int32), cfg)
  # The length check is static, so it also fires under jit.
  with pytest.raises(ValueError, match="sequence length 17"):
    jax.jit(model.forward, static_argnums=2)(params, jnp.zeros((1, 17), jnp.int32), cfg)
  # Under tracing the id check steps aside instead of breaking jit.
  jax.jit(model.forward, static_argnums=2)(params, jnp.zeros((1, 16), jnp.int32), cfg)


# ----------------------------------------------------------------------------- one scan over layers


def block_scans(source: str) -> list[str]:
  """Each loop over layers or remat policy of its own in ``source``: a ``*.scan(...)`` call
  whose arguments read ``[...]["blocks"]``, or a read of ``jax.checkpoint_policies`` (the remat
  policy's name resolved); the code's first line."""
  found = []
  for node in ast.walk(ast.parse(source)):
    scan = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        node.func.attr == "scan" and any(
            isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
            and n.slice.value == "blocks" for a in node.args for n in ast.walk(a))
    if scan or (isinstance(node, ast.Attribute) and node.attr == "checkpoint_policies"):
      found.append(ast.get_source_segment(source, node).split("\n")[0])
  return found


def test_the_scan_finder_finds_planted_loops_over_layers():
  planted = ('a = jax.lax.scan(step, x, (params["blocks"], jnp.arange(3)))\n'
             'b = jax.lax.scan(step, x, keys)\n'
             'c = nn.remat(Block, policy=getattr(jax.checkpoint_policies, policy))\n'
             'd = jax.checkpoint(fn)\ne = model.scan_layers(step, x, params["blocks"], cfg)\n')
  assert block_scans(planted) == ['jax.lax.scan(step, x, (params["blocks"], jnp.arange(3)))',
                                  "jax.checkpoint_policies"]


def test_the_layers_are_scanned_and_rematerialised_in_one_place():
  # Issue 72: model.scan_layers is the one loop over the stacked blocks (the model, the
  # sampler, the lens and the diagnostics walk it) and model.remat the one remat (the Flax
  # twin passes it nn.remat). The tests' own layer loops (here, test_norms) are the checks.
  found = found_outside("andrea_jax.model", block_scans)
  assert found == {}, f"a loop over layers or a remat outside model.scan_layers / model.remat: {found}"


def test_scan_layers_walks_each_block_with_its_index_and_its_slice():
  cfg = ModelConfig(vocab_size=11, block_size=4, d_model=4, n_layer=3, n_head=1, scan_unroll=2)
  blocks = {"w": jnp.arange(3.0)}
  step = lambda x, block, layer, extra: (x + block["w"] * 10 + layer + extra, (layer, extra))
  x, (layers, extras) = model.scan_layers(step, jnp.float32(0), blocks, cfg, jnp.asarray([0.5, 0.25, 0.0]))
  assert float(x) == 30 + 3 + 0.75
  np.testing.assert_array_equal(layers, [0, 1, 2])
  np.testing.assert_array_equal(extras, [0.5, 0.25, 0.0])

"""The norm types (model.norm_type) in every placement (model.norm, LayerNorm scaling too): the
seed's toy block against numpy, gradients against float64 finite differences, RMSNorm's scale
invariance, the per-layer constants of DeepNorm, Mix-LN and LayerNorm scaling against a layer
loop written here, their inits, causality, the parameter count, the Flax twin, KV-cache
sampling, the lens, the diagnostics and a short training run."""

import ast
import itertools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

from andrea_jax import diagnostics
from andrea_jax import errors
from andrea_jax import model
from andrea_jax import norms
from andrea_jax import sample
from andrea_jax.interop import hf_gpt2
from andrea_jax.model import ModelConfig
from andrea_jax.norms import Site
from andrea_jax.tools import lens
from andrea_jax.tools import toy
from andrea_jax.tools.flax_model import AndreaLM, to_flax
from tests.test_imports import found_outside

# (norm, norm_type, norm_depth_scaling): every placement x type, and LayerNorm scaling where
# it is defined (pre-norm; LayerNorm or RMSNorm).
COMBOS = ([(n, t, False) for n, t in itertools.product(norms.NORMS, norms.NORM_TYPES)]
          + [("pre", t, True) for t in ("layernorm", "rmsnorm")])
TINY = dict(vocab_size=23, block_size=8, d_model=8, n_layer=2, n_head=2)
EPS = 1e-5


def tiny(norm, norm_type, lns=False, **changes):
  return ModelConfig(**{**TINY, "norm": norm, "norm_type": norm_type, "norm_depth_scaling": lns,
                        **changes})


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
                 "reordered": lambda x, n: x + n(np_branch(x)),
                 # DeepNet, decoder-only, at L = 6: alpha = (2 L)^(1/4)
                 "deepnorm": lambda x, n: n(12 ** 0.25 * x + np_branch(x)),
                 "mix": None}  # a post-LN or a pre-LN block: both rows below
# The sites the toy block is run at beside the default one: (norm, site, numpy of the block).
NP_SITES = [("deepnorm", Site(alpha=12 ** 0.25), NP_PLACEMENTS["deepnorm"]),
            ("mix", Site(post=True), NP_PLACEMENTS["post"]),
            ("mix", Site(post=False), NP_PLACEMENTS["pre"]),
            # LayerNorm scaling in block l = 3 (index 2): the pre-norm output / sqrt(3)
            ("pre", Site(norm_scale=jnp.asarray(1 / np.sqrt(3))),
             lambda x, n: x + np_branch(n(x) / np.sqrt(3)))]


def toy_params(norm_type, scale, bias, alpha=0.7):
  p = {"layernorm": {"scale": scale, "bias": bias}, "rmsnorm": {"scale": scale},
       "dyt": {"alpha": jnp.asarray(alpha), "scale": scale, "bias": bias}}
  return p[norm_type]


@pytest.mark.parametrize("norm, norm_type", list(itertools.product(norms.NORMS, norms.NORM_TYPES)))
def test_toy_block_in_every_placement_and_norm_type_matches_numpy(norm, norm_type):
  scale, bias = np.array([1.0, 0.5, 2.0, -1.0]), np.array([0.1, 0.0, -0.2, 0.3])
  n = lambda h: np_norm(h, norm_type, 0.7, scale, bias)
  p = toy_params(norm_type, scale, bias)
  cases = [(site, fn) for name, site, fn in NP_SITES if name == norm]
  if NP_PLACEMENTS[norm] is not None and norm != "deepnorm":
    cases.append((Site(), NP_PLACEMENTS[norm]))
  for site, fn in cases:
    got = norms.residual_sublayer(jnp.asarray(toy.X), toy.branch, p, norm, EPS, norm_type=norm_type,
                                  out_params=p if norms.placement(norm).out_norm else None,
                                  site=site)
    np.testing.assert_allclose(got, fn(toy.X, n), atol=1e-5)
  assert cases
  assert set(NP_PLACEMENTS) == set(norms.NORMS)  # a new placement needs its numpy row here


def test_rmsnorm_has_no_mean_and_dyt_no_statistics():
  x = jnp.asarray(toy.X)  # mean 0.5: LayerNorm and RMSNorm differ on it
  ones = jnp.ones(4)
  assert not np.allclose(norms.rms_norm(x, ones), norms.layer_norm(x, ones, jnp.zeros(4)))
  np.testing.assert_allclose(norms.dyt(x, jnp.asarray(0.5), ones, jnp.zeros(4)), np.tanh(0.5 * toy.X),
                             rtol=1e-6)


@pytest.mark.parametrize("c", [0.01, 3.0, 250.0])
def test_rmsnorm_of_c_x_equals_rmsnorm_of_x(c):
  x = jax.random.normal(jax.random.key(0), (3, 16)) * 2.0
  scale = jax.random.normal(jax.random.key(1), (16,))
  np.testing.assert_allclose(norms.rms_norm(c * x, scale, 1e-12), norms.rms_norm(x, scale, 1e-12),
                             rtol=1e-5, atol=1e-6)


def test_norm_gradients_match_float64_finite_differences():
  with jax.enable_x64(True):
    x = jax.random.normal(jax.random.key(0), (3, 6), jnp.float64)
    scale = jax.random.normal(jax.random.key(1), (6,), jnp.float64)
    bias = jax.random.normal(jax.random.key(2), (6,), jnp.float64)
    check_grads(lambda x, s: norms.rms_norm(x, s, EPS), (x, scale), order=2, modes=["rev"])
    check_grads(lambda x, a, s, b: norms.dyt(x, a, s, b), (x, jnp.asarray(0.6), scale, bias),
                order=2, modes=["rev"])


def test_dyt_scales_the_embedding_by_a_learned_scalar_at_sqrt_d_and_its_gradient_is_exact():
  """Zhu et al.'s LLaMA recipe: a learned scalar after the embedding, sqrt(d_model) at init
  (their code's ``shared_scale``); LayerNorm and RMSNorm have none. Its gradient through the
  whole loss against float64 finite differences."""
  cfg = tiny("pre", "dyt")
  params = model.init_params(cfg, jax.random.key(0))
  assert float(params["emb_scale"]) == pytest.approx(math.sqrt(cfg.d_model))
  assert "emb_scale" not in model.init_params(tiny("pre", "rmsnorm"), jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 8), 0, cfg.vocab_size)
  unscaled = model.embed({**params, "emb_scale": jnp.asarray(1.0)}, tokens, cfg)
  np.testing.assert_allclose(model.embed(params, tokens, cfg), math.sqrt(cfg.d_model) * unscaled, rtol=1e-6)
  with jax.enable_x64(True):
    cfg64 = tiny("pre", "dyt", param_dtype="float64", compute_dtype="float64")
    p64 = model.init_params(cfg64, jax.random.key(0))
    loss = lambda scale: model.loss_fn({**p64, "emb_scale": scale}, tokens[:, :-1], tokens[:, 1:], cfg64)
    check_grads(loss, (p64["emb_scale"],), order=1, modes=["rev"])


@pytest.mark.parametrize("norm, site", [
    ("deepnorm", Site(alpha=1.7)),  # the alpha path: d/dx of N(alpha x + F(x))
    ("pre", Site(norm_scale=1 / math.sqrt(3))),  # LayerNorm scaling's 1/sqrt(l)
    ("mix", Site(post=True)), ("mix", Site(post=False))])
def test_new_sublayers_gradients_match_float64_finite_differences(norm, site):
  with jax.enable_x64(True):
    x = jax.random.normal(jax.random.key(0), (3, 4), jnp.float64)
    ln = {"scale": 1 + 0.3 * jax.random.normal(jax.random.key(1), (4,), jnp.float64),
          "bias": 0.1 * jax.random.normal(jax.random.key(2), (4,), jnp.float64)}
    f = lambda x, ln: norms.residual_sublayer(x, toy.branch, ln, norm, EPS, site=site)
    check_grads(f, (x, ln), order=2, modes=["rev"])


# ----------------------------------------------------------------------------- the per-layer pieces


def _loop_forward(params, tokens, cfg):
  """The model with a Python loop over the layers and each layer's pattern written here:
  DeepNet's alpha = (2L)^(1/4), Mix-LN's post-LN first blocks, LayerNorm scaling's
  1/sqrt(l) with l the 1-based layer."""
  L = cfg.n_layer
  n_post = {(4, 0.25): 1, (4, 0.5): 2, (6, 0.25): 2, (4, 1.0): 4}.get((L, cfg.mix_post_fraction))
  x = model.embed(params, tokens, cfg)
  for l in range(L):
    b = jax.tree.map(lambda a, l=l: a[l], params["blocks"])
    for branch, ln in ((lambda h: model.attention(h, b["attn"], cfg), "ln_1"),
                       (lambda h: model.mlp(h, b["mlp"], cfg), "ln_2")):
      n = lambda h, ln=ln: norms.normalise(h, b[ln], cfg.norm_type, cfg.ln_eps)
      if cfg.norm == "deepnorm":
        x = n((2 * L) ** 0.25 * x + branch(x))
      elif cfg.norm == "mix" and l < n_post:
        x = n(x + branch(x))
      else:
        x = x + branch(n(x) / (math.sqrt(l + 1) if cfg.norm_depth_scaling else 1.0))
  return model.unembed(params, x, cfg)


@pytest.mark.parametrize("norm, lns, fraction", [
    ("deepnorm", False, 0.25), ("mix", False, 0.25), ("mix", False, 0.5), ("mix", False, 1.0),
    ("pre", True, 0.25)])
def test_the_layer_scan_gives_each_block_its_constants(norm, lns, fraction):
  cfg = tiny(norm, "layernorm", lns, n_layer=4, mix_post_fraction=fraction)
  params = _perturbed(model.init_params(cfg, jax.random.key(0)), jax.random.key(1))
  tokens = jax.random.randint(jax.random.key(2), (2, 8), 0, cfg.vocab_size)
  np.testing.assert_allclose(model.forward(params, tokens, cfg), _loop_forward(params, tokens, cfg),
                             atol=2e-5, rtol=1e-5)


def test_mix_post_layers_rounds_half_up():
  got = {(L, f): norms.mix_post_layers(tiny("mix", "layernorm", n_layer=L, mix_post_fraction=f))
         for L, f in ((12, 0.25), (6, 0.25), (10, 0.25), (4, 0.0), (4, 1.0), (2, 0.25))}
  assert got == {(12, 0.25): 3, (6, 0.25): 2, (10, 0.25): 3, (4, 0.0): 0, (4, 1.0): 4, (2, 0.25): 1}


@pytest.mark.parametrize("init", ["gpt2", "xavier"])
def test_deepnorm_init_scales_v_out_and_mlp_by_beta_and_lns_drops_the_depth_scaling(init):
  L, D = 3, TINY["d_model"]
  beta = (8 * L) ** -0.25  # DeepNet, Figure 2, decoder-only
  key = jax.random.key(0)
  pre = model.init_params(tiny("pre", "layernorm", n_layer=L, init=init), key)["blocks"]
  deep = model.init_params(tiny("deepnorm", "layernorm", n_layer=L, init=init), key)["blocks"]
  lns = model.init_params(tiny("pre", "layernorm", True, n_layer=L, init=init), key)["blocks"]
  # GPT-2 scales the residual-writing projections by 1/sqrt(2L); DeepNet's beta replaces it,
  # and LayerNorm scaling drops it (Sun et al. 2025, footnote 1). Xavier has none to drop.
  depth = math.sqrt(2 * L) if init == "gpt2" else 1.0
  qkv_pre, qkv_deep = pre["attn"]["w_qkv"], deep["attn"]["w_qkv"]
  np.testing.assert_array_equal(qkv_deep[..., :2 * D], qkv_pre[..., :2 * D])  # q, k: gain 1
  np.testing.assert_allclose(qkv_deep[..., 2 * D:], beta * qkv_pre[..., 2 * D:], rtol=1e-6)
  np.testing.assert_allclose(deep["mlp"]["w_in"], beta * pre["mlp"]["w_in"], rtol=1e-6)
  for group in ("attn", "mlp"):
    np.testing.assert_allclose(deep[group]["w_out"], beta * depth * pre[group]["w_out"], rtol=1e-5)
    np.testing.assert_allclose(lns[group]["w_out"], depth * pre[group]["w_out"], rtol=1e-5)
  np.testing.assert_array_equal(lns["attn"]["w_qkv"], qkv_pre)


# ----------------------------------------------------------------------------- the whole model


@pytest.mark.parametrize("norm, norm_type, lns", COMBOS)
def test_count_params_equals_the_initialised_leaves(norm, norm_type, lns):
  cfg = tiny(norm, norm_type, lns)
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


@pytest.mark.parametrize("norm, norm_type, lns", COMBOS)
def test_flax_twin_kv_cache_and_lens_equal_the_pure_model(norm, norm_type, lns):
  cfg = tiny(norm, norm_type, lns)
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
  np.testing.assert_allclose(lens.capture(params, tokens, cfg)["logits_BTV"], want, atol=2e-5,
                             rtol=1e-5)


@pytest.mark.parametrize("norm, norm_type, lns", COMBOS)
def test_causal_in_every_combination(norm, norm_type, lns):
  cfg = tiny(norm, norm_type, lns)
  params = _perturbed(model.init_params(cfg, jax.random.key(0)), jax.random.key(1))
  tokens = jax.random.randint(jax.random.key(2), (1, 8), 0, cfg.vocab_size)
  changed = tokens.at[0, 5].set((tokens[0, 5] + 1) % cfg.vocab_size)
  a, b = model.forward(params, tokens, cfg), model.forward(params, changed, cfg)
  np.testing.assert_array_equal(a[:, :5], b[:, :5])
  assert not np.allclose(a[:, 5:], b[:, 5:])


def adam_losses(cfg, tokens, steps: int, rate: float = 3e-2) -> list[float]:
  """The training loss of ``steps`` full-batch Adam updates on ``tokens`` from the model's init
  (key 0): the short run a switch's "it learns" test reads."""
  params = model.init_params(cfg, jax.random.key(0))
  opt = optax.adam(rate)

  @jax.jit
  def step(params, state):
    loss, g = jax.value_and_grad(model.loss_fn)(params, tokens[:, :-1], tokens[:, 1:], cfg)
    updates, state = opt.update(g, state, params)
    return optax.apply_updates(params, updates), state, loss

  state, losses = opt.init(params), []
  for _ in range(steps):
    params, state, loss = step(params, state)
    losses.append(float(loss))
  return losses


@pytest.mark.parametrize("norm, norm_type, lns", COMBOS)
def test_one_layer_few_steps_learns(norm, norm_type, lns):
  # Mix-LN in two layers, one post-LN and one pre-LN; the rest in one.
  cfg = tiny(norm, norm_type, lns, n_layer=2 if norm == "mix" else 1, mix_post_fraction=0.5)
  tokens = jax.random.randint(jax.random.key(3), (4, 8), 0, cfg.vocab_size)
  # 100 steps for Mix-LN's two layers: DyT in its post-LN block starts in tanh's linear region
  # (a stream of the embeddings' 0.02 scale) and halves its loss only after about 80.
  losses = adam_losses(cfg, tokens, 100 if norm == "mix" else 30)
  assert losses[-1] < 0.5 * losses[0], losses


def test_unknown_norm_type_and_bad_alpha_are_refused_by_name():
  with pytest.raises(errors.ConfigError, match="ModelConfig.norm_type='batchnorm': expected one of"):
    tiny("pre", "batchnorm")
  with pytest.raises(errors.ConfigError, match="ModelConfig.dyt_alpha_init=0"):
    tiny("pre", "dyt", dyt_alpha_init=0)


def test_diagnostics_walk_the_layers_with_their_index():
  cfg = tiny("mix", "layernorm", n_layer=2)  # block 0 post-LN, block 1 pre-LN
  params = _perturbed(model.init_params(cfg, jax.random.key(0)), jax.random.key(1))
  tokens = jax.random.randint(jax.random.key(2), (2, 8), 0, cfg.vocab_size)
  streams = lens.capture(params, tokens, cfg, streams=True)["streams_PBTD"]
  mean_norm = lambda x: float(jnp.mean(jnp.linalg.norm(x, axis=-1)))
  np.testing.assert_allclose(diagnostics.residual_norms(params, tokens, cfg),
                             [mean_norm(streams[p]) for p in (0, 2, 4)], rtol=1e-5)
  assert np.all(np.isfinite(diagnostics.gradient_flow(params, tokens, cfg)))
  assert diagnostics.attention_logits(params, tokens, cfg, 1).shape == (2, 2, 8, 8)
  with pytest.raises(ValueError, match="model.norm='mix' differs by layer: pass layer="):
    model.block_forward(jax.tree.map(lambda a: a[0], params["blocks"]),
                        model.embed(params, tokens, cfg), cfg)


@pytest.mark.parametrize("changes, message", [
    (dict(norm="mix", mix_post_fraction=1.5), "model.mix_post_fraction=1.5: expected a fraction"),
    (dict(norm="mix", mix_post_fraction=True), "model.mix_post_fraction=True"),
    (dict(norm_depth_scaling=1), "model.norm_depth_scaling=1: expected True or False"),
    (dict(norm="post", norm_depth_scaling=True),
     "model.norm_depth_scaling=True with model.norm='post': "),
    (dict(norm="mix", norm_depth_scaling=True),
     "model.norm_depth_scaling=True with model.norm='mix': "),
    (dict(norm="deepnorm", norm_depth_scaling=True),
     "model.norm_depth_scaling=True with model.norm='deepnorm': "),
    (dict(norm_type="dyt", norm_depth_scaling=True),
     "model.norm_depth_scaling=True with model.norm_type='dyt': "),
    (dict(norm="deepnorm", depth_rule="completep", base_depth=1),
     "model.depth_rule='completep' with model.norm='deepnorm': "),
    (dict(norm="mix", depth_rule="completep", base_depth=1),
     "model.depth_rule='completep' with model.norm='mix': "),
    (dict(norm_depth_scaling=True, depth_rule="completep", base_depth=1),
     "model.depth_rule='completep' with model.norm_depth_scaling=True: "),
])
def test_unsupported_combinations_are_refused_in_one_line_naming_the_fields(changes, message):
  with pytest.raises(errors.ConfigError, match=re.escape(message)) as info:
    ModelConfig(**{**TINY, **changes})
  assert "\n" not in str(info.value)


@pytest.mark.parametrize("changes, message", [
    (dict(norm="deepnorm"), "model.norm='deepnorm': GPT-2 blocks are pre-norm"),
    (dict(norm="mix"), "model.norm='mix': GPT-2 blocks are pre-norm"),
    (dict(norm_depth_scaling=True), "model.norm_depth_scaling=True: GPT-2"),
])
def test_gpt2_export_refuses_the_new_placements_by_name(changes, message):
  with pytest.raises(hf_gpt2.UnexportableError, match=re.escape(message)):
    hf_gpt2.check_exportable(ModelConfig(**{**TINY, **changes}))


@pytest.mark.parametrize("norm", ["deepnorm", "mix"])
def test_direct_logit_attribution_refuses_the_new_placements_by_name(norm):
  cfg = tiny(norm, "layernorm")
  params = model.init_params(cfg, jax.random.key(0))
  tokens = jnp.zeros((1, 4), jnp.int32)
  with pytest.raises(errors.ConfigError, match=f"model.norm='{norm}' has no linearisation"):
    lens.direct_logit_attribution(params, tokens, tokens, cfg)


def test_inspect_reads_a_model_the_attribution_cannot_and_says_why(tmp_path, monkeypatch):
  # Loaded with flags of its own: experiments.report's --out, imported by another test in the
  # same worker, would collide with inspect's on absl's global flags.
  from test_cli import entry_point  # pylint: disable=import-outside-toplevel
  inspect_cmd, _ = entry_point("inspect", monkeypatch)
  cfg = tiny("mix", "layernorm", n_layer=2)
  params = model.init_params(cfg, jax.random.key(0))
  ids = np.arange(6) % cfg.vocab_size
  result = inspect_cmd.inspect_model(params, cfg, ids, ablation_batch=0)
  s = inspect_cmd.summary(result, cfg, [str(i) for i in ids])
  assert s["attribution_missing"] == "model.norm='mix' has no linearisation here (pre and post do)"
  assert s["contributions"]["direct_logit_attribution"] is None
  assert len(s["contributions"]["relative_norm"]) == 4  # the lens itself reads every sublayer
  inspect_cmd.write_figures(str(tmp_path), "", result, s, None, 0, 4)
  inspect_cmd.contributions_figure([("mix", s)]).savefig(tmp_path / "contributions.png")
  assert (tmp_path / "ablation.png").exists()


@pytest.mark.parametrize("norm, lns", [("deepnorm", False), ("mix", False), ("pre", True)])
def test_mup_at_its_base_width_is_the_sp_model_in_the_new_placements(norm, lns):
  # muP's width rules multiply the same matrices as DeepNet's beta; at the base width every
  # width factor is 1, so the init is sp's to the bit.
  # init="gpt2": muP scales GPT-2's init (deepnorm's "auto" would be Xavier, which muP refuses).
  sp = tiny(norm, "layernorm", lns, init="gpt2")
  mup_cfg = tiny(norm, "layernorm", lns, init="gpt2", parametrization="mup", base_width=TINY["d_model"])
  a, b = (model.init_params(c, jax.random.key(0)) for c in (sp, mup_cfg))
  jax.tree.map(np.testing.assert_array_equal, a, b)
  tokens = jax.random.randint(jax.random.key(2), (1, 8), 0, sp.vocab_size)
  np.testing.assert_array_equal(model.forward(a, tokens, sp), model.forward(b, tokens, mup_cfg))


# ----------------------------------------------------------------------------- a placement is its entry

NORM_FIELDS = ("norm", "norm_type", "final_norm", "final_norm_type")


def norm_name_tests(source: str) -> list[str]:
  """Each ``X.norm == "pre"``-like comparison in ``source``: a norm field (``NORM_FIELDS``, as
  an attribute or a bare name) against a string or a tuple of strings; the code line."""
  def named(node):
    return (isinstance(node, ast.Attribute) and node.attr in NORM_FIELDS) or \
        (isinstance(node, ast.Name) and node.id in NORM_FIELDS)

  def text(node):
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items)

  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Compare):
      sides = [node.left, *node.comparators]
      if any(named(s) for s in sides) and any(text(s) for s in sides):
        found.append(ast.get_source_segment(source, node))
  return found


def test_the_name_finder_finds_planted_tests_and_not_table_lookups():
  planted = ('a = cfg.norm == "pre"\nb = self.norm_type != "dyt"\nc = cfg.norm in ("deepnorm", "mix")\n'
             'd = norm_type == "layernorm"\ne = cfg.final_norm != "layernorm"\n'
             'f = placement(cfg.norm).gpt2\ng = cfg.norm == other\nh = p.lens == "final"\n')
  assert norm_name_tests(planted) == ['cfg.norm == "pre"', 'self.norm_type != "dyt"',
                                      'cfg.norm in ("deepnorm", "mix")', 'norm_type == "layernorm"',
                                      'cfg.final_norm != "layernorm"']


def test_no_reader_tests_a_norm_by_name_outside_the_tables():
  # Issue 72: every fact of a placement or a norm type is a field of its entry in norms.py
  # (PLACEMENTS, NORMALISERS); a reader asks the entry, never the name.
  found = found_outside("andrea_jax.norms", norm_name_tests)
  assert found == {}, f"norm names tested outside norms.py (ask placement()/normaliser()): {found}"

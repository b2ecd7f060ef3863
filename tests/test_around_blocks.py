"""The choices around the blocks: the embedding norm (``ln_emb``), the embedding and head init
stds, the final norm's own type, DyT's alpha_0 by position, and ``init="auto"``."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from andrea_jax import errors
from andrea_jax import model
from andrea_jax import norms
from andrea_jax import resume
from andrea_jax.model import ModelConfig
from tests.test_norms import _perturbed  # every leaf moved off its init

TINY = dict(vocab_size=23, block_size=8, d_model=8, n_layer=2, n_head=2)
VARIANTS = [dict(embedding_norm=True), dict(embedding_norm=True, norm_type="rmsnorm"),
            dict(embedding_norm=True, norm_type="dyt", bias=False),
            dict(final_norm_type="rmsnorm"), dict(final_norm_type="dyt", dyt_alpha_final_init=0.2),
            dict(norm="peri", embedding_norm=True, final_norm_type="layernorm", norm_type="rmsnorm"),
            dict(norm_type="dyt", final_norm_type="layernorm", dyt_alpha_attn_init=0.8),
            dict(tie_embeddings=False, embedding_init_std=1.0, head_init_std=0.1)]


def tiny(**changes):
  return ModelConfig(**{**TINY, **changes})


@pytest.mark.parametrize("changes", VARIANTS)
def test_count_params_equals_the_initialised_leaves(changes):
  cfg = tiny(**changes)
  params = model.init_params(cfg, jax.random.key(0))
  assert model.count_params(cfg) == sum(a.size for a in jax.tree.leaves(params))


@pytest.mark.parametrize("norm_type", norms.NORM_TYPES)
def test_the_embedding_norm_is_the_blocks_norm_on_the_embedding_output(norm_type):
  cfg = tiny(embedding_norm=True, norm_type=norm_type, embedding_multiplier=3.0)
  params = model.init_params(cfg, jax.random.key(0))
  # Same leaves as the blocks' norms (norm type, bias), unstacked; none without the switch.
  assert jax.tree.structure(params["ln_emb"]) == jax.tree.structure(
      jax.tree.map(lambda a: a[0], params["blocks"]["ln_2"]))
  assert "ln_emb" not in model.init_params(tiny(norm_type=norm_type), jax.random.key(0))
  params["ln_emb"] = jax.tree.map(lambda a: a + 0.3, params["ln_emb"])
  tokens = jax.random.randint(jax.random.key(1), (2, 8), 0, cfg.vocab_size)
  raw = model.embed({k: v for k, v in params.items() if k != "ln_emb"}, tokens,
                    tiny(norm_type=norm_type, embedding_multiplier=3.0))  # after the multipliers
  want = norms.normalise(raw, params["ln_emb"], norm_type, cfg.ln_eps)
  np.testing.assert_allclose(model.embed(params, tokens, cfg), want, rtol=1e-6, atol=1e-6)


def test_the_final_norm_has_its_own_type():
  cfg = tiny(norm_type="dyt", final_norm_type="layernorm")
  params = model.init_params(cfg, jax.random.key(0))
  assert set(params["ln_f"]) == {"scale", "bias"} and "alpha" in params["blocks"]["ln_1"]
  assert set(model.init_params(tiny(final_norm_type="rmsnorm"), jax.random.key(0))["ln_f"]) == {"scale"}
  x = jax.random.normal(jax.random.key(1), (2, 8, 8))
  ln_f = {"scale": 1.5 * params["ln_f"]["scale"], "bias": params["ln_f"]["bias"] + 0.2}
  params = {**params, "ln_f": ln_f}
  want = norms.layer_norm(x, ln_f["scale"], ln_f["bias"], cfg.ln_eps) @ params["wte"].T
  np.testing.assert_allclose(model.unembed(params, x, cfg), want, rtol=1e-5, atol=1e-5)


def test_dyt_alpha_by_position_follows_zhu_et_al():
  # LLaMA 7B's flags in Zhu et al.'s README: attention 0.8, FFN 0.2, final (dec) 0.2.
  cfg = tiny(norm="peri", norm_type="dyt", dyt_alpha_init=0.2, dyt_alpha_attn_init=0.8,
             dyt_alpha_final_init=0.3, embedding_norm=True)
  p = model.init_params(cfg, jax.random.key(0))
  b = p["blocks"]
  for name, alpha in (("ln_1", 0.8), ("ln_1_out", 0.8), ("ln_2", 0.2), ("ln_2_out", 0.2)):
    np.testing.assert_allclose(b[name]["alpha"], [alpha] * cfg.n_layer, rtol=1e-6)
  assert float(p["ln_f"]["alpha"]) == pytest.approx(0.3)
  assert float(p["ln_emb"]["alpha"]) == pytest.approx(0.2)
  plain = model.init_params(tiny(norm_type="dyt"), jax.random.key(0))  # 0: dyt_alpha_init
  assert float(plain["ln_f"]["alpha"]) == 0.5 and set(np.asarray(plain["blocks"]["ln_1"]["alpha"]).tolist()) == {0.5}


def test_bias_false_drops_dyts_bias():
  # Zhu et al.'s LLaMA DyT is weight * tanh(alpha x): no bias.
  p = model.init_params(tiny(norm_type="dyt", bias=False, embedding_norm=True), jax.random.key(0))
  for leaves in (p["blocks"]["ln_1"], p["ln_f"], p["ln_emb"]):
    assert set(leaves) == {"alpha", "scale"}


def test_embedding_and_head_init_stds():
  cfg = ModelConfig(vocab_size=512, block_size=8, d_model=64, n_layer=1, n_head=2,
                    tie_embeddings=False, embedding_init_std=1.0, head_init_std=0.125)
  p = model.init_params(cfg, jax.random.key(0))
  assert float(jnp.std(p["wte"])) == pytest.approx(1.0, rel=0.03)
  assert float(jnp.std(p["lm_head"])) == pytest.approx(0.125, rel=0.03)
  assert float(jnp.std(p["wpe"])) == pytest.approx(0.02, rel=0.1)
  default = model.init_params(ModelConfig(**{**cfg.__dict__, "embedding_init_std": 0.02,
                                            "head_init_std": 0.02}), jax.random.key(0))
  np.testing.assert_allclose(p["wte"], default["wte"] * 50, rtol=1e-5)  # the same draw, rescaled


def test_init_auto_is_xavier_under_deepnorm_and_gpt2_otherwise():
  deep = tiny(norm="deepnorm")
  assert deep.init == "auto" and deep.init_scheme == "xavier"
  xavier = model.block_init_stds(tiny(norm="deepnorm", init="xavier"))
  assert model.block_init_stds(deep) == xavier
  assert model.block_init_stds(tiny(norm="deepnorm", init="gpt2")) != xavier  # asked otherwise
  for norm in ("pre", "post", "peri"):
    auto, gpt2 = (model.init_params(tiny(norm=norm, init=i), jax.random.key(0)) for i in ("auto", "gpt2"))
    jax.tree.map(np.testing.assert_array_equal, auto, gpt2)


def test_a_resume_compares_init_as_the_scheme_it_resolves_to():
  saved = {"model": {"init": "gpt2", "norm": "pre"}}
  assert not resume.config_changes(saved, {"model": {"init": "auto", "norm": "pre"}})["frozen"]
  deep = {"model": {"init": "gpt2", "norm": "deepnorm"}}
  changed = resume.config_changes(deep, {"model": {"init": "auto", "norm": "deepnorm"}})["frozen"]
  assert changed == [{"field": "model.init", "old": "gpt2", "new": "xavier"}]


@pytest.mark.parametrize("changes, message", [
    (dict(final_norm_type="batchnorm"), "model.final_norm_type='batchnorm': expected ''"),
    (dict(norm="post", final_norm_type="rmsnorm"), "model.final_norm_type='rmsnorm' with model.norm='post'"),
    (dict(dyt_alpha_attn_init=0.8), "model.dyt_alpha_attn_init=0.8 but that norm is 'layernorm'"),
    (dict(norm_type="dyt", dyt_alpha_final_init=0.2, final_norm_type="rmsnorm"),
     "model.dyt_alpha_final_init=0.2 but that norm is 'rmsnorm'"),
    (dict(dyt_alpha_attn_init=-1.0, norm_type="dyt"), "model.dyt_alpha_attn_init=-1.0: expected 0"),
    (dict(embedding_init_std=0.0), "model.embedding_init_std=0.0: expected a positive std"),
    (dict(head_init_std=0.1), "model.head_init_std=0.1 with tie_embeddings=True"),
    (dict(embedding_norm=1), "ModelConfig.embedding_norm=1: expected True or False"),
    (dict(embedding_norm=True, parametrization="mup", base_width=8),
     "model.embedding_norm=True with parametrization='mup'"),
    (dict(norm="deepnorm", parametrization="mup", base_width=8),
     "ModelConfig.init='auto (xavier)' with parametrization='mup'"),
])
def test_bad_settings_are_one_line(changes, message):
  with pytest.raises(errors.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
    tiny(**changes)
  assert "\n" not in str(info.value)


@pytest.mark.parametrize("changes", [dict(embedding_norm=True), dict(embedding_norm=True, norm_type="dyt"),
                                     dict(final_norm_type="rmsnorm", norm_type="dyt"),
                                     dict(final_norm_type="dyt", embedding_norm=True, norm_type="rmsnorm")])
def test_gradients_through_the_new_norms_match_float64_finite_differences(changes):
  with jax.enable_x64(True):
    cfg = tiny(param_dtype="float64", compute_dtype="float64", **changes)
    params = model.init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, 8), 0, cfg.vocab_size)
    names = [n for n in ("ln_emb", "ln_f") if n in params]
    loss = lambda *ps: model.loss_fn({**params, **dict(zip(names, ps))}, tokens[:, :-1], tokens[:, 1:], cfg)
    check_grads(loss, tuple(params[n] for n in names), order=1, modes=["rev"])
    assert math.isfinite(float(loss(*(params[n] for n in names))))


# ----------------------------------------------------------------------------- the readers


@pytest.mark.parametrize("changes", VARIANTS)
def test_flax_twin_kv_cache_and_lens_equal_the_pure_model(changes):
  from andrea_jax import sample
  from andrea_jax.tools import lens
  from andrea_jax.tools.flax_model import AndreaLM, from_flax, to_flax
  cfg = tiny(**changes)
  pure = model.init_params(cfg, jax.random.key(0))
  params = _perturbed(pure, jax.random.key(1))  # scale 1 / bias 0 / alpha_0 hide no wrong leaf
  tokens = jax.random.randint(jax.random.key(2), (2, 8), 0, cfg.vocab_size)
  want = model.forward(params, tokens, cfg)
  flax_init = from_flax(AndreaLM(cfg).init(jax.random.key(0), tokens)["params"])
  assert jax.tree.structure(flax_init) == jax.tree.structure(pure)
  for name in ("ln_f", "ln_emb"):  # the Flax twin's norms start where init_params's do
    if name in pure:
      jax.tree.map(np.testing.assert_array_equal, flax_init[name], pure[name])
  jax.tree.map(np.testing.assert_array_equal, flax_init["blocks"]["ln_1"], pure["blocks"]["ln_1"])
  np.testing.assert_allclose(AndreaLM(cfg).apply({"params": to_flax(params)}, tokens), want,
                             atol=2e-5, rtol=1e-5)
  cache = sample.init_cache(cfg, 2, 8)
  first, cache = sample.forward_cached(params, tokens[:, :5], cache, 0, cfg)
  rest, _ = sample.forward_cached(params, tokens[:, 5:], cache, 5, cfg)
  np.testing.assert_allclose(jnp.concatenate([first, rest], 1), want, atol=2e-5, rtol=1e-5)
  np.testing.assert_allclose(lens.capture(params, tokens, cfg)["logits_BTV"], want, atol=2e-5,
                             rtol=1e-5)


def test_flax_twin_draws_the_embedding_and_head_at_their_stds():
  from andrea_jax.tools.flax_model import AndreaLM, from_flax
  cfg = ModelConfig(vocab_size=512, block_size=8, d_model=64, n_layer=1, n_head=2,
                    tie_embeddings=False, embedding_init_std=1.0, head_init_std=0.125)
  p = from_flax(AndreaLM(cfg).init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"])
  assert float(jnp.std(p["wte"])) == pytest.approx(1.0, rel=0.03)
  assert float(jnp.std(p["lm_head"])) == pytest.approx(0.125, rel=0.03)


@pytest.mark.parametrize("changes, message", [
    (dict(embedding_norm=True), "model.embedding_norm=True: GPT-2 adds wte and wpe"),
    (dict(final_norm_type="rmsnorm"), "model.final_norm_type='rmsnorm': GPT-2's ln_f is a LayerNorm")])
def test_gpt2_export_refuses_what_gpt2_cannot_hold(changes, message):
  from andrea_jax.interop import gpt2_config
  with pytest.raises(gpt2_config.UnexportableError, match=message) as info:
    gpt2_config.check_exportable(tiny(**changes))
  assert "\n" not in str(info.value)
  gpt2_config.check_exportable(tiny(final_norm_type="layernorm"))  # the same function as ''


def test_lens_attribution_refuses_a_final_norm_it_cannot_linearise():
  from andrea_jax.tools import lens
  assert "final_norm_type='rmsnorm'" in lens.attribution_refusal(tiny(final_norm_type="rmsnorm"))
  assert lens.attribution_refusal(tiny(embedding_norm=True)) is None  # x0 is the embed point


def test_flops_count_the_new_norms():
  a, b = tiny(), tiny(embedding_norm=True)
  assert model.flops_per_token(b) - model.flops_per_token(a) == 6 * norms.norm_size(b)

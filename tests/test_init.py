"""model.init: GPT-2's initialisation (the default) and Xavier/Glorot normal (Xiong et al. 2020)."""

import math

import jax
import numpy as np
import pytest

from andrea_jax import model

CFG = dict(vocab_size=97, block_size=16, d_model=64, n_layer=3, n_head=4, mlp_ratio=4.0)


def test_xavier_weights_have_glorot_std():
  params = model.init_params(model.ModelConfig(**CFG, init="xavier"), jax.random.key(0))
  D, F = 64, 256
  expected = {("attn", "w_qkv"): math.sqrt(2 / (D + D)), ("attn", "w_out"): math.sqrt(2 / (D + D)),
              ("mlp", "w_in"): math.sqrt(2 / (D + F)), ("mlp", "w_out"): math.sqrt(2 / (F + D))}
  for (group, name), std in expected.items():
    w = np.asarray(params["blocks"][group][name])
    # Standard error of a sample std is std / sqrt(2 n): allow 5 of them.
    assert abs(w.std() - std) < 5 * std / math.sqrt(2 * w.size), (group, name, w.std(), std)
  assert abs(np.asarray(params["wte"]).std() - 0.02) < 0.002  # embeddings stay GPT-2's


def test_gpt2_is_the_default_and_every_leaf_follows_its_spec():
  # GPT-2's init, leaf by leaf: N(0, 0.02) for the embeddings, QKV and MLP input; the two
  # projections into the residual stream N(0, 0.02 / sqrt(2 n_layer)); every bias 0 and
  # every LayerNorm scale 1, bias 0; the layers drawn apart, not copies of one another.
  cfg = model.ModelConfig(**CFG)
  assert cfg.init == "auto" and cfg.init_scheme == "gpt2"
  params = jax.jit(model.init_params, static_argnums=0)(cfg, jax.random.key(0))
  resid = 0.02 / math.sqrt(2 * 3)
  stds = {"wte": 0.02, "wpe": 0.02, "blocks/attn/w_qkv": 0.02, "blocks/attn/w_out": resid,
          "blocks/mlp/w_in": 0.02, "blocks/mlp/w_out": resid}
  seen = set()
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    name, w = jax.tree_util.keystr(path, simple=True, separator="/"), np.asarray(leaf)
    if name in stds:
      std = stds[name]
      # Standard error of a sample std is std / sqrt(2 n), of a mean std / sqrt(n): 5 of each.
      assert abs(w.std() - std) < 5 * std / math.sqrt(2 * w.size), (name, w.std(), std)
      assert abs(w.mean()) < 5 * std / math.sqrt(w.size), (name, w.mean())
      if name.startswith("blocks/"):
        assert not np.allclose(w[0], w[1]), name
    elif name.endswith("/scale"):
      assert np.all(w == 1), name
    else:
      assert name.rsplit("/", 1)[-1].startswith("b"), name  # a bias: nothing else is left
      assert np.all(w == 0), name
    seen.add(name)
  assert set(stds) <= seen and "ln_f/bias" in seen and "blocks/mlp/b_out" in seen


def test_unknown_init_is_refused():
  with pytest.raises(ValueError, match="ModelConfig.init='he'"):
    model.ModelConfig(**CFG, init="he")

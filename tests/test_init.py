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


def test_gpt2_is_the_default_and_unchanged():
  cfg = model.ModelConfig(**CFG)
  assert cfg.init == "gpt2"
  params = model.init_params(cfg, jax.random.key(0))
  explicit = model.init_params(model.ModelConfig(**CFG, init="gpt2"), jax.random.key(0))
  assert jax.tree.all(jax.tree.map(np.array_equal, params, explicit))
  resid = 0.02 / math.sqrt(2 * 3)
  for group, name, std in (("attn", "w_qkv", 0.02), ("attn", "w_out", resid),
                           ("mlp", "w_in", 0.02), ("mlp", "w_out", resid)):
    w = np.asarray(params["blocks"][group][name])
    assert abs(w.std() - std) < 5 * std / math.sqrt(2 * w.size), (group, name)


def test_unknown_init_is_refused():
  with pytest.raises(ValueError, match="ModelConfig.init='he'"):
    model.ModelConfig(**CFG, init="he")

"""The parameters' initialisation: ``init_params`` draws the whole tree, per-layer weights
stacked on a leading ``n_layer`` axis.

Each block matrix's std is ``block_init_stds``'s: GPT-2's (the default) or Xavier's, with
muP's width and the depth rules' scalings and DeepNet's gains. The norms' leaves are
``norms.norm_params``'s; ``zero_query`` zeroes the query columns under ``zero_query_init``;
``embedding_scale_init`` is DyT's embedding scalar. ``model.count_params`` counts the same
tree from the config alone.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from andrea_jax import mup
from andrea_jax.model_config import ModelConfig
from andrea_jax.norms import dyt_alphas, norm_params, normaliser, placement


def block_init_stds(cfg: ModelConfig) -> dict[str, float]:
  """Init std of each block matrix: ``{"qkv", "v", "attn_out", "mlp_in", "mlp_out"}``
  (``"qkv"``: the query and key columns of the fused QKV matrix, ``"v"``: its value columns).

  The scheme is ``cfg.init_scheme`` (``init="auto"``: Xavier under DeepNorm, GPT-2's otherwise).
  ``init="gpt2"``: N(0, 0.02); the two projections that write into the residual stream
  (attention output, MLP output) are scaled by 1/sqrt(2 n_layer) so the stream's variance
  does not grow with depth (under a depth rule, by 1/sqrt(2 base_depth): the branch
  multiplier ``mup.branch_multiplier`` carries the depth); under muP all of them also by
  ``mup.hidden_init_scale``.
  ``init="xavier"``: Glorot normal, N(0, 2 / (fan_in + fan_out)), with no depth scaling,
  the initialisation Xiong et al. 2020 analyse (the fused QKV and SwiGLU matrices count as
  separate D x D and D x F matrices).
  ``norm="deepnorm"``: DeepNet's init (Wang et al. 2022, section 3 and Figure 2): the value,
  attention output and both MLP matrices times beta = (8 n_layer)^(-1/4), queries and keys
  gain 1, and no GPT-2 depth scaling (beta is DeepNet's own); with ``init="xavier"`` it is
  Figure 2's Xavier normal with gain beta exactly. ``norm_depth_scaling``: no GPT-2 depth
  scaling either (Sun et al. 2025, footnote 1: scaled initialisation undoes LayerNorm scaling).
  """
  D, F = cfg.d_model, cfg.mlp_dim
  gain = placement(cfg.norm).init_gain
  if cfg.init_scheme == "xavier":
    glorot = lambda fan_in, fan_out: math.sqrt(2.0 / (fan_in + fan_out))
    stds = {"qkv": glorot(D, D), "v": glorot(D, D), "attn_out": glorot(D, D),
            "mlp_in": glorot(D, F), "mlp_out": glorot(F, D)}
  else:
    std = 0.02 * mup.hidden_init_scale(cfg)
    own_depth_rule = gain is not None or cfg.norm_depth_scaling
    resid_std = std if own_depth_rule else std / math.sqrt(2 * mup.init_depth(cfg))
    stds = {"qkv": std, "v": std, "attn_out": resid_std, "mlp_in": std, "mlp_out": resid_std}
  if gain is not None:
    beta = gain(cfg.n_layer)
    stds = {name: s if name == "qkv" else s * beta for name, s in stds.items()}
  return stds


def init_params(cfg: ModelConfig, key: jax.Array) -> dict:
  """GPT-2 (default) or Xavier initialisation; per-layer weights stacked on a leading ``n_layer`` axis.

  The block matrices as ``block_init_stds`` says; the token embedding
  N(0, ``embedding_init_std``), an untied head N(0, ``head_init_std``), the position table
  N(0, 0.02) (OLMo-core draws the embedding and the head apart: ``embedding_init_std`` and
  ``init_std``, olmo_core/nn/transformer/model.py, ``init_weights``). LayerNorm scale 1, bias 0 (also the per-head query and key norms of
  ``qk_norm``, over ``head_dim``); biases 0. ``position="rope"``: no ``wpe``; ``bias=False``:
  no bias leaves (``b_*``, the norms' ``bias``). Works under ``jax.eval_shape`` (nothing is
  allocated there).
  """
  L, D, F, V, T = cfg.n_layer, cfg.d_model, cfg.mlp_dim, cfg.vocab_size, cfg.block_size
  dtype = jnp.dtype(cfg.param_dtype)
  std, s = 0.02, block_init_stds(cfg)
  k = iter(jax.random.split(key, 7))
  normal = lambda shape, s: (s * jax.random.normal(next(k), shape, jnp.float32)).astype(dtype)
  zeros = lambda shape: jnp.zeros(shape, dtype)
  ln = lambda *lead, n=D: {"scale": jnp.ones((*lead, n), dtype),
                           **({"bias": zeros((*lead, n))} if cfg.bias else {})}
  alphas = dyt_alphas(cfg)  # DyT's alpha_0 by position
  norm = lambda name, *lead: norm_params(cfg, *lead, alpha=alphas[name])  # cfg.norm_type's leaves
  f_in = 2 * F if cfg.activation == "swiglu" else F  # gate and up fused in one matrix
  pad = cfg.padded_vocab - V  # zero rows: the real rows equal the unpadded model's
  # Per column of the fused QKV matrix (q, k, v): deepnorm's beta reaches the value part alone.
  qkv_std = jnp.repeat(jnp.asarray([s["qkv"], s["qkv"], s["v"]], jnp.float32), D)
  params = {
      "wte": jnp.pad(normal((V, D), cfg.embedding_init_std), ((0, pad), (0, 0))),
      "wpe": normal((T, D), std),
      "blocks": {
          "ln_1": norm("ln_1", L),
          "attn": {"w_qkv": zero_query(normal((L, D, 3 * D), qkv_std), cfg), "b_qkv": zeros((L, 3 * D)),
                   "w_out": normal((L, D, D), s["attn_out"]), "b_out": zeros((L, D))},
          "ln_2": norm("ln_2", L),
          "mlp": {"w_in": normal((L, D, f_in), s["mlp_in"]), "b_in": zeros((L, f_in)),
                  "w_out": normal((L, F, D), s["mlp_out"]), "b_out": zeros((L, D))},
      },
  }
  if cfg.position != "learned":
    del params["wpe"]  # drawn all the same, so every other leaf keeps its key
  if not cfg.bias:
    for group, name in (("attn", "b_qkv"), ("attn", "b_out"), ("mlp", "b_in"), ("mlp", "b_out")):
      del params["blocks"][group][name]
  if cfg.qk_norm:
    params["blocks"]["attn"].update(q_norm=ln(L, n=cfg.head_dim), k_norm=ln(L, n=cfg.head_dim))
  if placement(cfg.norm).out_norm:
    params["blocks"].update(ln_1_out=norm("ln_1_out", L), ln_2_out=norm("ln_2_out", L))
  if placement(cfg.norm).final_norm:
    params["ln_f"] = norm_params(cfg, norm_type=cfg.final_norm, alpha=alphas["ln_f"])
  if cfg.embedding_norm:
    params["ln_emb"] = norm("ln_emb")
  if not cfg.tie_embeddings:
    params["lm_head"] = jnp.pad(normal((D, V), cfg.head_init_std), ((0, 0), (0, pad)))
  if normaliser(cfg.norm_type).embedding_scale:
    params["emb_scale"] = jnp.asarray(embedding_scale_init(cfg), dtype)
  return params


def embedding_scale_init(cfg: ModelConfig) -> float:
  """DyT's learned scalar on the embedding's output, ``sqrt(d_model)`` at init (Zhu et al. 2025,
  their LLaMA code: ``shared_scale``, github.com/jiachenzhu/DyT, other_tasks/LLaMA): without a
  norm, the blocks would see the embedding at its init scale (0.02), where tanh is linear."""
  return math.sqrt(cfg.d_model)


def zero_query(w_qkv: jax.Array, cfg: ModelConfig) -> jax.Array:
  """The fused QKV matrix with its query columns (the first ``d_model``) zeroed under
  ``zero_query_init`` (the ``mup`` README's query init): as it was otherwise."""
  if not cfg.zero_query_init:
    return w_qkv
  return w_qkv.at[..., :cfg.d_model].set(0)

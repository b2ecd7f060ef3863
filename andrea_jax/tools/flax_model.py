"""``AndreaLM``: the ANDREA transformer written as a Flax Linen module tree.

For users who compose Flax modules. The layers are Flax's own (``nn.Embed``, ``nn.Dense``,
``nn.scan`` over the blocks, ``nn.remat`` for the remat policy); only the primitive
functions are shared with the pure-function model: the LayerNorm math (``norms.layer_norm``),
the activations, and the attention kernels of ``andrea_jax/attention.py``. So the two are
independent implementations of one model, and the tests check that they agree in logits
and gradients. Every config runs: every placement (pre, post, peri, reordered, deepnorm,
mix; LayerNorm scaling) and norm type, tied/untied, all activations and SwiGLU, both inits,
remat policies, ``qk_norm``, muP (its multipliers from ``andrea_jax/mup.py``), rotary
positions (written here again, in the complex-number form, ``rotate``), ``bias=False``
(``use_bias=False`` and norms without a bias) and ``"auto"`` settings (resolved like
``model.forward`` does).

Flax names its parameters its own way (``kernel``/``bias``, ``embedding``);
``to_flax`` and ``from_flax`` convert between that tree and ``init.init_params``'s, both
ways and exactly::

    module = AndreaLM(cfg)
    params = model.init_params(cfg, key)                       # the pure-function tree
    logits = module.apply({"params": to_flax(params)}, tokens)  # == model.forward(params, ...)
    params = from_flax(module.init(key, tokens)["params"])      # Flax's init, our layout

The tree (names in the pure-function layout -> Flax path)::

    wte (V, D)                      -> wte/embedding
    wpe (T, D) (learned positions)  -> wpe/embedding
    blocks/ln_1/{scale,bias} (L, D) -> blocks/ln_1/{scale,bias}  (rmsnorm: scale; dyt: + alpha (L,))
    blocks/attn/w_qkv, b_qkv        -> blocks/attn/qkv/{kernel,bias}
    blocks/attn/w_out, b_out        -> blocks/attn/out/{kernel,bias}
    blocks/attn/{q,k}_norm (L, K)   -> blocks/attn/{q,k}_norm/{scale,bias}  (qk_norm)
    blocks/ln_2/{scale,bias}        -> blocks/ln_2/{scale,bias}
    blocks/mlp/w_in, b_in           -> blocks/mlp/fc/{kernel,bias}
    blocks/mlp/w_out, b_out         -> blocks/mlp/proj/{kernel,bias}
    ln_f/{scale,bias} (pre-norm)    -> ln_f/{scale,bias}  (of final_norm_type)
    ln_emb/{scale,bias} (embedding_norm) -> ln_emb/{scale,bias}
    lm_head (D, V) (untied)         -> lm_head/kernel
    emb_scale () (dyt)              -> emb_scale

``bias=False`` drops every ``b_*`` and every norm's ``bias``; ``position="rope"`` drops ``wpe``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import traverse_util

from andrea_jax import attention as kernels
from andrea_jax import branches
from andrea_jax import errors
from andrea_jax import init
from andrea_jax import model
from andrea_jax import mup
from andrea_jax import norms
from andrea_jax.model_config import ModelConfig, resolve_auto

# Pure-function path -> Flax path, for every parameter that a config may have.
FLAX_PATHS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("wte",): ("wte", "embedding"),
    ("wpe",): ("wpe", "embedding"),
    ("blocks", "attn", "w_qkv"): ("blocks", "attn", "qkv", "kernel"),
    ("blocks", "attn", "b_qkv"): ("blocks", "attn", "qkv", "bias"),
    ("blocks", "attn", "w_out"): ("blocks", "attn", "out", "kernel"),
    ("blocks", "attn", "b_out"): ("blocks", "attn", "out", "bias"),
    ("blocks", "mlp", "w_in"): ("blocks", "mlp", "fc", "kernel"),
    ("blocks", "mlp", "b_in"): ("blocks", "mlp", "fc", "bias"),
    ("blocks", "mlp", "w_out"): ("blocks", "mlp", "proj", "kernel"),
    ("blocks", "mlp", "b_out"): ("blocks", "mlp", "proj", "bias"),
    ("lm_head",): ("lm_head", "kernel"),
}
_MODEL_PATHS = {flax_path: path for path, flax_path in FLAX_PATHS.items()}


def _rename(tree: Mapping[str, Any], names: dict) -> dict:
  flat = traverse_util.flatten_dict(dict(tree))
  return traverse_util.unflatten_dict({names.get(path, path): x for path, x in flat.items()})


def to_flax(params: Mapping[str, Any]) -> dict:
  """``init.init_params``'s tree -> ``AndreaLM``'s ``params`` collection (same arrays)."""
  return _rename(params, FLAX_PATHS)


def from_flax(flax_params: Mapping[str, Any]) -> dict:
  """``AndreaLM``'s ``params`` collection -> the tree ``model.forward`` takes (same arrays)."""
  return _rename(flax_params, _MODEL_PATHS)


# ----------------------------------------------------------------------------- layers


def causal_attention_kernel(q_BTHK, k_BTHK, v_BTHK, cfg: ModelConfig):
  """The kernel of ``andrea_jax/attention.py`` that ``cfg.attention_impl`` names: ``(B, T, H, K)``."""
  impl = resolve_auto(cfg, verbose=False).attention_impl
  return kernels.causal_attention(q_BTHK, k_BTHK, v_BTHK, impl, cfg.attention_block)


def _dense(cfg: ModelConfig, features: int, name: str, std: float = 0.02,
           zero_query: bool = False, v_std: float | None = None, **kwargs) -> nn.Dense:
  init = nn.initializers.normal(std)
  if v_std is not None and v_std != std:  # deepnorm: the fused QKV kernel's value columns
    init = lambda key, shape, dtype, normal=init: normal(key, shape, dtype).at[:, 2 * cfg.d_model:].multiply(v_std / std)
  if zero_query:  # init.zero_query: the fused QKV kernel's query columns start at zero
    init = lambda key, shape, dtype, normal=init: normal(key, shape, dtype).at[:, :cfg.d_model].set(0)
  return nn.Dense(features, dtype=jnp.dtype(cfg.compute_dtype), param_dtype=jnp.dtype(cfg.param_dtype),
                  kernel_init=init, bias_init=nn.initializers.zeros, use_bias=cfg.bias, name=name,
                  **kwargs)


def _padded_normal(real: int, axis: int, std: float):
  """N(0, std) for the first ``real`` entries along ``axis``, zeros for the vocabulary padding."""
  def init(key, shape, dtype):
    keep = jnp.expand_dims(jnp.arange(shape[axis]) < real, 1 - axis)
    return jnp.where(keep, nn.initializers.normal(std)(key, shape, dtype), 0).astype(dtype)
  return init


def _stds(cfg: ModelConfig) -> dict[str, float]:
  """Init std of each block matrix, by its Flax name: ``init.block_init_stds``' values."""
  s = init.block_init_stds(cfg)
  return {"qkv": s["qkv"], "v": s["v"], "out": s["attn_out"], "fc": s["mlp_in"], "proj": s["mlp_out"]}


class LayerNorm(nn.Module):
  """LayerNorm over the last axis with ``scale`` and ``bias`` parameters and the model's math
  (at least float32)."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x_BTD):
    D, dtype = x_BTD.shape[-1], jnp.dtype(self.cfg.param_dtype)
    scale = self.param("scale", nn.initializers.ones, (D,), dtype)
    bias = self.param("bias", nn.initializers.zeros, (D,), dtype) if self.cfg.bias else None
    return norms.layer_norm(x_BTD, scale, bias, self.cfg.ln_eps)


def _rms_norm(x, p, eps):
  return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * p["scale"]


def _dyt(x, p, eps):
  del eps  # DyT has none
  y = jnp.tanh(p["alpha"] * x) * p["scale"]
  return y + p["bias"] if "bias" in p else y


# The norm types' math written out again, independently of norms.NORMALISERS (which this twin
# checks; LayerNorm's is the shared primitive, norms.layer_norm): ``(x, leaves, eps)`` with x
# in at least float32. Which leaves a norm has is the table's (its NormType's bias and alpha).
_NORM_MATH = {
    "layernorm": lambda x, p, eps: norms.layer_norm(x, p["scale"], p.get("bias"), eps),
    "rmsnorm": _rms_norm,
    "dyt": _dyt,
}


class Norm(nn.Module):
  """The norm ``norm_type`` (default ``cfg.norm_type``; written out again, as the check of
  ``norms.normalise``): LayerNorm; RMSNorm ``scale * x / rms(x)``; DyT
  ``scale * tanh(alpha * x) + bias`` with one scalar ``alpha``, ``alpha_init`` at init
  (0: ``dyt_alpha_init``)."""

  cfg: ModelConfig
  norm_type: str = ""
  alpha_init: float = 0.0

  @nn.compact
  def __call__(self, x_BTD):
    cfg = self.cfg
    norm_type = self.norm_type or cfg.norm_type
    entry = norms.normaliser(norm_type)  # an unknown name: the table's error
    if norm_type not in _NORM_MATH:
      raise errors.ConfigError(f"flax_model: model.norm_type={norm_type!r} has no Flax twin")
    D, dtype = x_BTD.shape[-1], jnp.dtype(cfg.param_dtype)
    p = {}
    if entry.alpha:
      alpha0 = self.alpha_init or cfg.dyt_alpha_init
      p["alpha"] = self.param("alpha", nn.initializers.constant(alpha0), (), dtype)
    p["scale"] = self.param("scale", nn.initializers.ones, (D,), dtype)
    if entry.bias and cfg.bias:
      p["bias"] = self.param("bias", nn.initializers.zeros, (D,), dtype)
    x32 = x_BTD.astype(jnp.promote_types(x_BTD.dtype, jnp.float32))
    return _NORM_MATH[norm_type](x32, p, cfg.ln_eps).astype(x_BTD.dtype)


def rotate(x_BTHK, positions_T, base: float):
  """RoPE (Su et al. 2021) in the complex form of its 2D case (section 3.2.1), per pair:
  each pair ``(x_2i, x_2i+1)`` is the complex number ``x_2i + i x_2i+1``, multiplied by
  ``exp(i m theta_i)``, ``theta_i = base^(-2i / K)``: written apart from ``branches.rope``'s
  cos/sin form, as its check."""
  K = x_BTHK.shape[-1]
  real = jnp.promote_types(x_BTHK.dtype, jnp.float32)
  x = x_BTHK.astype(real)
  z_BTHI = jax.lax.complex(x[..., 0::2], x[..., 1::2])
  theta_I = 1.0 / base ** (jnp.arange(K // 2, dtype=real) * 2 / K)
  turn_TI = jnp.exp(1j * (positions_T.astype(real)[:, None] * theta_I))
  z_BTHI = z_BTHI * turn_TI[:, None, :]
  return jnp.stack([z_BTHI.real, z_BTHI.imag], axis=-1).reshape(x_BTHK.shape).astype(x_BTHK.dtype)


class CausalSelfAttention(nn.Module):
  """Fused QKV projection, the causal attention kernel, and the output projection.

  ``qk_norm``: a LayerNorm over each head's queries and keys (one per role, shared by the
  heads); ``position="rope"``: then both rotated at positions ``0 .. T-1`` (``rotate``).
  The kernels scale ``q . k`` by ``1 / sqrt(K)``; the rest of ``mup.attention_scale`` (the
  attention multiplier, muP's width factor) is carried by the queries.
  """

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x_BTD):
    cfg = self.cfg
    B, T, D = x_BTD.shape
    qkv_BT3D = _dense(cfg, 3 * D, "qkv", _stds(cfg)["qkv"], zero_query=cfg.zero_query_init,
                      v_std=_stds(cfg)["v"])(x_BTD)
    q, k, v = (a.reshape(B, T, cfg.n_head, cfg.head_dim) for a in jnp.split(qkv_BT3D, 3, axis=-1))
    if cfg.qk_norm:
      q, k = LayerNorm(cfg, name="q_norm")(q), LayerNorm(cfg, name="k_norm")(k)
    if cfg.position == "rope":
      q, k = (rotate(a, jnp.arange(T), cfg.rope_base) for a in (q, k))
    q = q * jnp.asarray(mup.attention_scale(cfg) * math.sqrt(cfg.head_dim), q.dtype)
    o_BTHK = causal_attention_kernel(q, k, v, cfg)
    return _dense(cfg, D, "out", _stds(cfg)["out"])(o_BTHK.reshape(B, T, D))


class Mlp(nn.Module):
  """``proj(act(fc(x)))``; SwiGLU gates ``silu(gate) * up`` from one fused ``fc``."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x_BTD):
    cfg = self.cfg
    swiglu = cfg.activation == "swiglu"
    h_BTF = _dense(cfg, 2 * cfg.mlp_dim if swiglu else cfg.mlp_dim, "fc", _stds(cfg)["fc"])(x_BTD)
    if swiglu:
      gate, up = jnp.split(h_BTF, 2, axis=-1)
      h_BTF = nn.silu(gate) * up
    else:
      h_BTF = branches.ACTIVATION_FNS[cfg.activation](h_BTF)
    return _dense(cfg, cfg.d_model, "proj", _stds(cfg)["proj"])(h_BTF)


# The residual patterns written out again, independently of norms.PLACEMENTS (which this twin
# checks): the names are the table's, so an unknown placement fails in norms.placement. ``c``
# holds the layer's constants, computed again in Block from the papers' formulas; DeepNet's
# alpha = (2L)^(1/4) (Wang et al. 2022, Figure 2, decoder-only) is its pattern's own.
_PATTERNS = {"pre": lambda x, f, norm, out, c: x + f(norm(x) * c["lns"]),
             "post": lambda x, f, norm, out, c: norm(x + f(x)),
             "peri": lambda x, f, norm, out, c: x + out(f(norm(x))),
             "reordered": lambda x, f, norm, out, c: x + norm(f(x)),
             "deepnorm": lambda x, f, norm, out, c: norm((2.0 * c["L"]) ** 0.25 * x + f(x)),
             # both sublayers computed (the shared modules called twice), one kept
             "mix": lambda x, f, norm, out, c: jnp.where(c["post"], norm(x + f(x)), x + f(norm(x)))}


def _sublayer(x, branch: Callable, norm: nn.Module, placement: str, multiplier: float,
              out: nn.Module | None, consts: dict):
  """Pre-norm ``x + F(LN(x))``; post-norm ``LN(x + F(x))``; ... (``_PATTERNS``); ``F`` times a
  depth rule's ``multiplier`` (``mup.branch_multiplier``); ``out`` the branch-output norm (peri);
  ``consts`` the layer's (``_layer_constants``)."""
  norms.placement(placement)  # an unknown name: the table's error
  if placement not in _PATTERNS:
    raise errors.ConfigError(f"flax_model: model.norm={placement!r} has no Flax twin yet")
  f = branch if multiplier == 1.0 else (lambda h: multiplier * branch(h))
  return _PATTERNS[placement](x, f, norm, out, consts)


def _layer_constants(cfg: ModelConfig, layer) -> dict:
  """The depth ``L``; Mix-LN's post-LN flag, layer < floor(fraction * L + 1/2); LayerNorm
  scaling's 1 / sqrt(layer + 1)."""
  L = cfg.n_layer
  return {"L": L, "post": layer < math.floor(cfg.mix_post_fraction * L + 0.5),
          "lns": 1.0 / jnp.sqrt(layer + 1.0) if cfg.norm_depth_scaling else 1.0}


class Block(nn.Module):
  """One transformer block; ``(x, layer index) -> (x, None)`` so that ``nn.scan`` can stack it."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, x_BTD, layer):
    cfg = self.cfg
    m = mup.branch_multiplier(cfg)
    out_norm = norms.placement(cfg.norm).out_norm  # peri's ln_1_out, ln_2_out
    c = _layer_constants(cfg, layer)
    a = cfg.dyt_alpha_attn_init  # Zhu et al.'s attn_alpha_init_value (0: dyt_alpha_init)
    x_BTD = _sublayer(x_BTD, CausalSelfAttention(cfg, name="attn"), Norm(cfg, alpha_init=a, name="ln_1"),
                      cfg.norm, m, Norm(cfg, alpha_init=a, name="ln_1_out") if out_norm else None, c)
    x_BTD = _sublayer(x_BTD, Mlp(cfg, name="mlp"), Norm(cfg, name="ln_2"), cfg.norm, m,
                      Norm(cfg, name="ln_2_out") if out_norm else None, c)
    return x_BTD, None


class AndreaLM(nn.Module):
  """The ANDREA language model; ``__call__(tokens (B, T)) -> logits (B, T, padded V)`` in float32."""

  cfg: ModelConfig

  @nn.compact
  def __call__(self, tokens_BT):
    cfg = resolve_auto(self.cfg, verbose=False)  # "auto" dtype and kernel for this platform
    model.check_tokens(tokens_BT, cfg)
    T, dtype = tokens_BT.shape[1], jnp.dtype(cfg.compute_dtype)
    embed = lambda n, init, name: nn.Embed(n, cfg.d_model, embedding_init=init, dtype=dtype,
                                           param_dtype=jnp.dtype(cfg.param_dtype), name=name)
    wte = embed(cfg.padded_vocab, _padded_normal(cfg.vocab_size, 0, cfg.embedding_init_std), "wte")
    x_BTD = wte(tokens_BT)
    if cfg.position == "learned":  # rope: the positions rotate q and k in the attention
      x_BTD = x_BTD + embed(cfg.block_size, nn.initializers.normal(0.02), "wpe")(jnp.arange(T))
    x_BTD = x_BTD * jnp.asarray(mup.embedding_multiplier(cfg), x_BTD.dtype)
    if norms.normaliser(cfg.norm_type).embedding_scale:  # Zhu et al.'s, sqrt(D) at init
      scale = self.param("emb_scale", nn.initializers.constant(math.sqrt(cfg.d_model)), (),
                         jnp.dtype(cfg.param_dtype))
      x_BTD = x_BTD * scale.astype(x_BTD.dtype)
    if cfg.embedding_norm:  # OLMo-core's embedding_norm: after the embedding scale
      x_BTD = Norm(cfg, name="ln_emb")(x_BTD)
    # Every layer its own parameters, stacked on a leading n_layer axis like init_params.
    blocks = nn.scan(model.remat(Block, cfg.remat_policy, nn.remat), variable_axes={"params": 0},
                     split_rngs={"params": True}, length=cfg.n_layer, unroll=cfg.scan_unroll)
    x_BTD, _ = blocks(cfg, name="blocks")(x_BTD, jnp.arange(cfg.n_layer))  # and each layer's index
    if norms.placement(cfg.norm).final_norm:
      x_BTD = Norm(cfg, cfg.final_norm_type, cfg.dyt_alpha_final_init, name="ln_f")(x_BTD)
    x_BTD = x_BTD * jnp.asarray(mup.readout_multiplier(cfg), x_BTD.dtype)  # the readout multiplier
    if cfg.tie_embeddings:
      logits_BTV = wte.attend(x_BTD)
    else:
      logits_BTV = nn.Dense(cfg.padded_vocab, use_bias=False, dtype=dtype,
                            param_dtype=jnp.dtype(cfg.param_dtype),
                            kernel_init=_padded_normal(cfg.vocab_size, 1, cfg.head_init_std),
                            name="lm_head")(x_BTD)
    logits_BTV = logits_BTV.astype(jnp.promote_types(logits_BTV.dtype, jnp.float32))
    # Ids from vocab_size on only pad the matrices to a friendly size: never predicted.
    return jnp.where(jnp.arange(cfg.padded_vocab) < cfg.vocab_size, logits_BTV, -jnp.inf)

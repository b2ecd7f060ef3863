"""The block's two branches as functions of their input and parameters: attention and the MLP.

``attention``: causal multi-head self-attention. ``qkv_project`` splits the fused QKV
projection into heads, passes the queries and keys through each head's LayerNorm
(``qk_norm``) and the rotary positions (``rope``, ``position="rope"``) and gives the queries
muP's scale; the kernel is ``attention.py``'s that ``cfg.attention_impl`` names;
``out_project`` merges the heads. ``mlp``: ``W_2 act(W_1 x + b_1) + b_2`` with an activation
of ``ACTIVATION_FNS`` (SwiGLU: a gated pair from one fused matrix). Every projection is
``_dense``'s, on the rows, in the compute dtype. ``model.block_forward`` wraps each branch in
the residual pattern of ``norms.py``; the KV-cache sampler and the lens call the pieces.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp

from andrea_jax import attention as kernels
from andrea_jax import mup
from andrea_jax.model_config import ModelConfig, Params, compute_dtype, resolve_auto
from andrea_jax.norms import layer_norm
from andrea_jax.precision import at_least_f32


def gelu_tanh(x: jax.Array) -> jax.Array:
  """GPT-2's GELU: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
  return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu(x: jax.Array) -> jax.Array:
  """Exact GELU: ``x * Phi(x)`` with the normal CDF written through erf."""
  return 0.5 * x * (1.0 + jax.lax.erf(x / math.sqrt(2.0)))


def relu(x: jax.Array) -> jax.Array:
  return jnp.maximum(x, 0)


def relu2(x: jax.Array) -> jax.Array:
  """Squared ReLU, ``max(x, 0)^2`` (So et al. 2021, "Primer", section 4)."""
  return jnp.square(jnp.maximum(x, 0))


ACTIVATION_FNS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu_tanh": gelu_tanh, "gelu": gelu, "relu": relu, "relu2": relu2}


def _dense(x, w, b, dtype):
  """``x @ w + b`` on the rows ``(N, i)``, so the bias gradient reduces no unit axis (see
  ``layer_norm``); ``b=None``: no bias (``ModelConfig.bias=False``)."""
  y = x.reshape(-1, x.shape[-1]).astype(dtype) @ w.astype(dtype)
  y = y if b is None else y + b.astype(dtype)
  return y.reshape(*x.shape[:-1], w.shape[-1])


def _bias(p: Params, name: str, cfg: ModelConfig) -> jax.Array | None:
  """The bias leaf ``name`` of a linear layer, or None under ``bias=False`` (it has none)."""
  return p[name] if cfg.bias else None


def rope(x_BTHK: jax.Array, positions_T: jax.Array, base: float = 10000.0) -> jax.Array:
  """Rotary position embedding (Su et al. 2021, RoFormer, section 3.4.2, eq. 34).

  Each pair ``(x_2i, x_2i+1)`` of a head's ``K`` dimensions, at position ``m``, is rotated by
  the angle ``m * theta_i``, ``theta_i = base^(-2i / K)``, ``i = 0 .. K/2 - 1``: the paper's
  block-diagonal ``R_{Theta,m}`` in its cos/sin form. Then ``R_m q . R_n k = q . R_{n-m} k``:
  the attention score depends on the offset ``n - m`` only. The angles and the rotation run
  in at least float32 (positions up to 2^24 are exact), the result in ``x``'s dtype.
  """
  K = x_BTHK.shape[-1]
  x = at_least_f32(x_BTHK)
  theta_I = base ** (-jnp.arange(0, K, 2, dtype=x.dtype) / K)  # (K/2,)
  angle_TI = jnp.asarray(positions_T, x.dtype)[:, None] * theta_I
  cos_T1I, sin_T1I = jnp.cos(angle_TI)[:, None], jnp.sin(angle_TI)[:, None]  # broadcast over H
  x_BTHI2 = x.reshape(*x.shape[:-1], K // 2, 2)
  even, odd = x_BTHI2[..., 0], x_BTHI2[..., 1]
  rotated = jnp.stack([even * cos_T1I - odd * sin_T1I, even * sin_T1I + odd * cos_T1I], axis=-1)
  return rotated.reshape(x_BTHK.shape).astype(x_BTHK.dtype)


def qkv_project(x_BTD: jax.Array, attn: Params, cfg: ModelConfig,
                positions_T: jax.Array | None = None):
  """The fused QKV projection, split into heads: three ``(B, T, H, K)`` arrays.

  With ``qk_norm`` the queries and keys pass each head's LayerNorm (over ``K``; Dehghani et
  al. 2023). With ``position="rope"`` they are then rotated (``rope``) at ``positions_T``,
  their absolute positions (default ``0 .. T-1``; the KV-cache sampler passes
  ``pos .. pos+T-1``), so every kernel and every reader of ``q . k`` gets rotated ones.
  The kernels divide by ``sqrt(K)``; the queries carry whatever else
  ``mup.attention_scale`` asks for (the attention multiplier; muP's width factor).
  """
  B, T, _ = x_BTD.shape
  qkv = _dense(x_BTD, attn["w_qkv"], _bias(attn, "b_qkv", cfg), compute_dtype(cfg))
  q, k, v = (a.reshape(B, T, cfg.n_head, cfg.head_dim) for a in jnp.split(qkv, 3, axis=-1))
  if cfg.qk_norm:
    q = layer_norm(q, attn["q_norm"]["scale"], attn["q_norm"].get("bias"), cfg.ln_eps)
    k = layer_norm(k, attn["k_norm"]["scale"], attn["k_norm"].get("bias"), cfg.ln_eps)
  if cfg.position == "rope":
    # Rotated after the qk norm, as OLMo 2 (q_norm/k_norm, then apply_rotary_pos_emb), Gemma 3
    # and Qwen 3 do: the norm sees the unrotated head, and the rotation keeps its length.
    positions_T = jnp.arange(T) if positions_T is None else positions_T
    q, k = rope(q, positions_T, cfg.rope_base), rope(k, positions_T, cfg.rope_base)
  q_scale = mup.attention_scale(cfg) * math.sqrt(cfg.head_dim)
  return (q if math.isclose(q_scale, 1.0) else q * jnp.asarray(q_scale, q.dtype)), k, v


def out_project(o_BTHK: jax.Array, attn: Params, cfg: ModelConfig) -> jax.Array:
  """Merge the heads and apply the attention output projection: ``(B, T, H, K) -> (B, T, D)``."""
  B, T, H, K = o_BTHK.shape
  return _dense(o_BTHK.reshape(B, T, H * K), attn["w_out"], _bias(attn, "b_out", cfg),
                compute_dtype(cfg))


def attention(x_BTD: jax.Array, attn: Params, cfg: ModelConfig, logit_max: bool = False,
              dropout_key: jax.Array | None = None):
  """Causal multi-head self-attention with fused QKV and output projections (biases: ``cfg.bias``).

  The kernel (``andrea_jax/attention.py``) is ``cfg.attention_impl``'s; with a
  ``dropout_key`` it drops attention probabilities at rate ``cfg.dropout``.
  ``logit_max=True`` returns ``(out, the largest attention logit)``: a float32 scalar
  without gradient, the quantity that grows before attention-logit instability (Wortsman
  et al. 2023).
  """
  q, k, v = qkv_project(x_BTD, attn, cfg)  # 3 x (B, T, H, K)
  impl = resolve_auto(cfg, verbose=False).attention_impl
  o_BTHK = kernels.causal_attention(q, k, v, impl, cfg.attention_block, cfg.dropout, dropout_key)
  out = out_project(o_BTHK, attn, cfg)
  if not logit_max:
    return out
  return out, jax.lax.stop_gradient(kernels.causal_logit_max(q, k, cfg.attention_block))


def mlp(x_BTD: jax.Array, mlp_params: Params, cfg: ModelConfig) -> jax.Array:
  """``W_2 act(W_1 x + b_1) + b_2``; SwiGLU gates ``silu(gate) * up`` from a fused W_1."""
  dtype = compute_dtype(cfg)
  h_BTF = _dense(x_BTD, mlp_params["w_in"], _bias(mlp_params, "b_in", cfg), dtype)
  if cfg.activation == "swiglu":
    gate, up = jnp.split(h_BTF, 2, axis=-1)
    h_BTF = jax.nn.silu(gate) * up
  else:
    h_BTF = ACTIVATION_FNS[cfg.activation](h_BTF)
  return _dense(h_BTF, mlp_params["w_out"], _bias(mlp_params, "b_out", cfg), dtype)

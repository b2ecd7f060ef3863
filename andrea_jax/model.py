"""The ANDREA transformer as pure functions over an explicit parameter pytree.

Read top to bottom: config, initialisation, the pieces (LayerNorm, activations,
attention, MLP), the seed's residual pattern, one block, the whole model, the loss,
and the exact parameter count.

    x = wte[ids] + wpe[positions]                       # (B, T, D)
    for each block (lax.scan over params stacked on a leading n_layer axis):
        x = x + Attention(LN(x))                        # pre-norm (default)
        x = x + MLP(LN(x))
    x = LN(x)                                           # final norm (pre-norm only)
    logits = x @ wte.T                                  # tied unembedding, (B, T, V)

Names carry their layout as a suffix (nanodo style): B batch, T time, D d_model,
H heads, K head size, F MLP width, V vocabulary, L layers.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

Params = Mapping[str, Any]

NORMS = ("pre", "post")
INITS = ("gpt2", "xavier")
ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "swiglu")
DTYPES = ("float32", "bfloat16", "float16", "float64")
REMAT_POLICIES = ("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable")
ATTENTION_IMPLS = ("xla", "xla_flash", "cudnn", "auto")


# ----------------------------------------------------------------------------- config


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The model's shape and variant; frozen and hashable so jit can take it as static."""

  vocab_size: int
  block_size: int
  d_model: int
  n_layer: int
  n_head: int
  mlp_ratio: float = 4.0
  norm: str = "pre"
  activation: str = "gelu_tanh"
  tie_embeddings: bool = True
  ln_eps: float = 1e-5
  param_dtype: str = "float32"
  compute_dtype: str = "float32"
  remat_policy: str = "none"
  scan_unroll: int = 1
  attention_impl: str = "xla"
  attention_block: int = 128
  init: str = "gpt2"

  def __post_init__(self):
    for name in ("vocab_size", "block_size", "d_model", "n_layer", "n_head", "scan_unroll",
                 "attention_block"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"ModelConfig.{name}={value!r}: expected a positive integer")
    if self.d_model % self.n_head:
      raise ValueError(f"ModelConfig.d_model={self.d_model} is not divisible by n_head={self.n_head}: "
                       f"choose n_head among the divisors of d_model")
    if not isinstance(self.mlp_ratio, (int, float)) or not self.mlp_ratio > 0 or self.mlp_dim < 1:
      raise ValueError(f"ModelConfig.mlp_ratio={self.mlp_ratio!r}: expected a positive number "
                       f"with round(mlp_ratio * d_model) >= 1")
    if not (isinstance(self.ln_eps, (int, float)) and self.ln_eps > 0):
      raise ValueError(f"ModelConfig.ln_eps={self.ln_eps!r}: expected a positive number like 1e-5")
    for name, allowed in (("norm", NORMS), ("activation", ACTIVATIONS), ("param_dtype", DTYPES),
                          ("compute_dtype", DTYPES), ("remat_policy", REMAT_POLICIES),
                          ("attention_impl", ATTENTION_IMPLS), ("init", INITS)):
      if getattr(self, name) not in allowed:
        raise ValueError(f"ModelConfig.{name}={getattr(self, name)!r}: expected one of {allowed}")
    if not isinstance(self.tie_embeddings, bool):
      raise ValueError(f"ModelConfig.tie_embeddings={self.tie_embeddings!r}: expected True or False")

  @property
  def head_dim(self) -> int:
    return self.d_model // self.n_head

  @property
  def mlp_dim(self) -> int:
    return int(round(self.mlp_ratio * self.d_model))


# ----------------------------------------------------------------------------- init


def init_params(cfg: ModelConfig, key: jax.Array) -> dict:
  """GPT-2 (default) or Xavier initialisation; per-layer weights stacked on a leading ``n_layer`` axis.

  ``init="gpt2"``: weights ~ N(0, 0.02); the two projections that write into the residual
  stream (attention output, MLP output) are scaled by 1/sqrt(2 n_layer) so the stream's
  variance does not grow with depth. ``init="xavier"``: the block weight matrices are
  Glorot normal, N(0, 2 / (fan_in + fan_out)), with no depth scaling, the initialisation
  Xiong et al. 2020 analyse (the fused QKV and SwiGLU matrices count as separate
  D x D and D x F matrices); the embeddings stay N(0, 0.02). Both: LayerNorm scale 1,
  bias 0; biases 0. Works under ``jax.eval_shape`` (nothing is allocated there).
  """
  L, D, F, V, T = cfg.n_layer, cfg.d_model, cfg.mlp_dim, cfg.vocab_size, cfg.block_size
  dtype = jnp.dtype(cfg.param_dtype)
  std, resid_std = 0.02, 0.02 / math.sqrt(2 * L)
  glorot = lambda fan_in, fan_out: math.sqrt(2.0 / (fan_in + fan_out))
  xavier = cfg.init == "xavier"
  s_qkv, s_attn_out = (glorot(D, D),) * 2 if xavier else (std, resid_std)
  s_in, s_mlp_out = (glorot(D, F), glorot(F, D)) if xavier else (std, resid_std)
  k = iter(jax.random.split(key, 7))
  normal = lambda shape, s: (s * jax.random.normal(next(k), shape, jnp.float32)).astype(dtype)
  zeros = lambda shape: jnp.zeros(shape, dtype)
  ln = lambda *lead: {"scale": jnp.ones((*lead, D), dtype), "bias": zeros((*lead, D))}
  f_in = 2 * F if cfg.activation == "swiglu" else F  # gate and up fused in one matrix
  params = {
      "wte": normal((V, D), std),
      "wpe": normal((T, D), std),
      "blocks": {
          "ln_1": ln(L),
          "attn": {"w_qkv": normal((L, D, 3 * D), s_qkv), "b_qkv": zeros((L, 3 * D)),
                   "w_out": normal((L, D, D), s_attn_out), "b_out": zeros((L, D))},
          "ln_2": ln(L),
          "mlp": {"w_in": normal((L, D, f_in), s_in), "b_in": zeros((L, f_in)),
                  "w_out": normal((L, F, D), s_mlp_out), "b_out": zeros((L, D))},
      },
  }
  if cfg.norm == "pre":
    params["ln_f"] = ln()
  if not cfg.tie_embeddings:
    params["lm_head"] = normal((D, V), std)
  return params


# ----------------------------------------------------------------------------- pieces


def _at_least_f32(x: jax.Array) -> jax.Array:
  # Norms and softmax run in float32 even when activations are bfloat16 (float64 stays).
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float = 1e-5) -> jax.Array:
  """``scale * (x - mean) / sqrt(var + eps) + bias`` over the last axis, in at least float32."""
  x32 = _at_least_f32(x)
  mean = jnp.mean(x32, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
  y = (x32 - mean) * jax.lax.rsqrt(var + eps)
  return (y * _at_least_f32(scale) + _at_least_f32(bias)).astype(x.dtype)


def gelu_tanh(x: jax.Array) -> jax.Array:
  """GPT-2's GELU: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
  return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu(x: jax.Array) -> jax.Array:
  """Exact GELU: ``x * Phi(x)`` with the normal CDF written through erf."""
  return 0.5 * x * (1.0 + jax.lax.erf(x / math.sqrt(2.0)))


def relu(x: jax.Array) -> jax.Array:
  return jnp.maximum(x, 0)


ACTIVATION_FNS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu_tanh": gelu_tanh, "gelu": gelu, "relu": relu}


def _dense(x, w, b, dtype):
  return jnp.einsum("...i,io->...o", x.astype(dtype), w.astype(dtype)) + b.astype(dtype)


def causal_attend(q_BTHK: jax.Array, k_BSHK: jax.Array, v_BSHK: jax.Array,
                  mask_BTS: jax.Array) -> jax.Array:
  """Softmax attention of queries over keys where ``mask`` is True; softmax in float32."""
  scale = 1.0 / math.sqrt(q_BTHK.shape[-1])
  s_BHTS = _at_least_f32(jnp.einsum("bthk,bshk->bhts", q_BTHK, k_BSHK)) * scale
  s_BHTS = jnp.where(mask_BTS[:, None], s_BHTS, jnp.finfo(s_BHTS.dtype).min)
  p_BHTS = jax.nn.softmax(s_BHTS, axis=-1).astype(v_BSHK.dtype)
  return jnp.einsum("bhts,bshk->bthk", p_BHTS, v_BSHK)


def _attend_block(q_BHCK, k_BHSK, v_BHSK, start: int):
  """Queries ``start .. start+C`` attend to keys ``0 .. S``, causally; softmax in float32."""
  C, S = q_BHCK.shape[2], k_BHSK.shape[2]
  s_BHCS = _at_least_f32(jnp.einsum("bhck,bhsk->bhcs", q_BHCK, k_BHSK))
  visible_CS = start + jnp.arange(C)[:, None] >= jnp.arange(S)[None, :]
  s_BHCS = jnp.where(visible_CS, s_BHCS, jnp.finfo(s_BHCS.dtype).min)
  p_BHCS = jax.nn.softmax(s_BHCS, axis=-1).astype(v_BHSK.dtype)
  return jnp.einsum("bhcs,bhsk->bhck", p_BHCS, v_BHSK)


def blocked_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array,
                             block: int) -> jax.Array:
  """Exact causal attention computed ``block`` queries at a time (the XLA path).

  Query block i only multiplies keys 0 .. (i+1) * block, so the masked upper triangle is
  (mostly) never computed, and each block's scores stay small enough for the CPU's
  caches; each block is rematerialised in the backward pass rather than storing its
  probabilities. Heads move next to batch first: XLA's batched dots want ``(B, H, T, K)``.
  """
  T, K = q_BTHK.shape[1], q_BTHK.shape[-1]
  q, k, v = (jnp.swapaxes(a, 1, 2) for a in (q_BTHK * (1.0 / math.sqrt(K)), k_BTHK, v_BTHK))
  attend = jax.checkpoint(_attend_block, static_argnums=(3,))
  outs = [attend(q[:, :, a:a + block], k[:, :, :a + block], v[:, :, :a + block], a)
          for a in range(0, T, block)]
  return jnp.swapaxes(jnp.concatenate(outs, axis=2), 1, 2)


def _block_scores(q_BHCK, k_BHSK, start: int):
  C, S = q_BHCK.shape[2], k_BHSK.shape[2]
  s_BHCS = _at_least_f32(jnp.einsum("bhck,bhsk->bhcs", q_BHCK, k_BHSK))
  visible_CS = start + jnp.arange(C)[:, None] >= jnp.arange(S)[None, :]
  return jnp.where(visible_CS, s_BHCS, -jnp.inf)  # every query sees key 0: rows stay finite


def _flash_block_fwd(q, k, v, start):
  s = _block_scores(q, k, start)
  m = jnp.max(s, axis=-1, keepdims=True)
  e = jnp.exp(s - m)
  denom = jnp.sum(e, axis=-1, keepdims=True)
  o = (jnp.einsum("bhcs,bhsk->bhck", e.astype(v.dtype), v) / denom).astype(v.dtype)
  return o, (q, k, v, o, m + jnp.log(denom))


def _flash_block_bwd(start, residuals, do):
  # FlashAttention's backward: recompute P from the saved log-sum-exp, no softmax autodiff.
  q, k, v, o, lse = residuals
  p = jnp.exp(_block_scores(q, k, start) - lse)
  dv = jnp.einsum("bhcs,bhck->bhsk", p.astype(do.dtype), do)
  dp = _at_least_f32(jnp.einsum("bhck,bhsk->bhcs", do, v))
  ds = (p * (dp - jnp.sum(_at_least_f32(do * o), axis=-1, keepdims=True))).astype(q.dtype)
  return (jnp.einsum("bhcs,bhsk->bhck", ds, k), jnp.einsum("bhcs,bhck->bhsk", ds, q), dv)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _flash_block(q, k, v, start):
  return _flash_block_fwd(q, k, v, start)[0]


_flash_block.defvjp(_flash_block_fwd, _flash_block_bwd)


def flash_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array,
                           block: int) -> jax.Array:
  """``blocked_causal_attention`` with FlashAttention's hand-written backward pass.

  Stores only each row's log-sum-exp and recomputes the probabilities in the backward
  pass (about 25 % faster than autodiff of the rematerialised softmax on a CPU). A
  ``custom_vjp``: reverse mode (``grad``) only, so ``jax.jvp`` needs ``attention_impl="xla"``.
  """
  T, K = q_BTHK.shape[1], q_BTHK.shape[-1]
  q, k, v = (jnp.swapaxes(a, 1, 2) for a in (q_BTHK * (1.0 / math.sqrt(K)), k_BTHK, v_BTHK))
  outs = [_flash_block(q[:, :, a:a + block], k[:, :, :a + block], v[:, :, :a + block], a)
          for a in range(0, T, block)]
  return jnp.swapaxes(jnp.concatenate(outs, axis=2), 1, 2)


def qkv_project(x_BTD: jax.Array, attn: Params, cfg: ModelConfig):
  """The fused QKV projection, split into heads: three ``(B, T, H, K)`` arrays."""
  B, T, _ = x_BTD.shape
  qkv = _dense(x_BTD, attn["w_qkv"], attn["b_qkv"], jnp.dtype(cfg.compute_dtype))
  q, k, v = jnp.split(qkv, 3, axis=-1)
  return tuple(a.reshape(B, T, cfg.n_head, cfg.head_dim) for a in (q, k, v))


def out_project(o_BTHK: jax.Array, attn: Params, cfg: ModelConfig) -> jax.Array:
  """Merge the heads and apply the attention output projection: ``(B, T, H, K) -> (B, T, D)``."""
  B, T, H, K = o_BTHK.shape
  return _dense(o_BTHK.reshape(B, T, H * K), attn["w_out"], attn["b_out"], jnp.dtype(cfg.compute_dtype))


def attention(x_BTD: jax.Array, attn: Params, cfg: ModelConfig) -> jax.Array:
  """Causal multi-head self-attention with fused QKV and output projections (with biases)."""
  B, T, D = x_BTD.shape
  q, k, v = qkv_project(x_BTD, attn, cfg)
  if cfg.attention_impl == "xla":
    o_BTHK = blocked_causal_attention(q, k, v, cfg.attention_block)
  elif cfg.attention_impl == "xla_flash":
    o_BTHK = flash_causal_attention(q, k, v, cfg.attention_block)
  else:  # "cudnn" (flash attention on NVIDIA GPUs) or "auto" (JAX picks)
    impl = None if cfg.attention_impl == "auto" else cfg.attention_impl
    o_BTHK = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
  return out_project(o_BTHK, attn, cfg)


def mlp(x_BTD: jax.Array, mlp_params: Params, cfg: ModelConfig) -> jax.Array:
  """``W_2 act(W_1 x + b_1) + b_2``; SwiGLU gates ``silu(gate) * up`` from a fused W_1."""
  dtype = jnp.dtype(cfg.compute_dtype)
  h_BTF = _dense(x_BTD, mlp_params["w_in"], mlp_params["b_in"], dtype)
  if cfg.activation == "swiglu":
    gate, up = jnp.split(h_BTF, 2, axis=-1)
    h_BTF = jax.nn.silu(gate) * up
  else:
    h_BTF = ACTIVATION_FNS[cfg.activation](h_BTF)
  return _dense(h_BTF, mlp_params["w_out"], mlp_params["b_out"], dtype)


# ----------------------------------------------------------------------------- the residual pattern


def residual_sublayer(x: jax.Array, branch_fn: Callable[[jax.Array], jax.Array],
                      ln_params: Params, norm: str = "pre", eps: float = 1e-5) -> jax.Array:
  """The seed's residual pattern: pre-norm ``x + F(LN(x))``; post-norm ``LN(x + F(x))``."""
  if norm == "pre":
    return x + branch_fn(layer_norm(x, ln_params["scale"], ln_params["bias"], eps))
  if norm == "post":
    return layer_norm(x + branch_fn(x), ln_params["scale"], ln_params["bias"], eps)
  raise ValueError(f"norm={norm!r}: expected one of {NORMS}")


def block_forward(block: Params, x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
  """One transformer block: attention, then MLP, each wrapped in ``residual_sublayer``."""
  x_BTD = residual_sublayer(x_BTD, lambda h: attention(h, block["attn"], cfg),
                            block["ln_1"], cfg.norm, cfg.ln_eps)
  x_BTD = residual_sublayer(x_BTD, lambda h: mlp(h, block["mlp"], cfg),
                            block["ln_2"], cfg.norm, cfg.ln_eps)
  return x_BTD


# ----------------------------------------------------------------------------- the model


def check_tokens(tokens: Any, cfg: ModelConfig) -> None:
  """Reject bad inputs before XLA (which silently clamps an out-of-range gather index).

  The shape check is static and always runs; the id range check runs when the values
  are concrete (eager calls, the data pipeline) and is skipped under tracing.
  """
  shape = np.shape(tokens)
  if len(shape) != 2:
    raise ValueError(f"tokens have shape {shape}: expected (batch, time)")
  if shape[1] > cfg.block_size:
    raise ValueError(f"sequence length {shape[1]} exceeds the context block_size={cfg.block_size}: "
                     f"crop the input to its last {cfg.block_size} tokens or use a longer-context config")
  if isinstance(tokens, jax.core.Tracer):
    return
  ids = np.asarray(tokens)
  if not np.issubdtype(ids.dtype, np.integer):
    raise ValueError(f"tokens have dtype {ids.dtype}: expected integer token ids")
  if ids.size and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
    bad = ids.min() if ids.min() < 0 else ids.max()
    raise ValueError(f"token id {int(bad)} is outside [0, {cfg.vocab_size}) for vocab_size="
                     f"{cfg.vocab_size}: encode with the tokenizer this model was trained with")


def _remat(fn, policy: str):
  if policy == "none":
    return fn
  if policy == "full":
    return jax.checkpoint(fn)
  return jax.checkpoint(fn, policy=getattr(jax.checkpoint_policies, policy))


def embed(params: Params, tokens_BT: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Token plus learned position embeddings, in the compute dtype: ``(B, T, D)``."""
  T = tokens_BT.shape[1]
  x_BTD = jnp.take(params["wte"], tokens_BT, axis=0) + params["wpe"][:T]
  return x_BTD.astype(jnp.dtype(cfg.compute_dtype))


def unembed(params: Params, x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Final LayerNorm (pre-norm model only), then the tied (or untied) head: float32 logits."""
  if cfg.norm == "pre":
    x_BTD = layer_norm(x_BTD, params["ln_f"]["scale"], params["ln_f"]["bias"], cfg.ln_eps)
  dtype = jnp.dtype(cfg.compute_dtype)
  if cfg.tie_embeddings:
    logits = jnp.einsum("btd,vd->btv", x_BTD.astype(dtype), params["wte"].astype(dtype))
  else:
    logits = jnp.einsum("btd,dv->btv", x_BTD.astype(dtype), params["lm_head"].astype(dtype))
  return _at_least_f32(logits)


def forward(params: Params, tokens_BT: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Logits ``(B, T, V)`` for token ids ``(B, T)``; ``lax.scan`` walks the stacked blocks."""
  check_tokens(tokens_BT, cfg)
  x_BTD = embed(params, tokens_BT, cfg)
  step = _remat(lambda x, block: (block_forward(block, x, cfg), None), cfg.remat_policy)
  x_BTD, _ = jax.lax.scan(step, x_BTD, params["blocks"], unroll=cfg.scan_unroll)
  return unembed(params, x_BTD, cfg)


def loss_fn(params: Params, tokens_BT: jax.Array, targets_BT: jax.Array, cfg: ModelConfig,
            mask_BT: jax.Array | None = None) -> jax.Array:
  """Mean next-token cross-entropy in nats (optionally over the positions where mask is 1)."""
  logits_BTV = forward(params, tokens_BT, cfg)
  nll_BT = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, targets_BT)
  if mask_BT is None:
    return jnp.mean(nll_BT)
  mask_BT = mask_BT.astype(nll_BT.dtype)
  return jnp.sum(nll_BT * mask_BT) / jnp.maximum(jnp.sum(mask_BT), 1.0)


# ----------------------------------------------------------------------------- counting


def count_params(cfg: ModelConfig) -> int:
  """The exact number of parameters, from the config alone (equals the leaves of init_params)."""
  D, F, L = cfg.d_model, cfg.mlp_dim, cfg.n_layer
  f_in = 2 * F if cfg.activation == "swiglu" else F
  attn = D * 3 * D + 3 * D + D * D + D
  mlp_ = D * f_in + f_in + F * D + D
  block = attn + mlp_ + 2 * (2 * D)
  total = L * block + cfg.vocab_size * D + cfg.block_size * D
  total += 2 * D if cfg.norm == "pre" else 0
  total += 0 if cfg.tie_embeddings else D * cfg.vocab_size
  return total


def count_layer_norms(cfg: ModelConfig) -> int:
  """Two per block, plus the final one in the pre-norm model."""
  return 2 * cfg.n_layer + (1 if cfg.norm == "pre" else 0)


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None) -> float:
  """Training FLOPs per token, ``6 N + 12 L H Q T`` (PaLM, appendix B); N excludes positions."""
  T = cfg.block_size if seq_len is None else seq_len
  n = count_params(cfg) - cfg.block_size * cfg.d_model
  return 6.0 * n + 12.0 * cfg.n_layer * cfg.n_head * cfg.head_dim * T

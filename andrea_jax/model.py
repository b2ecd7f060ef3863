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
import math
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from andrea_jax import attention as kernels
from andrea_jax import cross_entropy
from andrea_jax import errors
from andrea_jax.precision import at_least_f32

Params = Mapping[str, Any]

NORMS = ("pre", "post")
INITS = ("gpt2", "xavier")
ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "swiglu")
DTYPES = ("float32", "bfloat16", "float16", "float64")
AUTO = "auto"  # compute_dtype / attention_impl chosen from the platform (resolve_auto)
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
  attention_impl: str = "auto"
  attention_block: int = 128
  init: str = "gpt2"
  vocab_pad_multiple: int = 1
  loss_chunk: int = 0

  def __post_init__(self):
    for name in ("vocab_size", "block_size", "d_model", "n_layer", "n_head", "scan_unroll",
                 "attention_block", "vocab_pad_multiple"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise errors.ConfigError(f"ModelConfig.{name}={value!r}: expected a positive integer")
    if self.d_model % self.n_head:
      raise errors.ConfigError(f"ModelConfig.d_model={self.d_model} is not divisible by "
                               f"n_head={self.n_head}: choose n_head among the divisors of d_model")
    if not isinstance(self.mlp_ratio, (int, float)) or not self.mlp_ratio > 0 or self.mlp_dim < 1:
      raise errors.ConfigError(f"ModelConfig.mlp_ratio={self.mlp_ratio!r}: expected a positive "
                               f"number with round(mlp_ratio * d_model) >= 1")
    if not (isinstance(self.ln_eps, (int, float)) and self.ln_eps > 0):
      raise errors.ConfigError(f"ModelConfig.ln_eps={self.ln_eps!r}: expected a positive number "
                               f"like 1e-5")
    for name, allowed in (("norm", NORMS), ("activation", ACTIVATIONS), ("param_dtype", DTYPES),
                          ("compute_dtype", DTYPES + (AUTO,)), ("remat_policy", REMAT_POLICIES),
                          ("attention_impl", ATTENTION_IMPLS), ("init", INITS)):
      if getattr(self, name) not in allowed:
        raise errors.ConfigError(f"ModelConfig.{name}={getattr(self, name)!r}: expected one of "
                                 f"{allowed}")
    if isinstance(self.loss_chunk, bool) or not isinstance(self.loss_chunk, (int, np.integer)) \
        or self.loss_chunk < 0:
      raise errors.ConfigError(f"ModelConfig.loss_chunk={self.loss_chunk!r}: expected 0 (whole "
                               f"logits) or a positive number of rows per chunk, e.g. 256")
    if not isinstance(self.tie_embeddings, bool):
      raise errors.ConfigError(f"ModelConfig.tie_embeddings={self.tie_embeddings!r}: expected "
                               f"True or False")

  @property
  def padded_vocab(self) -> int:
    """Rows of the embedding (and logits): ``vocab_size`` rounded up to ``vocab_pad_multiple``.

    Aligned matmul shapes for GPUs (e.g. 8449 -> 8576 with 128); the padded ids are never
    inputs, their logits are -inf (out of the loss, never sampled).
    """
    m = self.vocab_pad_multiple
    return -(-self.vocab_size // m) * m

  @property
  def head_dim(self) -> int:
    return self.d_model // self.n_head

  @property
  def mlp_dim(self) -> int:
    return int(round(self.mlp_ratio * self.d_model))


def resolve_auto(cfg: ModelConfig, platform: str | None = None, verbose: bool = True) -> ModelConfig:
  """``cfg`` with ``"auto"`` settings resolved for ``platform`` (default: JAX's backend).

  NVIDIA GPUs: bfloat16 compute and cuDNN's flash attention (cuDNN needs 16-bit inputs,
  so an explicit float32 there gets the XLA flash path). CPUs (and anything else):
  float32 and ``xla_flash``, the fastest kernel there. Explicit values are kept.
  ``verbose`` prints what was chosen.
  """
  if AUTO not in (cfg.compute_dtype, cfg.attention_impl):
    return cfg
  platform = (platform or jax.default_backend()).lower()
  gpu = platform in ("gpu", "cuda")
  dtype = cfg.compute_dtype
  if dtype == AUTO:
    dtype = "bfloat16" if gpu or platform == "tpu" else "float32"
  impl = cfg.attention_impl
  if impl == AUTO:
    impl = "cudnn" if gpu and dtype in ("bfloat16", "float16") else "xla_flash"
  if verbose:
    chosen = [f"{name}={value}" for name, value, was in
              (("compute_dtype", dtype, cfg.compute_dtype), ("attention_impl", impl, cfg.attention_impl))
              if was == AUTO]
    print(f"model: {', '.join(chosen)} (\"auto\" on platform {platform})")
  return dataclasses.replace(cfg, compute_dtype=dtype, attention_impl=impl)


def compute_dtype(cfg: ModelConfig) -> jnp.dtype:
  """The dtype of matmuls and activations (``"auto"`` resolved for JAX's backend)."""
  return jnp.dtype(resolve_auto(cfg, verbose=False).compute_dtype)


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
  pad = cfg.padded_vocab - V  # zero rows: the real rows equal the unpadded model's
  params = {
      "wte": jnp.pad(normal((V, D), std), ((0, pad), (0, 0))),
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
    params["lm_head"] = jnp.pad(normal((D, V), std), ((0, 0), (0, pad)))
  return params


# ----------------------------------------------------------------------------- pieces


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float = 1e-5) -> jax.Array:
  """``scale * (x - mean) / sqrt(var + eps) + bias`` over the last axis, in at least float32.

  Computed on the rows ``(N, D)``: a batch of one would otherwise leave a unit axis in
  every reduction, which XLA:CPU's YNNPACK fusions ran several times slower
  (docs/performance.md).
  """
  x32 = at_least_f32(x).reshape(-1, x.shape[-1])
  mean = jnp.mean(x32, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
  y = (x32 - mean) * jax.lax.rsqrt(var + eps)
  return (y * at_least_f32(scale) + at_least_f32(bias)).astype(x.dtype).reshape(x.shape)


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
  """``x @ w + b`` on the rows ``(N, i)``, so the bias gradient reduces no unit axis (see
  ``layer_norm``)."""
  y = x.reshape(-1, x.shape[-1]).astype(dtype) @ w.astype(dtype) + b.astype(dtype)
  return y.reshape(*x.shape[:-1], w.shape[-1])


def qkv_project(x_BTD: jax.Array, attn: Params, cfg: ModelConfig):
  """The fused QKV projection, split into heads: three ``(B, T, H, K)`` arrays."""
  B, T, _ = x_BTD.shape
  qkv = _dense(x_BTD, attn["w_qkv"], attn["b_qkv"], compute_dtype(cfg))
  q, k, v = jnp.split(qkv, 3, axis=-1)
  return tuple(a.reshape(B, T, cfg.n_head, cfg.head_dim) for a in (q, k, v))


def out_project(o_BTHK: jax.Array, attn: Params, cfg: ModelConfig) -> jax.Array:
  """Merge the heads and apply the attention output projection: ``(B, T, H, K) -> (B, T, D)``."""
  B, T, H, K = o_BTHK.shape
  return _dense(o_BTHK.reshape(B, T, H * K), attn["w_out"], attn["b_out"], compute_dtype(cfg))


def attention(x_BTD: jax.Array, attn: Params, cfg: ModelConfig) -> jax.Array:
  """Causal multi-head self-attention with fused QKV and output projections (with biases).

  The kernel (``andrea_jax/attention.py``) is ``cfg.attention_impl``'s.
  """
  q, k, v = qkv_project(x_BTD, attn, cfg)  # 3 x (B, T, H, K)
  impl = resolve_auto(cfg, verbose=False).attention_impl
  o_BTHK = kernels.causal_attention(q, k, v, impl, cfg.attention_block)
  return out_project(o_BTHK, attn, cfg)


def mlp(x_BTD: jax.Array, mlp_params: Params, cfg: ModelConfig) -> jax.Array:
  """``W_2 act(W_1 x + b_1) + b_2``; SwiGLU gates ``silu(gate) * up`` from a fused W_1."""
  dtype = compute_dtype(cfg)
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
    raise errors.InputError(f"tokens have shape {shape}: expected (batch, time)")
  if shape[1] > cfg.block_size:
    raise errors.InputError(f"sequence length {shape[1]} exceeds the context block_size={cfg.block_size}: "
                     f"crop the input to its last {cfg.block_size} tokens or use a longer-context config")
  if isinstance(tokens, jax.core.Tracer):
    return
  ids = np.asarray(tokens)
  if not np.issubdtype(ids.dtype, np.integer):
    raise errors.InputError(f"tokens have dtype {ids.dtype}: expected integer token ids")
  if ids.size and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
    bad = ids.min() if ids.min() < 0 else ids.max()
    raise errors.InputError(f"token id {int(bad)} is outside [0, {cfg.vocab_size}) for vocab_size="
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
  return x_BTD.astype(compute_dtype(cfg))


def unembed(params: Params, x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Final LayerNorm (pre-norm model only), then the tied (or untied) head: float32 logits.

  ``(B, T, cfg.padded_vocab)``: ids from ``vocab_size`` on (padding) have logit -inf.
  """
  x_BTD = _final_norm(params, x_BTD, cfg)
  dtype = compute_dtype(cfg)
  if cfg.tie_embeddings:
    logits = jnp.einsum("btd,vd->btv", x_BTD.astype(dtype), params["wte"].astype(dtype))
  else:
    logits = jnp.einsum("btd,dv->btv", x_BTD.astype(dtype), params["lm_head"].astype(dtype))
  logits = at_least_f32(logits)
  if cfg.padded_vocab != cfg.vocab_size:
    logits = jnp.where(jnp.arange(cfg.padded_vocab) < cfg.vocab_size, logits, -jnp.inf)
  return logits


def _final_norm(params: Params, x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
  if cfg.norm == "pre":
    return layer_norm(x_BTD, params["ln_f"]["scale"], params["ln_f"]["bias"], cfg.ln_eps)
  return x_BTD


def _blocks(params: Params, tokens_BT: jax.Array, cfg: ModelConfig) -> jax.Array:
  """The residual stream after the last block, ``(B, T, D)``."""
  check_tokens(tokens_BT, cfg)
  x_BTD = embed(params, tokens_BT, cfg)
  step = _remat(lambda x, block: (block_forward(block, x, cfg), None), cfg.remat_policy)
  x_BTD, _ = jax.lax.scan(step, x_BTD, params["blocks"], unroll=cfg.scan_unroll)
  return x_BTD


def forward(params: Params, tokens_BT: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Logits ``(B, T, V)`` for token ids ``(B, T)``; ``lax.scan`` walks the stacked blocks."""
  return unembed(params, _blocks(params, tokens_BT, cfg), cfg)


def loss_fn(params: Params, tokens_BT: jax.Array, targets_BT: jax.Array, cfg: ModelConfig,
            mask_BT: jax.Array | None = None) -> jax.Array:
  """Mean next-token cross-entropy in nats (optionally over the positions where mask is 1).

  With ``cfg.loss_chunk > 0`` the unembedding and the loss run fused over chunks of that
  many rows (``cross_entropy.py``): the same value and gradients, no ``(B, T, V)`` logits.
  """
  if cfg.loss_chunk:
    return _chunked_loss(params, tokens_BT, targets_BT, cfg, mask_BT)
  logits_BTV = forward(params, tokens_BT, cfg)
  nll_BT = optax.softmax_cross_entropy_with_integer_labels(  # on rows: see layer_norm
      logits_BTV.reshape(-1, logits_BTV.shape[-1]), targets_BT.reshape(-1)).reshape(targets_BT.shape)
  if mask_BT is None:
    return jnp.mean(nll_BT)
  mask_BT = mask_BT.astype(nll_BT.dtype)
  return jnp.sum(nll_BT * mask_BT) / jnp.maximum(jnp.sum(mask_BT), 1.0)


def _chunked_loss(params, tokens_BT, targets_BT, cfg: ModelConfig, mask_BT=None) -> jax.Array:
  x_BTD = _final_norm(params, _blocks(params, tokens_BT, cfg), cfg)
  D = x_BTD.shape[-1]
  w_VD = params["wte"] if cfg.tie_embeddings else params["lm_head"].T
  weight_BT = jnp.ones(targets_BT.shape, jnp.float32) if mask_BT is None else \
      mask_BT.astype(jnp.float32)
  total = cross_entropy.weighted_nll_sum(
      x_BTD.reshape(-1, D).astype(compute_dtype(cfg)), w_VD, targets_BT.reshape(-1),
      weight_BT.reshape(-1), cfg.vocab_size, cfg.loss_chunk)
  return total / jnp.maximum(jnp.sum(weight_BT), 1.0)


# ----------------------------------------------------------------------------- counting


def count_params(cfg: ModelConfig) -> int:
  """The exact number of parameters, from the config alone (equals the leaves of init_params)."""
  D, F, L = cfg.d_model, cfg.mlp_dim, cfg.n_layer
  f_in = 2 * F if cfg.activation == "swiglu" else F
  attn = D * 3 * D + 3 * D + D * D + D
  mlp_ = D * f_in + f_in + F * D + D
  block = attn + mlp_ + 2 * (2 * D)
  total = L * block + cfg.padded_vocab * D + cfg.block_size * D
  total += 2 * D if cfg.norm == "pre" else 0
  total += 0 if cfg.tie_embeddings else D * cfg.padded_vocab
  return total


def count_layer_norms(cfg: ModelConfig) -> int:
  """Two per block, plus the final one in the pre-norm model."""
  return 2 * cfg.n_layer + (1 if cfg.norm == "pre" else 0)


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None, causal: bool = False) -> float:
  """Training FLOPs per token, ``6 N + 12 L H Q T`` (PaLM, appendix B); N excludes positions.

  PaLM's attention term counts the whole ``T x T`` square of scores. ``causal=True``
  counts only the pairs a causal kernel must compute (each query and the keys at or
  before it, ``(T + 1) / 2`` on average): ``6 N + 12 L H Q (T + 1) / 2``.
  """
  T = cfg.block_size if seq_len is None else seq_len
  n = count_params(cfg) - cfg.block_size * cfg.d_model
  keys = (T + 1) / 2 if causal else T
  return 6.0 * n + 12.0 * cfg.n_layer * cfg.n_head * cfg.head_dim * keys

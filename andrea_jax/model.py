"""The ANDREA transformer as pure functions over an explicit parameter pytree.

Read top to bottom: config, initialisation, the pieces (LayerNorm, activations,
attention, MLP), the seed's residual pattern, one block, the whole model, the loss,
and the exact parameter count.

    x = wte[ids] + wpe[positions]                       # (B, T, D); rope: wte[ids] alone
    for each block (lax.scan over params stacked on a leading n_layer axis):
        x = x + Attention(LN(x))                        # pre-norm (default)
        x = x + MLP(LN(x))
    x = LN(x)                                           # final norm (pre-norm only)
    logits = x @ wte.T                                  # tied unembedding, (B, T, V)

The norm placement (``model.norm``) is an entry of ``PLACEMENTS``: pre, post, peri,
reordered, deepnorm and mix, with LayerNorm scaling (``norm_depth_scaling``) on pre; what
differs by layer (Mix-LN, LayerNorm scaling) reads the layer index the scan walks beside the
parameters (``layer_site``). docs/model.md has the table.

Variants beside the norm placement: ``position="rope"`` (rotary positions, Su et al. 2021:
no ``wpe``; each head's queries and keys rotated by their position, ``rope``),
``activation="relu2"`` (ReLU squared, So et al. 2021), ``bias=False`` (no bias in any linear
layer or norm, nanoGPT's flag), ``qk_norm`` (a LayerNorm on each head's queries and
keys before their dot product), ``parametrization="mup"`` (the width rules of ``mup.py``),
the base model's readout, attention and embedding multipliers (``mup.py``; 1 by default)
and, in the loss, PaLM's z-loss (``loss_terms``).

Dropout (``dropout``, nanoGPT's: off by default) acts only where a caller passes a
``dropout_key`` (the train step does; evaluation, sampling and the probes do not): on the
embeddings, on the attention probabilities and on each block's attention and MLP outputs
before they are added back. The key is split once per layer and scanned with the stacked
blocks. At ``dropout=0``, or without a key, no random number is drawn.

Names carry their layout as a suffix (nanodo style): B batch, T time, D d_model,
H heads, K head size, F MLP width, V vocabulary, L layers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import attention as kernels
from andrea_jax import cross_entropy
from andrea_jax import errors
from andrea_jax import mup
from andrea_jax.precision import at_least_f32

Params = Mapping[str, Any]

NORM_TYPES = ("layernorm", "rmsnorm", "dyt")  # what normalises (normalise); NORMS: where
INITS = ("gpt2", "xavier")
ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "relu2", "swiglu")
POSITIONS = ("learned", "rope")  # a learned table wpe (GPT-2); rotary (Su et al. 2021)
DTYPES = ("float32", "bfloat16", "float16", "float64")
AUTO = "auto"  # compute_dtype / attention_impl / remat_policy chosen from the platform (resolve_auto)
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
  norm_type: str = "layernorm"
  dyt_alpha_init: float = 0.5
  # Mix-LN (norm="mix"): the fraction of the blocks, from the first, that are post-LN.
  mix_post_fraction: float = 0.25
  # LayerNorm scaling (Sun et al. 2025): each pre-norm output times 1 / sqrt(layer index).
  norm_depth_scaling: bool = False
  activation: str = "gelu_tanh"
  tie_embeddings: bool = True
  ln_eps: float = 1e-5
  param_dtype: str = "float32"
  compute_dtype: str = "float32"
  remat_policy: str = "auto"
  scan_unroll: int = 1
  attention_impl: str = "auto"
  attention_block: int = 128
  init: str = "gpt2"
  vocab_pad_multiple: int = 1
  loss_chunk: int = 0
  qk_norm: bool = False
  parametrization: str = "sp"
  base_width: int = 0
  # The base model's multipliers (mup.py: tuned at the base width, the same at every width).
  readout_multiplier: float = 1.0
  attention_multiplier: float = 1.0
  embedding_multiplier: float = 1.0
  mup_attention: str = "base"
  mup_decay: str = "constant"
  zero_query_init: bool = False
  # muP's head count at the base width (0: n_head, held fixed across widths; mup.py).
  base_n_head: int = 0
  # Depth rule (mup.py): "none" or "completep" (residual branches x base_depth / n_layer).
  depth_rule: str = "none"
  base_depth: int = 0
  dropout: float = 0.0
  # Positions: "learned" (the wpe table) or "rope" (rotary, base rope_base; no table).
  position: str = "learned"
  rope_base: float = 10000.0
  # False: no bias in any linear layer or norm (nanoGPT's bias flag).
  bias: bool = True

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
    if isinstance(self.dyt_alpha_init, bool) or not isinstance(self.dyt_alpha_init, (int, float)) \
        or not 0 < self.dyt_alpha_init < math.inf:
      raise errors.ConfigError(f"ModelConfig.dyt_alpha_init={self.dyt_alpha_init!r}: expected a "
                               f"positive number (Zhu et al. 2025 use 0.5)")
    for name, allowed in (("norm", NORMS), ("norm_type", NORM_TYPES), ("activation", ACTIVATIONS), ("param_dtype", DTYPES),
                          ("compute_dtype", DTYPES + (AUTO,)), ("remat_policy", REMAT_POLICIES + (AUTO,)),
                          ("attention_impl", ATTENTION_IMPLS), ("init", INITS),
                          ("parametrization", mup.PARAMETRIZATIONS),
                          ("mup_attention", mup.MUP_ATTENTION), ("mup_decay", mup.MUP_DECAY),
                          ("depth_rule", mup.DEPTH_RULES), ("position", POSITIONS)):
      if getattr(self, name) not in allowed:
        raise errors.ConfigError(f"ModelConfig.{name}={getattr(self, name)!r}: expected one of "
                                 f"{allowed}")
    if isinstance(self.loss_chunk, bool) or not isinstance(self.loss_chunk, (int, np.integer)) \
        or self.loss_chunk < 0:
      raise errors.ConfigError(f"ModelConfig.loss_chunk={self.loss_chunk!r}: expected 0 (whole "
                               f"logits) or a positive number of rows per chunk, e.g. 256")
    for name in ("readout_multiplier", "attention_multiplier", "embedding_multiplier"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise errors.ConfigError(f"ModelConfig.{name}={value!r}: expected a positive number "
                                 f"(1.0: no multiplier; mup.py tunes it at the base width)")
    if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) \
        or not 0 <= self.dropout < 1:
      raise errors.ConfigError(f"ModelConfig.dropout={self.dropout!r}: expected a probability "
                               f"in [0, 1), e.g. 0.1 (0: off)")
    if self.dropout and self.attention_impl == "cudnn":
      raise errors.ConfigError(f"ModelConfig.dropout={self.dropout} with attention_impl='cudnn': "
                               f"cuDNN's kernel here takes no attention dropout; set "
                               f"attention_impl='xla_flash' (or 'auto'), or dropout=0")
    if isinstance(self.rope_base, bool) or not isinstance(self.rope_base, (int, float)) \
        or not 1 < self.rope_base < math.inf:
      raise errors.ConfigError(f"ModelConfig.rope_base={self.rope_base!r}: expected a number "
                               f"above 1 (Su et al. 2021 use 10000.0)")
    if self.position == "rope" and self.head_dim % 2:
      raise errors.ConfigError(f"ModelConfig.position='rope' with head_dim={self.head_dim} "
                               f"(d_model / n_head): RoPE rotates pairs of a head's dimensions; "
                               f"choose n_head so that d_model / n_head is even")
    for name in ("tie_embeddings", "qk_norm", "zero_query_init", "bias"):
      if not isinstance(getattr(self, name), bool):
        raise errors.ConfigError(f"ModelConfig.{name}={getattr(self, name)!r}: expected True or "
                                 f"False")
    self._check_mup()
    self._check_norms()

  def _check_norms(self):
    f = self.mix_post_fraction
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
      raise errors.ConfigError(f"model.mix_post_fraction={f!r}: expected a fraction in [0, 1] of "
                               f"the blocks that are post-LN under norm='mix' (Mix-LN's 0.25)")
    if not isinstance(self.norm_depth_scaling, bool):
      raise errors.ConfigError(f"model.norm_depth_scaling={self.norm_depth_scaling!r}: expected "
                               f"True or False")
    if self.norm_depth_scaling and self.norm in PLACEMENTS and not PLACEMENTS[self.norm].depth_scaling:
      raise errors.ConfigError(f"model.norm_depth_scaling=True with model.norm={self.norm!r}: "
                               f"LayerNorm scaling (Sun et al. 2025, section 4) scales a pre-norm's "
                               f"output and gives no rule for this placement; use norm='pre'")
    if self.norm_depth_scaling and self.norm_type == "dyt":
      raise errors.ConfigError("model.norm_depth_scaling=True with model.norm_type='dyt': Sun et al. "
                               "2025 scale a LayerNorm/RMSNorm output; DyT normalises nothing and "
                               "the paper gives it no rule; use norm_type='layernorm' or 'rmsnorm'")
    own = "norm_depth_scaling=True" if self.norm_depth_scaling else f"norm={self.norm!r}"
    if self.depth_rule != "none" and (self.norm_depth_scaling or self.norm in ("deepnorm", "mix")):
      raise errors.ConfigError(f"model.depth_rule={self.depth_rule!r} with model.{own}: CompleteP's "
                               f"rule is derived for pre-LN and this has a depth rule of its own; "
                               f"no paper combines them; set depth_rule='none'")

  def _check_mup(self):
    b = self.base_width
    if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 0:
      raise errors.ConfigError(f"ModelConfig.base_width={b!r}: expected 0 (unset) or a positive "
                               f"width, the d_model whose learning rate muP transfers")
    if self.parametrization == "mup" and b == 0:
      raise errors.ConfigError("ModelConfig.base_width=0 with parametrization='mup': set "
                               "base_width to the d_model the learning rate was tuned at, e.g. 64")
    h = self.base_n_head
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 0:
      raise errors.ConfigError(f"ModelConfig.base_n_head={h!r}: expected 0 (n_head, held fixed "
                               f"across widths) or the head count of the base model")
    if self.parametrization == "mup" and h and b % h:
      raise errors.ConfigError(f"ModelConfig.base_n_head={h} does not divide base_width={b}: "
                               f"choose the base model's head count, e.g. base_width / 64")
    L0 = self.base_depth
    if isinstance(L0, bool) or not isinstance(L0, (int, np.integer)) or L0 < 0:
      raise errors.ConfigError(f"ModelConfig.base_depth={L0!r}: expected 0 (unset) or the "
                               f"n_layer whose learning rate the depth rule transfers")
    if self.depth_rule != "none" and L0 == 0:
      raise errors.ConfigError(f"ModelConfig.base_depth=0 with depth_rule={self.depth_rule!r}: "
                               f"set base_depth to the n_layer the rate was tuned at, e.g. 2")
    if self.depth_rule != "none" and self.init != "gpt2":
      raise errors.ConfigError(f"ModelConfig.init={self.init!r} with depth_rule="
                               f"{self.depth_rule!r}: the rule scales the 'gpt2' init by depth; "
                               f"expected init='gpt2'")
    if self.parametrization == "mup" and self.init != "gpt2":
      raise errors.ConfigError(f"ModelConfig.init={self.init!r} with parametrization='mup': muP "
                               f"scales the 'gpt2' init by width itself; expected init='gpt2'")

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
  so an explicit float32 there gets the XLA flash path; so does a model with ``dropout``,
  which cuDNN's kernel here does not take), no rematerialisation. CPUs (and
  anything else): float32, ``xla_flash``, the fastest kernel there, and the remat policy
  ``dots_with_no_batch_dims_saveable``: the backward recomputes each block's elementwise work
  and attention core from the saved weight-matmul outputs instead of keeping every
  activation, which on a CPU is as fast or faster and holds a quarter of the memory
  (andrea120m at 1 x 1024: XLA's temporaries 0.5 GB instead of 1.8; docs/performance.md).
  Explicit values are kept. ``verbose`` prints what was chosen.
  """
  if AUTO not in (cfg.compute_dtype, cfg.attention_impl, cfg.remat_policy):
    return cfg
  platform = (platform or jax.default_backend()).lower()
  gpu = platform in ("gpu", "cuda")
  dtype = cfg.compute_dtype
  if dtype == AUTO:
    dtype = "bfloat16" if gpu or platform == "tpu" else "float32"
  impl = cfg.attention_impl
  if impl == AUTO:
    impl = "cudnn" if gpu and dtype in ("bfloat16", "float16") and not cfg.dropout else "xla_flash"
  remat = cfg.remat_policy
  if remat == AUTO:
    remat = "none" if gpu or platform == "tpu" else "dots_with_no_batch_dims_saveable"
  if verbose:
    chosen = [f"{name}={value}" for name, value, was in
              (("compute_dtype", dtype, cfg.compute_dtype), ("attention_impl", impl, cfg.attention_impl),
               ("remat_policy", remat, cfg.remat_policy))
              if was == AUTO]
    print(f"model: {', '.join(chosen)} (\"auto\" on platform {platform})")
  return dataclasses.replace(cfg, compute_dtype=dtype, attention_impl=impl, remat_policy=remat)


def compute_dtype(cfg: ModelConfig) -> jnp.dtype:
  """The dtype of matmuls and activations (``"auto"`` resolved for JAX's backend)."""
  return jnp.dtype(resolve_auto(cfg, verbose=False).compute_dtype)


# ----------------------------------------------------------------------------- init


def block_init_stds(cfg: ModelConfig) -> dict[str, float]:
  """Init std of each block matrix: ``{"qkv", "v", "attn_out", "mlp_in", "mlp_out"}``
  (``"qkv"``: the query and key columns of the fused QKV matrix, ``"v"``: its value columns).

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
  if cfg.init == "xavier":
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

  The block matrices as ``block_init_stds`` says; the embeddings (and an untied head)
  N(0, 0.02). LayerNorm scale 1, bias 0 (also the per-head query and key norms of
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
  norm = lambda *lead: norm_params(cfg, *lead)  # the residual norms: cfg.norm_type's leaves
  f_in = 2 * F if cfg.activation == "swiglu" else F  # gate and up fused in one matrix
  pad = cfg.padded_vocab - V  # zero rows: the real rows equal the unpadded model's
  # Per column of the fused QKV matrix (q, k, v): deepnorm's beta reaches the value part alone.
  qkv_std = jnp.repeat(jnp.asarray([s["qkv"], s["qkv"], s["v"]], jnp.float32), D)
  params = {
      "wte": jnp.pad(normal((V, D), std), ((0, pad), (0, 0))),
      "wpe": normal((T, D), std),
      "blocks": {
          "ln_1": norm(L),
          "attn": {"w_qkv": zero_query(normal((L, D, 3 * D), qkv_std), cfg), "b_qkv": zeros((L, 3 * D)),
                   "w_out": normal((L, D, D), s["attn_out"]), "b_out": zeros((L, D))},
          "ln_2": norm(L),
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
    params["blocks"].update(ln_1_out=norm(L), ln_2_out=norm(L))
  if placement(cfg.norm).final_norm:
    params["ln_f"] = norm()
  if not cfg.tie_embeddings:
    params["lm_head"] = jnp.pad(normal((D, V), std), ((0, 0), (0, pad)))
  if cfg.norm_type == "dyt":
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


# ----------------------------------------------------------------------------- pieces


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array | None, eps: float = 1e-5) -> jax.Array:
  """``scale * (x - mean) / sqrt(var + eps) + bias`` over the last axis, in at least float32
  (``bias=None``: none, ``ModelConfig.bias=False``).

  Computed on the rows ``(N, D)``: a batch of one would otherwise leave a unit axis in
  every reduction, which XLA:CPU's YNNPACK fusions ran several times slower
  (docs/performance.md).
  """
  x32 = at_least_f32(x).reshape(-1, x.shape[-1])
  mean = jnp.mean(x32, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
  y = (x32 - mean) * jax.lax.rsqrt(var + eps)
  y = y * at_least_f32(scale) if bias is None else y * at_least_f32(scale) + at_least_f32(bias)
  return y.astype(x.dtype).reshape(x.shape)


def rms_norm(x: jax.Array, scale: jax.Array, eps: float = 1e-5) -> jax.Array:
  """RMSNorm (Zhang & Sennrich 2019, eq. 4): ``scale * x / sqrt(mean(x^2) + eps)``: no mean
  is subtracted and there is no bias. In at least float32, on the rows (see ``layer_norm``)."""
  x32 = at_least_f32(x).reshape(-1, x.shape[-1])
  y = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)
  return (y * at_least_f32(scale)).astype(x.dtype).reshape(x.shape)


def dyt(x: jax.Array, alpha: jax.Array, scale: jax.Array, bias: jax.Array | None) -> jax.Array:
  """Dynamic Tanh (Zhu et al. 2025, "Transformers without Normalization", section 3, eq. 1):
  ``scale * tanh(alpha * x) + bias`` with a learned scalar ``alpha``; no statistics."""
  x32 = at_least_f32(x)
  y = jnp.tanh(at_least_f32(alpha) * x32) * at_least_f32(scale)
  return (y if bias is None else y + at_least_f32(bias)).astype(x.dtype)


def norm_params(cfg: ModelConfig, *lead: int) -> dict:
  """A residual norm's leaves for ``cfg.norm_type`` (``lead``: a stacked layer axis, if any).

  LayerNorm: scale 1, bias 0. RMSNorm: scale 1 (Zhang & Sennrich 2019 has no bias). DyT:
  ``alpha`` (one scalar per norm) ``dyt_alpha_init``, scale 1, bias 0 (Zhu et al. 2025,
  section 3: alpha_0 = 0.5 by default, gamma ones, beta zeros). ``bias=False``: no ``bias``.
  """
  D, dtype = cfg.d_model, jnp.dtype(cfg.param_dtype)
  ones, zeros = jnp.ones((*lead, D), dtype), jnp.zeros((*lead, D), dtype)
  bias = {"bias": zeros} if cfg.bias else {}
  if cfg.norm_type == "layernorm":
    return {"scale": ones, **bias}
  if cfg.norm_type == "rmsnorm":
    return {"scale": ones}
  if cfg.norm_type == "dyt":
    return {"alpha": jnp.full(lead, cfg.dyt_alpha_init, dtype), "scale": ones, **bias}
  raise errors.ConfigError(f"model.norm_type={cfg.norm_type!r}: expected one of {NORM_TYPES}")


def norm_size(cfg: ModelConfig) -> int:
  """The number of parameters of one residual norm (``norm_params`` without a lead axis)."""
  biased = cfg.bias and cfg.norm_type != "rmsnorm"  # LayerNorm's and DyT's bias
  return (1 + biased) * cfg.d_model + (cfg.norm_type == "dyt")


def normalise(x: jax.Array, p: Params, norm_type: str = "layernorm", eps: float = 1e-5) -> jax.Array:
  """The residual norm ``norm_type`` with leaves ``p`` (``norm_params``'s)."""
  if norm_type == "layernorm":
    return layer_norm(x, p["scale"], p.get("bias"), eps)  # no bias: ModelConfig.bias=False
  if norm_type == "rmsnorm":
    return rms_norm(x, p["scale"], eps)
  if norm_type == "dyt":
    return dyt(x, p["alpha"], p["scale"], p.get("bias"))
  raise errors.ConfigError(f"model.norm_type={norm_type!r}: expected one of {NORM_TYPES}")


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


# ----------------------------------------------------------------------------- the residual pattern


class Site(NamedTuple):
  """What a layer's residual pattern reads besides ``x``, its branch and its norms
  (``layer_site``): DeepNorm's ``alpha``; Mix-LN's ``post`` (whether this layer is post-LN: a
  traced bool under the layer scan); LayerNorm scaling's ``norm_scale`` (1/sqrt(l), or None)."""

  alpha: float = 1.0
  post: Any = False
  norm_scale: Any = None


def _scaled(h: jax.Array, site: Site) -> jax.Array:
  """A pre-norm's output times LayerNorm scaling's 1/sqrt(l) (Sun et al. 2025, section 4), if on."""
  return h if site.norm_scale is None else (h * site.norm_scale).astype(h.dtype)


def _mix(x, f, n, n_out, site: Site):
  """Mix-LN (Li et al. 2024, section 4): post-LN ``N(x + F(x))`` where ``site.post``, pre-LN
  ``x + F(N(x))`` after. One branch call: the norm is computed in both places and selected
  (a norm is cheap beside the branch; the branch, and any hook on it, runs once)."""
  y = x + f(jnp.where(site.post, x, n(x)))
  return jnp.where(site.post, n(y), y)


@dataclasses.dataclass(frozen=True)
class Placement:
  """Where a norm sits: ``sublayer(x, f, n, n_out, site)`` is one residual sublayer (``f`` its
  branch, ``n`` its norm, ``n_out`` a branch-output norm, ``site`` the layer's ``Site``),
  ``final_norm`` whether the model normalises the last stream before the head (``ln_f``).
  Every reader of the model (``block_forward``, the parameter count, the Flax twin, the lens)
  looks a placement up here (``placement``), so an unknown one is an error everywhere rather
  than silently one of these."""

  sublayer: Callable[[jax.Array, Callable, Callable, Callable | None, Site], jax.Array]
  final_norm: bool
  out_norm: bool = False  # a second norm per sublayer, on the branch output (ln_1_out, ln_2_out)
  alpha: Callable[[int], float] | None = None  # residual scale from n_layer (DeepNorm)
  init_gain: Callable[[int], float] | None = None  # init gain from n_layer (block_init_stds)
  by_layer: bool = False  # the pattern differs by layer: block_forward needs the layer index
  depth_scaling: bool = False  # takes model.norm_depth_scaling (a pre-norm to scale)


PLACEMENTS: dict[str, Placement] = {
    # Pre-norm x + F(N(x)) (GPT-2; Xiong et al. 2020), with a final norm; N(x) / sqrt(l) under
    # norm_depth_scaling (Sun et al. 2025, section 4, eq. for LayerNorm scaling).
    "pre": Placement(lambda x, f, n, n_out, s: x + f(_scaled(n(x), s)), final_norm=True,
                     depth_scaling=True),
    # Post-norm N(x + F(x)) (Vaswani et al. 2017, section 3.1), no final norm.
    "post": Placement(lambda x, f, n, n_out, s: n(x + f(x)), final_norm=False),
    # Peri-LN x + N_out(F(N(x))) (Kim et al. 2025, section 3, eq. 3; Sandwich-LN, Ding et al.
    # 2021; Gemma 2's post-attention/post-FFW norms): a second norm on each branch output.
    "peri": Placement(lambda x, f, n, n_out, s: x + n_out(f(n(x))), final_norm=True, out_norm=True),
    # Reordered x + N(F(x)) (OLMo 2, OLMo et al. 2024, section 3.2.1): the branch reads the raw
    # stream and its output is normalised; the one norm per sublayer sits in ln_1 / ln_2.
    "reordered": Placement(lambda x, f, n, n_out, s: x + n(f(x)), final_norm=True),
    # DeepNorm N(alpha x + F(x)) (Wang et al. 2022, "DeepNet", section 3 and Figure 2, the
    # decoder-only column): alpha = (2L)^(1/4), init gain beta = (8L)^(-1/4); post-LN, so no
    # final norm.
    "deepnorm": Placement(lambda x, f, n, n_out, s: n(s.alpha * x + f(x)), final_norm=False,
                          alpha=lambda L: (2 * L) ** 0.25, init_gain=lambda L: (8 * L) ** -0.25),
    # Mix-LN (Li et al. 2024, section 4): post-LN in the first mix_post_layers(cfg) blocks, pre-LN
    # after; the pre-LN part ends in a final norm (the paper's code keeps LLaMA's).
    "mix": Placement(_mix, final_norm=True, by_layer=True),
}
NORMS = tuple(PLACEMENTS)


def placement(norm: str) -> Placement:
  """The table entry of ``model.norm``; an unknown name is a one-line error naming the field."""
  try:
    return PLACEMENTS[norm]
  except KeyError:
    raise errors.ConfigError(f"model.norm={norm!r}: expected one of {NORMS}") from None


def mix_post_layers(cfg: ModelConfig) -> int:
  """Mix-LN's post-LN blocks: ``mix_post_fraction * n_layer`` rounded half up (0.25 x 12 = 3, as
  the authors' code runs its 12-layer model: ``POST_NUM=3``, github.com/pixeli99/MixLN)."""
  return int(math.floor(cfg.mix_post_fraction * cfg.n_layer + 0.5))


def layer_site(cfg: ModelConfig, layer: Any = None) -> Site:
  """The ``Site`` of block ``layer`` (0-based; a traced int under the layer scan).

  ``layer`` may be left out only where nothing differs by layer (not ``mix``, not
  ``norm_depth_scaling``); an index is then a one-line error naming what needs it.
  """
  p = placement(cfg.norm)
  if layer is None and (p.by_layer or cfg.norm_depth_scaling):
    what = "norm_depth_scaling=True" if cfg.norm_depth_scaling else f"norm={cfg.norm!r}"
    raise ValueError(f"block_forward: model.{what} differs by layer: pass layer= (the 0-based "
                     f"block index the layer scan walks)")
  alpha = 1.0 if p.alpha is None else p.alpha(cfg.n_layer)
  post = p.by_layer and jnp.asarray(layer) < mix_post_layers(cfg)
  norm_scale = None
  if cfg.norm_depth_scaling:  # 1/sqrt(l), l = layer + 1 the 1-based index (Sun et al. 2025)
    norm_scale = jax.lax.rsqrt(jnp.asarray(layer, jnp.float32) + 1.0)
  return Site(alpha, post, norm_scale)


def residual_sublayer(x: jax.Array, branch_fn: Callable[[jax.Array], jax.Array],
                      ln_params: Params, norm: str = "pre", eps: float = 1e-5,
                      multiplier: float = 1.0,
                      tap: Callable[[jax.Array], None] | None = None,
                      sublayer: Callable | None = None,
                      norm_type: str = "layernorm", out_params: Params | None = None,
                      site: Site = Site()) -> jax.Array:
  """The seed's residual pattern as ``norm``'s ``Placement`` says: pre-norm ``x + F(LN(x))``;
  post-norm ``LN(x + F(x))``; the norm is ``norm_type``'s (``normalise``).

  ``multiplier`` scales the branch (a depth rule's ``base_depth / n_layer``); at 1 the
  pattern is the seed's exactly (no multiply is traced). ``tap(f)``, if given, sees what the
  branch writes into the stream (the multiplier applied), for the lens. ``sublayer(x, f, n,
  n_out, site)`` replaces the placement's own (the diagnostics' ablations: no skip, no norm).
  ``out_params``: the branch-output norm's leaves of a placement with ``out_norm`` (peri).
  ``site``: the layer's constants (``layer_site``: DeepNorm's alpha, Mix-LN's post flag,
  LayerNorm scaling's factor).
  """
  def branch(h):
    f = branch_fn(h) if multiplier == 1.0 else multiplier * branch_fn(h)
    if tap is not None:
      tap(f)
    return f

  n = lambda h: normalise(h, ln_params, norm_type, eps)
  n_out = None if out_params is None else (lambda h: normalise(h, out_params, norm_type, eps))
  return (sublayer or placement(norm).sublayer)(x, branch, n, n_out, site)


def block_forward(block: Params, x_BTD: jax.Array, cfg: ModelConfig, stats: bool = False,
                  dropout_key: jax.Array | None = None,
                  attn_fn: Callable[[jax.Array, Params], jax.Array] | None = None,
                  on_sublayer: Callable[[int, jax.Array, jax.Array, jax.Array], None] | None = None,
                  sublayer: Callable | None = None, layer: Any = None):
  """One transformer block: attention, then MLP, each wrapped in ``residual_sublayer``.

  The only block: the KV-cache sampler, the lens and the diagnostics call it with hooks.
  ``attn_fn(h_BTD, block["attn"])`` replaces the attention (the sampler's cached attention,
  the lens's per-head one); ``on_sublayer(i, x_read, f, x_new)`` sees sublayer ``i`` (0
  attention, 1 MLP): the stream it read, what its branch wrote and the stream after it;
  ``sublayer(x, f, n, n_out, site)`` replaces the placement's residual pattern
  (``residual_sublayer``). ``layer``: this block's 0-based index (the layer scans pass it;
  ``mix`` and ``norm_depth_scaling`` need it, ``layer_site``). ``stats=True`` returns ``(x_BTD, {"attn_logit_max": scalar})`` (see ``attention``; not
  with ``attn_fn``). With a ``dropout_key`` (and ``cfg.dropout > 0``): attention-probability
  dropout, and dropout on the attention and MLP outputs before they are added back
  (nanoGPT's).
  """
  seen = {}
  k_probs = k_attn = k_mlp = None
  if dropout_key is not None and cfg.dropout:
    k_probs, k_attn, k_mlp = jax.random.split(dropout_key, 3)
  if stats and attn_fn is not None:
    raise ValueError("block_forward: stats=True reads the model's own attention; pass no attn_fn")

  def attn_branch(h):
    if attn_fn is not None:
      out = attn_fn(h, block["attn"])
    elif not stats:
      out = attention(h, block["attn"], cfg, dropout_key=k_probs)
    else:
      out, seen["attn_logit_max"] = attention(h, block["attn"], cfg, logit_max=True,
                                              dropout_key=k_probs)
    return kernels.dropout(out, cfg.dropout, k_attn)

  m = mup.branch_multiplier(cfg)
  site = layer_site(cfg, layer)
  mlp_branch = lambda h: kernels.dropout(mlp(h, block["mlp"], cfg), cfg.dropout, k_mlp)
  for i, (branch, ln) in enumerate(((attn_branch, "ln_1"), (mlp_branch, "ln_2"))):
    wrote = {}
    x_new = residual_sublayer(x_BTD, branch, block[ln], cfg.norm, cfg.ln_eps, m,
                              tap=None if on_sublayer is None else (lambda f: wrote.update(f=f)),
                              sublayer=sublayer, norm_type=cfg.norm_type,
                              out_params=block.get(ln + "_out"), site=site)
    if on_sublayer is not None:
      on_sublayer(i, x_BTD, wrote["f"], x_new)
    x_BTD = x_new
  return (x_BTD, seen) if stats else x_BTD


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
  # prevent_cse=False: under lax.scan the barriers it adds against common-subexpression
  # elimination are not needed (jax.checkpoint's docs), as in flax_model's nn.remat.
  if policy == "none":
    return fn
  if policy == "full":
    return jax.checkpoint(fn, prevent_cse=False)
  return jax.checkpoint(fn, prevent_cse=False, policy=getattr(jax.checkpoint_policies, policy))


def embed(params: Params, tokens_BT: jax.Array, cfg: ModelConfig,
          pos: jax.Array | int = 0) -> jax.Array:
  """Token plus learned position embeddings, in the compute dtype: ``(B, T, D)``.

  The tokens sit at positions ``pos .. pos+T-1`` (``pos`` may be traced: the KV-cache
  sampler's). ``position="rope"``: the token embeddings alone (the positions rotate the
  queries and keys in ``qkv_project``). Times ``mup.embedding_multiplier`` (the base
  model's embedding multiplier; 1 by default) and, under DyT, its learned ``emb_scale``.
  """
  T = tokens_BT.shape[1]
  x_BTD = jnp.take(params["wte"], tokens_BT, axis=0)
  if cfg.position == "learned":
    x_BTD = x_BTD + jax.lax.dynamic_slice_in_dim(params["wpe"], pos, T, axis=0)
  m = mup.embedding_multiplier(cfg)
  x_BTD = x_BTD if m == 1.0 else x_BTD * jnp.asarray(m, x_BTD.dtype)
  if cfg.norm_type == "dyt":  # its learned scalar on the embedding (embedding_scale_init)
    x_BTD = x_BTD * params["emb_scale"].astype(x_BTD.dtype)
  return x_BTD.astype(compute_dtype(cfg))


def unembed(params: Params, x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Final LayerNorm (pre-norm model only), then the tied (or untied) head: float32 logits.

  ``(B, T, cfg.padded_vocab)``: ids from ``vocab_size`` on (padding) have logit -inf. The
  logits carry muP's readout multiplier (applied to the head's input, the cheaper side).
  """
  x_BTD = _head_input(params, x_BTD, cfg)
  dtype = compute_dtype(cfg)
  if cfg.tie_embeddings:
    logits = jnp.einsum("btd,vd->btv", x_BTD.astype(dtype), params["wte"].astype(dtype))
  else:
    logits = jnp.einsum("btd,dv->btv", x_BTD.astype(dtype), params["lm_head"].astype(dtype))
  logits = at_least_f32(logits)
  if cfg.padded_vocab != cfg.vocab_size:
    logits = jnp.where(jnp.arange(cfg.padded_vocab) < cfg.vocab_size, logits, -jnp.inf)
  return logits


def _head_input(params: Params, x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
  """What the head multiplies: the final norm's output (pre-norm), times the readout multiplier."""
  if placement(cfg.norm).final_norm:
    x_BTD = normalise(x_BTD, params["ln_f"], cfg.norm_type, cfg.ln_eps)
  r = mup.readout_multiplier(cfg)
  return x_BTD if r == 1.0 else x_BTD * jnp.asarray(r, x_BTD.dtype)


def _blocks(params: Params, tokens_BT: jax.Array, cfg: ModelConfig, stats: bool = False,
            dropout_key: jax.Array | None = None):
  """The residual stream after the last block ``(B, T, D)``, and the scan's per-layer
  diagnostics ``{"attn_logit_max": (L,)}`` (None unless ``stats``).

  With a ``dropout_key`` (and ``cfg.dropout > 0``) the embeddings are dropped and each
  layer gets its own key, scanned beside its parameters.
  """
  check_tokens(tokens_BT, cfg)
  x_BTD = embed(params, tokens_BT, cfg)
  keys_L = None
  if dropout_key is not None and cfg.dropout:
    embed_key, layers_key = jax.random.split(dropout_key)
    x_BTD = kernels.dropout(x_BTD, cfg.dropout, embed_key)
    keys_L = jax.random.split(layers_key, cfg.n_layer)

  def step(x, layer):
    block, key, index = layer
    out = block_forward(block, x, cfg, stats, dropout_key=key, layer=index)
    return out if stats else (out, None)

  policy = resolve_auto(cfg, verbose=False).remat_policy
  # The layer index is scanned beside the parameters (Mix-LN and LayerNorm scaling read it).
  return jax.lax.scan(_remat(step, policy), x_BTD,
                      (params["blocks"], keys_L, jnp.arange(cfg.n_layer)), unroll=cfg.scan_unroll)


def forward(params: Params, tokens_BT: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Logits ``(B, T, V)`` for token ids ``(B, T)``; ``lax.scan`` walks the stacked blocks."""
  return unembed(params, _blocks(params, tokens_BT, cfg)[0], cfg)


def loss_fn(params: Params, tokens_BT: jax.Array, targets_BT: jax.Array, cfg: ModelConfig,
            mask_BT: jax.Array | None = None) -> jax.Array:
  """Mean next-token cross-entropy in nats (optionally over the positions where mask is 1)."""
  return loss_terms(params, tokens_BT, targets_BT, cfg, mask_BT)[0]


def loss_terms(params: Params, tokens_BT: jax.Array, targets_BT: jax.Array, cfg: ModelConfig,
               mask_BT: jax.Array | None = None, z_loss: float = 0.0, stats: bool = False,
               dropout_key: jax.Array | None = None):
  """The training objective and its parts: ``(nll + z_loss * mean log(Z)^2, terms)``.

  ``terms``: ``nll`` (the mean cross-entropy, nats), ``z_loss`` (the auxiliary term PaLM adds
  to keep the softmax normaliser ``Z`` near 1, ``z_loss * mean log(Z)^2``), ``log_z`` (the
  mean ``log Z``) and ``logit_rms`` (the root mean square of the logits over the positions
  and the real vocabulary): the output logits' size; with ``stats`` also the blocks'
  per-layer ``attn_logit_max`` ``(L,)``, gathered by the layer scan. Means run over the
  positions where ``mask`` is 1; the terms carry no gradient (under ``jit`` the unused ones
  cost nothing). With ``cfg.loss_chunk > 0`` the unembedding and the loss run fused over
  chunks of that many rows (``cross_entropy.py``): the same values and gradients, no
  ``(B, T, V)`` logits. ``dropout_key``: training's dropout (module docstring); without
  one the model is deterministic.
  """
  x_BTD, per_layer = _blocks(params, tokens_BT, cfg, stats, dropout_key)
  weight_N = (jnp.ones(targets_BT.shape, jnp.float32) if mask_BT is None else
              mask_BT.astype(jnp.float32)).reshape(-1)
  if cfg.loss_chunk:
    total, sums = _chunked_sums(params, x_BTD, targets_BT, weight_N, cfg, z_loss)
  else:  # on rows: see layer_norm
    logits_NV = unembed(params, x_BTD, cfg).reshape(-1, cfg.padded_vocab)
    lse_N, nll_N = cross_entropy.nll_and_lse(logits_NV, targets_BT.reshape(-1))
    objective_N = nll_N + z_loss * jnp.square(lse_N) if z_loss else nll_N
    total = jnp.sum(weight_N * objective_N)
    sums = {"nll": weight_N * nll_N, "lse_sq": weight_N * jnp.square(lse_N), "lse": weight_N * lse_N,
            "logit_sq": weight_N * cross_entropy.mean_square_logit(logits_NV, cfg.vocab_size)}
    sums = jax.lax.stop_gradient(jax.tree.map(jnp.sum, sums))
  count = jnp.maximum(jnp.sum(weight_N), 1.0)
  terms = {"nll": sums["nll"] / count, "z_loss": z_loss * sums["lse_sq"] / count,
           "log_z": sums["lse"] / count, "logit_rms": jnp.sqrt(sums["logit_sq"] / count),
           **(per_layer or {})}
  return total / count, terms


def _chunked_sums(params, x_BTD, targets_BT, weight_N, cfg: ModelConfig, z_loss: float):
  x_ND = _head_input(params, x_BTD, cfg).reshape(-1, x_BTD.shape[-1])
  w_VD = params["wte"] if cfg.tie_embeddings else params["lm_head"].T
  return cross_entropy.weighted_loss_sums(x_ND.astype(compute_dtype(cfg)), w_VD,
                                          targets_BT.reshape(-1), weight_N, cfg.vocab_size,
                                          cfg.loss_chunk, z_loss)


# ----------------------------------------------------------------------------- counting


def count_params(cfg: ModelConfig) -> int:
  """The exact number of parameters, from the config alone (equals the leaves of init_params)."""
  D, F, L = cfg.d_model, cfg.mlp_dim, cfg.n_layer
  f_in = 2 * F if cfg.activation == "swiglu" else F
  b = 1 if cfg.bias else 0  # the linear layers' biases (norm_size counts the norms')
  attn = D * 3 * D + b * 3 * D + D * D + b * D
  mlp_ = D * f_in + b * f_in + F * D + b * D
  norms = 4 if placement(cfg.norm).out_norm else 2
  block = attn + mlp_ + norms * norm_size(cfg) + ((2 + 2 * b) * cfg.head_dim if cfg.qk_norm else 0)
  total = L * block + cfg.padded_vocab * D + position_params(cfg)
  total += norm_size(cfg) if placement(cfg.norm).final_norm else 0
  total += 0 if cfg.tie_embeddings else D * cfg.padded_vocab
  return total + (1 if cfg.norm_type == "dyt" else 0)  # DyT's embedding scale


def position_params(cfg: ModelConfig) -> int:
  """The learned position table's size, ``block_size * d_model`` (0 under ``position="rope"``)."""
  return cfg.block_size * cfg.d_model if cfg.position == "learned" else 0


def count_layer_norms(cfg: ModelConfig) -> int:
  """Two per block (four under peri), plus the final one where the placement has it."""
  per_block = 4 if placement(cfg.norm).out_norm else 2
  return per_block * cfg.n_layer + (1 if placement(cfg.norm).final_norm else 0)


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None, causal: bool = False) -> float:
  """Training FLOPs per token, ``6 N + 12 L H Q T`` (PaLM, appendix B); N excludes positions.

  PaLM's attention term counts the whole ``T x T`` square of scores. ``causal=True``
  counts only the pairs a causal kernel must compute (each query and the keys at or
  before it, ``(T + 1) / 2`` on average): ``6 N + 12 L H Q (T + 1) / 2``.
  """
  T = cfg.block_size if seq_len is None else seq_len
  n = count_params(cfg) - position_params(cfg)
  keys = (T + 1) / 2 if causal else T
  return 6.0 * n + 12.0 * cfg.n_layer * cfg.n_head * cfg.head_dim * keys

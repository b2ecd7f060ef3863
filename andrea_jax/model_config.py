"""The model's config: ``ModelConfig``, its shape and variant, checked as it is built.

The allowed values of its fields (``INITS``, ``ACTIVATIONS``, ``POSITIONS``, ...; the norms'
``NORM_TYPES`` and ``NORMS`` are ``norms.py``'s), the ``"auto"`` settings resolved for the
platform (``resolve_auto``; ``compute_dtype``, the dtype of the matmuls and activations), and
``Params``, the parameter tree's type. ``config.py``'s ``RunConfig`` holds a ``ModelConfig``
as its ``model`` group.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import errors
from andrea_jax import mup
from andrea_jax.norms import NORM_TYPES, NORMALISERS, NORMS, normaliser, placement

Params = Mapping[str, Any]

INITS = ("gpt2", "xavier")  # and AUTO: xavier under norm="deepnorm", gpt2 otherwise (resolve_init)
ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "relu2", "swiglu")
POSITIONS = ("learned", "rope")  # a learned table wpe (GPT-2); rotary (Su et al. 2021)
DTYPES = ("float32", "bfloat16", "float16", "float64")
AUTO = "auto"  # compute_dtype / attention_impl / remat_policy chosen from the platform (resolve_auto)
REMAT_POLICIES = ("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable")
ATTENTION_IMPLS = ("xla", "xla_flash", "cudnn", "auto")


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
  # DyT's alpha_0 per position (Zhu et al.'s LLaMA code: attn / ffn / dec alpha init values):
  # the attention sublayer's norms, the final norm; 0 = dyt_alpha_init.
  dyt_alpha_attn_init: float = 0.0
  dyt_alpha_final_init: float = 0.0
  # A norm of norm_type on the embedding output (OLMo-core's TransformerConfig.embedding_norm).
  embedding_norm: bool = False
  # The final norm's type (ln_f): "" = norm_type's.
  final_norm_type: str = ""
  # The token embedding's init std; an untied head's (OLMo-core keeps them apart).
  embedding_init_std: float = 0.02
  head_init_std: float = 0.02
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
  init: str = "auto"
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
                          ("attention_impl", ATTENTION_IMPLS), ("init", INITS + (AUTO,)),
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
    for name in ("tie_embeddings", "qk_norm", "zero_query_init", "bias", "embedding_norm"):
      if not isinstance(getattr(self, name), bool):
        raise errors.ConfigError(f"ModelConfig.{name}={getattr(self, name)!r}: expected True or "
                                 f"False")
    self._check_norms()
    self._check_mup()

  def _check_norms(self):
    self._check_around_blocks()
    f = self.mix_post_fraction
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
      raise errors.ConfigError(f"model.mix_post_fraction={f!r}: expected a fraction in [0, 1] of "
                               f"the blocks that are post-LN under norm='mix' (Mix-LN's 0.25)")
    if not isinstance(self.norm_depth_scaling, bool):
      raise errors.ConfigError(f"model.norm_depth_scaling={self.norm_depth_scaling!r}: expected "
                               f"True or False")
    if self.norm_depth_scaling and not placement(self.norm).depth_scaling:
      raise errors.ConfigError(f"model.norm_depth_scaling=True with model.norm={self.norm!r}: "
                               f"LayerNorm scaling (Sun et al. 2025, section 4) scales a pre-norm's "
                               f"output and gives no rule for this placement; use norm='pre'")
    if self.norm_depth_scaling and not normaliser(self.norm_type).statistics:
      scaled = " or ".join(repr(n) for n, t in NORMALISERS.items() if t.statistics)
      raise errors.ConfigError(f"model.norm_depth_scaling=True with model.norm_type="
                               f"{self.norm_type!r}: Sun et al. 2025 scale a LayerNorm/RMSNorm "
                               f"output; this norm computes no statistic of its input and the "
                               f"paper gives it no rule; use norm_type={scaled}")
    own = "norm_depth_scaling=True" if self.norm_depth_scaling else f"norm={self.norm!r}"
    if self.depth_rule != "none" and (self.norm_depth_scaling or placement(self.norm).own_depth_rule):
      raise errors.ConfigError(f"model.depth_rule={self.depth_rule!r} with model.{own}: CompleteP's "
                               f"rule is derived for pre-LN and this has a depth rule of its own; "
                               f"no paper combines them; set depth_rule='none'")

  def _check_around_blocks(self):
    """The choices around the blocks: the embedding's norm and init, the final norm, DyT's alphas."""
    for name in ("embedding_init_std", "head_init_std"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise errors.ConfigError(f"model.{name}={value!r}: expected a positive std, e.g. 0.02 "
                                 f"(GPT-2's) or 1.0 (OLMo-core's llama init of the embedding)")
    if self.tie_embeddings and self.head_init_std != 0.02:
      raise errors.ConfigError(f"model.head_init_std={self.head_init_std!r} with "
                               f"tie_embeddings=True: a tied head is the embedding "
                               f"(embedding_init_std); set tie_embeddings=False or leave it 0.02")
    if self.final_norm_type not in ("",) + NORM_TYPES:
      raise errors.ConfigError(f"model.final_norm_type={self.final_norm_type!r}: expected '' "
                               f"(norm_type's) or one of {NORM_TYPES}")
    if self.final_norm_type and not placement(self.norm).final_norm:
      raise errors.ConfigError(f"model.final_norm_type={self.final_norm_type!r} with model.norm="
                               f"{self.norm!r}: this placement has no final norm; leave it ''")
    for name, uses in (("dyt_alpha_attn_init", self.norm_type), ("dyt_alpha_final_init",
                                                                 self.final_norm)):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise errors.ConfigError(f"model.{name}={value!r}: expected 0 (dyt_alpha_init) or a "
                                 f"positive alpha_0 (Zhu et al.'s LLaMA 7B: attention 0.8, final 0.2)")
      if value and not normaliser(uses).alpha:
        with_alpha = " or ".join(repr(n) for n, t in NORMALISERS.items() if t.alpha)
        raise errors.ConfigError(f"model.{name}={value!r} but that norm is {uses!r}, not DyT: "
                                 f"set norm_type (final_norm_type) to {with_alpha} or leave it 0")

  @property
  def final_norm(self) -> str:
    """The final norm's type (``ln_f``): ``final_norm_type``, or ``norm_type``'s if unset."""
    return self.final_norm_type or self.norm_type

  @property
  def init_scheme(self) -> str:
    """``init`` resolved: ``"auto"`` is Xavier under DeepNorm, GPT-2's otherwise (resolve_init)."""
    return resolve_init(self.init, self.norm)

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
    init = self.init if self.init == self.init_scheme else f"{self.init} ({self.init_scheme})"
    if self.depth_rule != "none" and self.init_scheme != "gpt2":
      raise errors.ConfigError(f"ModelConfig.init={init!r} with depth_rule="
                               f"{self.depth_rule!r}: the rule scales the 'gpt2' init by depth; "
                               f"expected init='gpt2'")
    if self.parametrization == "mup" and self.init_scheme != "gpt2":
      raise errors.ConfigError(f"ModelConfig.init={init!r} with parametrization='mup': muP "
                               f"scales the 'gpt2' init by width itself; expected init='gpt2'")
    refusal = mup.refusal(self)
    if refusal:
      raise errors.ConfigError(refusal)

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


def resolve_init(init: str, norm: str) -> str:
  """The init scheme ``init`` names under placement ``norm``: ``"auto"`` is ``"xavier"`` under
  ``"deepnorm"`` (DeepNet's init is Xavier times beta: Wang et al. 2022, Figure 2) and
  ``"gpt2"`` otherwise (the placement's ``init``); an explicit scheme is itself. The one place
  ``"auto"`` is resolved (``ModelConfig.init_scheme``; ``resume.config_changes`` compares saved
  configs by it)."""
  if init != AUTO:
    return init
  return placement(norm).init


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

"""The residual norms and where they sit: what normalises, and each placement's residual pattern.

What normalises (``model.norm_type``): an entry of ``NORMALISERS``, a ``NormType`` (LayerNorm
``layer_norm``, RMSNorm ``rms_norm`` or DyT ``dyt``, each in at least float32) that says what
its leaves are and what its readers may do with it; ``normalise`` applies one to a norm's
leaves (``norm_params``'s, ``norm_size`` of them).

Where it sits (``model.norm``): an entry of ``PLACEMENTS``, a ``Placement`` whose sublayer is
one residual pattern (pre, post, peri, reordered, deepnorm, mix; docs/model.md has the table);
``residual_sublayer`` wraps a branch in it. What differs by layer (Mix-LN's post-LN blocks,
LayerNorm scaling's 1/sqrt(l)) is the layer's ``Site`` (``layer_site``), read from the layer
index the scan walks beside the parameters.

A reader of the model asks a fact of the two tables (``placement(cfg.norm)``,
``normaliser(cfg.norm_type)``), never a name: a new entry is one line in its table.

Below the config (``model_config.py`` checks ``model.norm`` and ``model.norm_type`` against
the names here), so the functions that read a config take it as ``cfg`` (a ``ModelConfig``)
without naming its type, as ``mup.py`` does.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp

from andrea_jax import errors
from andrea_jax.precision import at_least_f32


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


@dataclasses.dataclass(frozen=True)
class NormType:
  """What normalises: ``apply(x, leaves, eps)`` is the norm; its leaves (``norm_params``) are
  ``scale`` (ones at init), a ``bias`` (zeros; where ``bias`` and ``ModelConfig.bias``) and a
  scalar ``alpha`` (where ``alpha``; ``dyt_alphas``' value at init). Every reader of the model
  (the init, the count, the Flax twin, the export, the lens, the diagnostics) looks a type up
  here (``normaliser``), so an unknown one is an error everywhere."""

  apply: Callable[[jax.Array, Mapping[str, Any], float], jax.Array]
  bias: bool = True  # a bias leaf (under ModelConfig.bias)
  alpha: bool = False  # a learned scalar alpha: dyt_alpha_*_init set it, dyt_saturation reads it
  statistics: bool = True  # divides by a statistic of its input: LayerNorm scaling applies
  embedding_scale: bool = False  # the model learns a scalar on the embedding (emb_scale)
  gpt2: bool = False  # GPT-2's LayerNorm (scale and bias): writable as GPT-2 weights
  lens: bool = False  # the lens's frozen-std linearisation (centre, divide by the std) is its own


NORMALISERS: dict[str, NormType] = {
    # LayerNorm (Ba et al. 2016): scale 1, bias 0 (no bias: ModelConfig.bias=False).
    "layernorm": NormType(lambda x, p, eps: layer_norm(x, p["scale"], p.get("bias"), eps),
                          gpt2=True, lens=True),
    # RMSNorm (Zhang & Sennrich 2019, eq. 4): scale 1 and no bias.
    "rmsnorm": NormType(lambda x, p, eps: rms_norm(x, p["scale"], eps), bias=False),
    # DyT (Zhu et al. 2025, section 3: alpha_0 = 0.5 by default, gamma ones, beta zeros; no bias
    # under bias=False, as their LLaMA code has none); with it the model learns a scalar on the
    # embedding (their LLaMA code's shared_scale: init.embedding_scale_init). It computes no
    # statistic, so LayerNorm scaling gives it no rule.
    "dyt": NormType(lambda x, p, eps: dyt(x, p["alpha"], p["scale"], p.get("bias")), alpha=True,
                    statistics=False, embedding_scale=True),
}
NORM_TYPES = tuple(NORMALISERS)  # what normalises (normaliser); NORMS: where


def normaliser(norm_type: str) -> NormType:
  """The table entry of a norm type (``model.norm_type``, ``model.final_norm``); an unknown
  name is a one-line error naming the field."""
  try:
    return NORMALISERS[norm_type]
  except KeyError:
    raise errors.ConfigError(f"model.norm_type={norm_type!r}: expected one of {NORM_TYPES}") from None


def norm_params(cfg, *lead: int, norm_type: str | None = None, alpha: float = 0.0) -> dict:
  """A norm's leaves for ``norm_type`` (default ``cfg.norm_type``; ``lead``: a stacked layer
  axis, if any), as its ``NormType`` says: ``alpha`` (one scalar per norm) ``alpha`` if given,
  else ``dyt_alpha_init``; ``scale`` 1; ``bias`` 0.
  """
  entry = normaliser(norm_type or cfg.norm_type)
  D, dtype = cfg.d_model, jnp.dtype(cfg.param_dtype)
  leaves = {"alpha": jnp.full(lead, alpha or cfg.dyt_alpha_init, dtype)} if entry.alpha else {}
  leaves["scale"] = jnp.ones((*lead, D), dtype)
  if entry.bias and cfg.bias:
    leaves["bias"] = jnp.zeros((*lead, D), dtype)
  return leaves


def dyt_alphas(cfg) -> dict[str, float]:
  """DyT's alpha_0 by position (Zhu et al. 2025, their LLaMA code, github.com/jiachenzhu/DyT,
  other_tasks/LLaMA/fms_fsdp/models/llama.py: the attention norm ``attn_alpha_init_value``, the
  FFN norm ``ffn_alpha_init_value``, the final ``dec_alpha_init_value``): ``ln_1`` (and peri's
  ``ln_1_out``) ``dyt_alpha_attn_init``, ``ln_f`` ``dyt_alpha_final_init``, every other
  ``dyt_alpha_init`` (a field at 0 falls back to it)."""
  a = cfg.dyt_alpha_init
  return {"ln_1": cfg.dyt_alpha_attn_init or a, "ln_1_out": cfg.dyt_alpha_attn_init or a,
          "ln_2": a, "ln_2_out": a, "ln_emb": a, "ln_f": cfg.dyt_alpha_final_init or a}


def norm_size(cfg, norm_type: str | None = None) -> int:
  """The number of parameters of one norm of ``norm_type`` (default ``cfg.norm_type``):
  ``norm_params`` without a lead axis."""
  entry = normaliser(norm_type or cfg.norm_type)
  return (1 + (entry.bias and cfg.bias)) * cfg.d_model + entry.alpha


def normalise(x: jax.Array, p: Mapping[str, Any], norm_type: str = "layernorm",
              eps: float = 1e-5) -> jax.Array:
  """The residual norm ``norm_type`` with leaves ``p`` (``norm_params``'s)."""
  return normaliser(norm_type).apply(x, p, eps)


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
  Every reader of the model (``block_forward``, the init, the parameter count, the config's
  checks, the Flax twin, the export, the lens) looks a placement up here (``placement``) and
  reads its facts below, so an unknown one is an error everywhere rather than silently one of
  these."""

  sublayer: Callable[[jax.Array, Callable, Callable, Callable | None, Site], jax.Array]
  final_norm: bool
  out_norm: bool = False  # a second norm per sublayer, on the branch output (ln_1_out, ln_2_out)
  alpha: Callable[[int], float] | None = None  # residual scale from n_layer (DeepNorm)
  init_gain: Callable[[int], float] | None = None  # init gain from n_layer (block_init_stds)
  by_layer: bool = False  # the pattern differs by layer: block_forward needs the layer index
  depth_scaling: bool = False  # takes model.norm_depth_scaling (a pre-norm to scale)
  own_depth_rule: bool = False  # a rule by depth of its own: CompleteP's depth_rule is refused
  init: str = "gpt2"  # the init scheme init="auto" resolves to (model_config.resolve_init)
  gpt2: bool = False  # GPT-2's block (pre-norm, a final ln_f): writable as GPT-2 weights
  # Direct logit attribution's linearisation (tools/lens.py): "final" (one frozen final norm,
  # one direction for every component), "blocks" (pulled back through every later block's
  # norm), None (none).
  lens: str | None = None


PLACEMENTS: dict[str, Placement] = {
    # Pre-norm x + F(N(x)) (GPT-2; Xiong et al. 2020), with a final norm; N(x) / sqrt(l) under
    # norm_depth_scaling (Sun et al. 2025, section 4, eq. for LayerNorm scaling).
    "pre": Placement(lambda x, f, n, n_out, s: x + f(_scaled(n(x), s)), final_norm=True,
                     depth_scaling=True, gpt2=True, lens="final"),
    # Post-norm N(x + F(x)) (Vaswani et al. 2017, section 3.1), no final norm.
    "post": Placement(lambda x, f, n, n_out, s: n(x + f(x)), final_norm=False, lens="blocks"),
    # Peri-LN x + N_out(F(N(x))) (Kim et al. 2025, section 3, eq. 3; Sandwich-LN, Ding et al.
    # 2021; Gemma 2's post-attention/post-FFW norms): a second norm on each branch output.
    "peri": Placement(lambda x, f, n, n_out, s: x + n_out(f(n(x))), final_norm=True, out_norm=True),
    # Reordered x + N(F(x)) (OLMo 2, OLMo et al. 2024, section 3.2.1): the branch reads the raw
    # stream and its output is normalised; the one norm per sublayer sits in ln_1 / ln_2.
    "reordered": Placement(lambda x, f, n, n_out, s: x + n(f(x)), final_norm=True),
    # DeepNorm N(alpha x + F(x)) (Wang et al. 2022, "DeepNet", section 3 and Figure 2, the
    # decoder-only column): alpha = (2L)^(1/4), init gain beta = (8L)^(-1/4), which multiplies
    # Xavier's init (so init="auto" is Xavier); post-LN, so no final norm.
    "deepnorm": Placement(lambda x, f, n, n_out, s: n(s.alpha * x + f(x)), final_norm=False,
                          alpha=lambda L: (2 * L) ** 0.25, init_gain=lambda L: (8 * L) ** -0.25,
                          own_depth_rule=True, init="xavier"),
    # Mix-LN (Li et al. 2024, section 4): post-LN in the first mix_post_layers(cfg) blocks, pre-LN
    # after; the pre-LN part ends in a final norm (the paper's code keeps LLaMA's).
    "mix": Placement(_mix, final_norm=True, by_layer=True, own_depth_rule=True),
}
NORMS = tuple(PLACEMENTS)


def placement(norm: str) -> Placement:
  """The table entry of ``model.norm``; an unknown name is a one-line error naming the field."""
  try:
    return PLACEMENTS[norm]
  except KeyError:
    raise errors.ConfigError(f"model.norm={norm!r}: expected one of {NORMS}") from None


def mix_post_layers(cfg) -> int:
  """Mix-LN's post-LN blocks: ``mix_post_fraction * n_layer`` rounded half up (0.25 x 12 = 3, as
  the authors' code runs its 12-layer model: ``POST_NUM=3``, github.com/pixeli99/MixLN)."""
  return int(math.floor(cfg.mix_post_fraction * cfg.n_layer + 0.5))


def layer_site(cfg, layer: Any = None) -> Site:
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
                      ln_params: Mapping[str, Any], norm: str = "pre", eps: float = 1e-5,
                      multiplier: float = 1.0,
                      tap: Callable[[jax.Array], None] | None = None,
                      sublayer: Callable | None = None,
                      norm_type: str = "layernorm", out_params: Mapping[str, Any] | None = None,
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
